"""Repeated-token datasets: structure, variation, determinism, bad input."""

import pytest
import torch

from interp import InterpError
from interp.datasets import HELD_OUT_LENGTHS, TRAIN_LENGTHS, repeated_random_tokens, repeated_tokens


def test_structure_of_each_sequence():
    d = repeated_tokens(64, d_vocab=64, seq_len=48, segment_lengths=(5, 9, 14), seed=3)
    assert (d.tokens[:, 0] == 0).all() and (d.tokens[:, 1:] != 0).all()
    for b in range(64):
        L, s1, s2 = int(d.segment_len[b]), int(d.first_start[b]), int(d.second_start[b])
        assert s2 == s1 + L
        assert torch.equal(d.tokens[b, s1:s2], d.tokens[b, s2 : s2 + L])
        # prefix and segment tokens are distinct, so each repeat has one earlier occurrence
        assert len(set(d.tokens[b, 1:s2].tolist())) == s2 - 1
        assert d.predictable[b].nonzero().flatten().tolist() == list(range(s2 + 1, s2 + L))
        assert d.loss_mask[b].nonzero().flatten().tolist() == list(range(s2, s2 + L - 1))


def test_length_and_offset_vary_per_sequence():
    d = repeated_tokens(256, d_vocab=64, seq_len=48, seed=0)
    assert set(d.segment_len.tolist()) == set(TRAIN_LENGTHS)
    assert len(set(d.first_start.tolist())) > 10
    # copies end anywhere in the context, not only early
    assert int((d.second_start + d.segment_len).max()) >= 46


def test_fill_mode_repeats_to_the_end():
    d = repeated_tokens(8, d_vocab=64, seq_len=40, segment_lengths=(4,), repeats=None, seed=1)
    for b in range(8):
        s1 = int(d.first_start[b])
        seg = d.tokens[b, s1 : s1 + 4]
        for i in range(s1, 40):
            assert d.tokens[b, i] == seg[(i - s1) % 4]
        assert d.predictable[b, s1 + 5 :].all()


def test_deterministic_by_seed():
    a = repeated_tokens(8, d_vocab=64, seq_len=48, seed=7)
    b = repeated_tokens(8, d_vocab=64, seq_len=48, seed=7)
    c = repeated_tokens(8, d_vocab=64, seq_len=48, seed=8)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_train_and_held_out_lengths_are_disjoint():
    assert not set(TRAIN_LENGTHS) & set(HELD_OUT_LENGTHS)


def test_classic_probe():
    d = repeated_random_tokens(4, 10, d_vocab=50, seed=0)
    assert d.tokens.shape == (4, 21)
    assert torch.equal(d.tokens[:, 1:11], d.tokens[:, 11:])
    assert d.predictable[:, 12:].all() and not d.predictable[:, :12].any()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(segment_lengths=(30,)), "does not fit twice"),
        (dict(segment_lengths=(1,)), ">= 2"),
        (dict(repeats=1), "repeats must be"),
        (dict(d_vocab=8), "distinct content tokens"),
    ],
)
def test_bad_input(kwargs, match):
    base = dict(d_vocab=64, seq_len=48, seed=0)
    with pytest.raises(InterpError, match=match):
        repeated_tokens(4, **{**base, **kwargs})


def test_name_mover_prompts_pair_clean_and_corrupted(smollm):
    from interp.datasets import first_names, name_mover_prompts, name_mover_templates

    assert len(name_mover_templates("train")) >= 5 and len(name_mover_templates("held_out")) >= 3
    assert len(first_names()) >= 20
    assert not set(name_mover_templates("train")) & set(name_mover_templates("held_out"))
    p = name_mover_prompts(12, seed=1, tokenizer=smollm.tokenizer)
    assert p.clean.shape == p.corrupted.shape == (12, 15)
    assert torch.equal(torch.cat([smollm.to_tokens(t) for t in p.texts]), p.clean)
    rows = torch.arange(12)
    assert (p.clean[rows, p.io_pos] == p.io_ids).all() and (
        p.clean[rows, p.s2_pos] == p.s_ids
    ).all()
    # the corrupted prompt repeats the indirect object where the subject was: the answer flips
    assert (p.corrupted[rows, p.s2_pos] == p.io_ids).all()
    differs = (p.clean != p.corrupted).sum(1)
    assert (differs == 1).all() and (p.io_ids != p.s_ids).all()
    assert len(set(p.templates)) == 6  # every training template, in turn
    assert torch.equal(name_mover_prompts(12, seed=1, tokenizer=smollm.tokenizer).clean, p.clean)


def test_name_mover_prompts_bad_input(smollm):
    from interp.datasets import name_mover_prompts

    with pytest.raises(InterpError, match="is 7 tokens for this tokenizer"):
        name_mover_prompts(2, tokenizer=smollm.tokenizer, names=["Mary", "Bartholomew-Smythe"])
    with pytest.raises(InterpError, match="different lengths"):
        name_mover_prompts(
            4,
            tokenizer=smollm.tokenizer,
            templates=[
                "When {A} and {B} left, {S} gave it to",
                "Then {A} met {B} and {S} said hi to",
            ],
        )
    with pytest.raises(InterpError, match="split must be"):
        name_mover_prompts(2, tokenizer=smollm.tokenizer, split="test")

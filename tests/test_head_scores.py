"""Stripe scores: exact on hand-built patterns, equal to detect_head and ARENA's formulas."""

import re
from pathlib import Path

import pytest
import torch
from conftest import native_bridge

from interp import InterpError
from interp.analysis.heads.scores import head_scores, induction_scores, pattern_scores
from interp.datasets import repeated_random_tokens
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer


def tiny(vocab=None, n_ctx=32, d_vocab=20, seed=0):
    cfg = AttnOnlyConfig(
        n_layers=2,
        n_heads=2,
        d_model=16,
        d_head=8,
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        seed=seed,
        vocab=vocab,
    )
    return AttnOnlyTransformer(cfg).eval()


def worked_example():
    """BOS + 4 distinct tokens, twice (9 tokens), and two hand-built heads.

    Head 0 is a perfect induction head: each second-half query attends to the
    key after its token's first occurrence (q -> q - 3); every other row parks on BOS.
    Head 1 is a perfect previous-token head (q -> q - 1; row 0 on itself).
    """
    tokens = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7, 8]])
    ind = torch.zeros(9, 9)
    prev = torch.zeros(9, 9)
    for q in range(9):
        ind[q, q - 3 if q >= 5 else 0] = 1.0
        prev[q, max(q - 1, 0)] = 1.0
    return tokens, [torch.stack([ind, prev])[None], torch.stack([prev, ind])[None]]


@pytest.mark.parametrize(
    "convention, induction, previous",
    [("interp", 1.0, 1.0), ("transformer_lens", 4 / 9, 8 / 9), ("arena", 5 / 6, 1.0)],
)
def test_worked_example_in_every_convention(convention, induction, previous):
    tokens, pats = worked_example()
    df = pattern_scores(pats, tokens, convention=convention).set_index("label")
    assert df.loc["L0H0", "induction"] == pytest.approx(induction)
    assert df.loc["L0H1", "previous_token"] == pytest.approx(previous)
    assert df.attrs["convention"] == convention


def test_the_heads_page_quotes_the_computed_numbers():
    """The heads page's worked example (docs/heads.md, stripe scores) states the numbers the
    code gives for it."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "heads.md").read_text()
    section = text[text.index("## Stripe scores") :]
    quoted = dict(re.findall(r"\| `(\w+)` \| ([0-9.]+) \|", section))
    tokens, pats = worked_example()
    for convention in ("interp", "transformer_lens", "arena"):
        df = pattern_scores(pats, tokens, convention=convention).set_index("label")
        assert float(quoted[convention]) == pytest.approx(df.loc["L0H0", "induction"], abs=5e-4)


def test_tidy_columns_and_hook_path_equals_cache_path():
    model = tiny()
    tokens = repeated_random_tokens(4, 10, d_vocab=20, seed=1).tokens
    for convention in ("interp", "transformer_lens", "arena"):
        df = head_scores(model, tokens, convention=convention)
        assert list(df.columns) == [
            "layer",
            "head",
            "label",
            "induction",
            "previous_token",
            "duplicate_token",
        ]
        assert df["label"].tolist() == ["L0H0", "L0H1", "L1H0", "L1H1"]
        _, cache = model.run_with_cache(tokens)
        torch.testing.assert_close(
            torch.tensor(
                head_scores(model, tokens, convention=convention, cache=cache)
                .iloc[:, 3:]
                .to_numpy()
            ),
            torch.tensor(df.iloc[:, 3:].to_numpy()),
        )


@pytest.mark.parametrize("exclude_bos", [False, True])
@pytest.mark.parametrize("exclude_current_token", [False, True])
@pytest.mark.parametrize("error_measure", ["mul", "abs"])
def test_transformer_lens_convention_equals_detect_head(
    exclude_bos, exclude_current_token, error_measure
):
    """Our batched computation equals TL's detect_head on a list of prompts (it averages them)."""
    from transformer_lens.head_detector import detect_head

    vocab = tuple(f"t{i}" for i in range(20))
    model = tiny(vocab=vocab)
    ids = repeated_random_tokens(3, 10, d_vocab=20, seed=2).tokens  # [3, 21] < n_ctx
    texts = [" ".join(vocab[i] for i in row) for row in ids]
    opts = dict(
        exclude_bos=exclude_bos,
        exclude_current_token=exclude_current_token,
        error_measure=error_measure,
    )
    ours = head_scores(model, ids, convention="transformer_lens", **opts)
    for stripe, name in (
        ("induction", "induction_head"),
        ("previous_token", "previous_token_head"),
        ("duplicate_token", "duplicate_token_head"),
    ):
        tl = detect_head(model, texts, name, **opts).flatten().double()
        got = torch.tensor(ours[stripe].to_numpy(), dtype=torch.float64)
        # scores are means of attention weights (scale 1), summed in float32 in another
        # order than TL's (the float64 cast comes after): 1e-6 of 1, about 8 float32 ulps
        torch.testing.assert_close(got, tl, atol=1e-6, rtol=0)


def test_transformer_lens_convention_on_a_bridge():
    from transformer_lens.head_detector import detect_head

    from interp.models.hf import random_gpt2

    model = random_gpt2(2, vocab=30, n_ctx=40)
    data = repeated_random_tokens(2, 9, d_vocab=30, seed=4)
    texts = [" ".join(f"t{i}" for i in row[1:]) for row in data.tokens]  # to_tokens adds t0
    ours = head_scores(model, data.tokens, convention="transformer_lens", exclude_bos=True)
    tl = detect_head(model, texts, "induction_head", exclude_bos=True).flatten().double()
    # means of attention weights (scale 1) in float32: 1e-6 of 1, about 8 ulps (as above)
    torch.testing.assert_close(
        torch.tensor(ours["induction"].to_numpy(), dtype=torch.float64), tl, atol=1e-6, rtol=0
    )


def test_arena_convention_equals_the_diagonal_formula(induction_model):
    """ARENA: pattern.diagonal(1 - L).mean() (induction), .diagonal(-1).mean() (previous token)."""
    data = repeated_random_tokens(5, 23, d_vocab=64, seed=7)
    ours = head_scores(induction_model, data.tokens, convention="arena")
    _, cache = induction_model.run_with_cache(data.tokens)
    L = 23
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # [batch, head, q, k]
        for head in range(2):
            row = ours[(ours["layer"] == layer) & (ours["head"] == head)]
            p = pattern[:, head]
            want_ind = torch.stack([x.diagonal(1 - L) for x in p]).mean()
            want_prev = torch.stack([x.diagonal(-1) for x in p]).mean()
            # float32 means of attention weights (scale 1) in another order: 1e-6 of 1,
            # about 8 float32 ulps
            assert float(row["induction"].iloc[0]) == pytest.approx(float(want_ind), abs=1e-6)
            assert float(row["previous_token"].iloc[0]) == pytest.approx(float(want_prev), abs=1e-6)


def test_conventions_relate_exactly_without_bos_exclusion():
    """ours = TL x n_rows / n_rows_with_stripe, per sequence, with exclude_bos=False."""
    from interp.analysis.heads.stripes import stripe_mask

    model = tiny()
    ids = repeated_random_tokens(1, 12, d_vocab=20, seed=3).tokens
    ours = head_scores(model, ids, exclude_bos=False)["induction"].to_numpy()
    tl = head_scores(model, ids, convention="transformer_lens")["induction"].to_numpy()
    rows = int(stripe_mask(ids, "induction", exclude_bos=False).any(-1).sum())
    torch.testing.assert_close(torch.tensor(ours * rows / ids.shape[1]), torch.tensor(tl))


def test_works_on_transformer_bridge():
    bridge = native_bridge(n_ctx=40, d_vocab=30)
    df = induction_scores(bridge)
    assert len(df) == 8 and df["induction"].between(0, 1).all()
    ours = AttnOnlyTransformer.from_bridge(bridge).eval()
    tokens = repeated_random_tokens(2, 15, d_vocab=30, seed=0).tokens
    torch.testing.assert_close(
        torch.tensor(head_scores(bridge, tokens).iloc[:, 3:].to_numpy()),
        torch.tensor(head_scores(ours, tokens).iloc[:, 3:].to_numpy()),
        atol=1e-5,
        rtol=1e-4,
    )


def test_bad_input():
    model = tiny()
    with pytest.raises(InterpError, match="exceeds the model's context"):
        head_scores(model, torch.zeros(1, 40, dtype=torch.long))
    with pytest.raises(InterpError, match="outside the vocabulary"):
        head_scores(model, torch.full((1, 5), 99))
    with pytest.raises(InterpError, match="empty batch"):
        head_scores(model, torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(InterpError, match="no query position has a induction stripe"):
        head_scores(model, torch.arange(1, 10)[None], stripes=("induction",))
    with pytest.raises(InterpError, match="not a hooked model"):
        head_scores(torch.nn.Linear(2, 2), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(InterpError, match="the cache is empty"):
        head_scores(model, torch.tensor([[0, 1, 0, 1]]), cache={})
    with pytest.raises(InterpError, match="unknown convention"):
        head_scores(model, convention="tl")
    with pytest.raises(InterpError, match="belong to convention='transformer_lens'"):
        head_scores(model, error_measure="abs")
    with pytest.raises(InterpError, match="belong to convention='interp'"):
        head_scores(model, convention="arena", loss_mask=torch.ones(16, 101, dtype=torch.bool))
    with pytest.raises(InterpError, match="scores the repeated probe"):
        head_scores(model, torch.tensor([[0, 1, 2, 3, 4]]), convention="arena")
    with pytest.raises(InterpError, match="stripes must be"):
        head_scores(model, stripes=("induction", "bogus"))
    with pytest.raises(InterpError, match="loss_mask must be a bool"):
        head_scores(model, loss_mask=torch.ones(16, 31))

"""Stripe scores: exact on synthetic patterns, related to detect_head, any hooked model."""

import pytest
import torch
from conftest import native_bridge

from interp import InterpError
from interp.analysis.induction import head_scores, induction_scores, stripe_mask
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


def test_perfect_synthetic_heads_score_one():
    model = tiny()
    tokens = repeated_random_tokens(3, 8, d_vocab=20, seed=0).tokens  # [3, 17]
    n = tokens.shape[1]
    prev = torch.zeros(3, n, n)
    prev[:, 0, 0] = 1
    prev[:, torch.arange(1, n), torch.arange(n - 1)] = 1
    ind = stripe_mask(tokens, "induction").float()
    rows = ind.sum(-1, keepdim=True)
    ind = torch.where(rows > 0, ind / rows.clamp_min(1), prev)  # induction where defined
    uniform = torch.tril(torch.ones(n, n))
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(3, n, n)
    patterns = torch.stack([prev, ind], 1)  # layer 0: [prev, ind]
    cache = {
        "blocks.0.attn.hook_pattern": patterns,
        "blocks.1.attn.hook_pattern": torch.stack([uniform, uniform], 1),
    }
    df = head_scores(model, tokens, cache=cache).set_index("label")
    assert df.loc["L0H0", "previous_token"] == pytest.approx(1.0)
    assert df.loc["L0H1", "induction"] == pytest.approx(1.0)
    assert df.loc["L1H0", "induction"] < 0.2


def test_tidy_columns_and_hook_path_equals_cache_path():
    model = tiny()
    tokens = repeated_random_tokens(4, 10, d_vocab=20, seed=1).tokens
    df = head_scores(model, tokens)
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
        torch.tensor(head_scores(model, tokens, cache=cache).iloc[:, 3:].to_numpy()),
        torch.tensor(df.iloc[:, 3:].to_numpy()),
    )


def test_relation_to_transformer_lens_detect_head():
    """detect_head ("mul") divides stripe mass by all rows; ours by rows with a stripe."""
    from transformer_lens.head_detector import detect_head

    vocab = tuple(f"t{i}" for i in range(20))
    model = tiny(vocab=vocab)
    ids = repeated_random_tokens(1, 12, d_vocab=20, seed=2).tokens  # [1, 25] < n_ctx
    text = " ".join(vocab[i] for i in ids[0])
    for kind, name in (
        ("induction", "induction_head"),
        ("previous_token", "previous_token_head"),
        ("duplicate_token", "duplicate_token_head"),
    ):
        ours = head_scores(model, ids, kinds=(kind,), exclude_bos=False)[kind].to_numpy()
        tl = detect_head(model, text, name).flatten().numpy()
        n_rows = int(stripe_mask(ids, kind, exclude_bos=False).any(-1).sum())
        torch.testing.assert_close(
            torch.tensor(ours * n_rows / ids.shape[1], dtype=torch.float64),
            torch.tensor(tl, dtype=torch.float64),
            atol=1e-5,
            rtol=1e-4,
        )


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
        head_scores(model, torch.arange(1, 10)[None], kinds=("induction",))
    with pytest.raises(InterpError, match="not a hooked model"):
        head_scores(torch.nn.Linear(2, 2), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(InterpError, match="no attention patterns"):
        head_scores(model, torch.tensor([[0, 1, 0, 1]]), cache={})

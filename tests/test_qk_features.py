"""Feature-level QK attribution: a head's score split over (query feature, key feature) pairs.

Each model kind of the QK list gets a random TopK dictionary (biases moved, so every piece
counts) at its last layer's input; the rows of every cell must add up to the model's own
``hook_attn_scores`` (hand-read from its hooks, not from the attribution's algebra), and to
the component attribution of the same cells.
"""

import pytest
import torch
from model_kinds import KINDS, kind_model

import interp.analysis as A
from interp.core.errors import InterpError
from interp.dictionaries import Dictionary
from interp.models import load_model
from interp.runtime import runtime_of

RTOL = 1e-4  # rows vs the model's scores, over the largest score (float32)
CELL = ["query_position", "key_position"]


def _dictionary(model, hook, d_sae=48, k=3, seed=0):
    D = Dictionary.random(
        d_in=int(model.cfg.d_model), d_sae=d_sae, architecture="topk", k=k, hook_name=hook,
        seed=seed, apply_b_dec_to_input=True,
    )  # fmt: skip
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # zero biases would hide the b_dec piece and the encoder's offset
        D.b_dec.add_(0.3 * torch.randn(D.d_in, generator=g))
        D.b_enc.add_(0.1 * torch.randn(D.d_sae, generator=g))
    return D


def _tokens(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, min(40, model.cfg.d_vocab), (3, 9), generator=g)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_feature_rows_add_up_to_the_models_own_score(kind):
    model = kind_model(kind)
    tokens = _tokens(model)
    layer, head = model.cfg.n_layers - 1, model.cfg.n_heads - 1
    D = _dictionary(model, f"blocks.{layer}.hook_resid_pre")
    opts = dict(layer=layer, head=head, query_positions=[-1, 4])
    df = A.qk_attribution(model, tokens, dictionary=D, **opts)
    assert df.attrs["score_gap"] < RTOL, kind
    sums = df.groupby(CELL)["value"].sum()
    components = A.qk_attribution(model, tokens, **opts).groupby(CELL)["value"].sum()
    scale = df.attrs["score_scale"]
    assert (sums - components).abs().max() < RTOL * scale, kind
    _, c = model.run_with_cache(tokens)
    scores = c[f"blocks.{layer}.attn.hook_attn_scores"][:, head]
    cap = runtime_of(model).qk_geometry(layer).softcap
    if df.attrs["checked_against"] == "scores" and cap is None:
        for (p, k), v in sums.items():
            want = scores[:, p, k]
            if bool((want > -1e20).all()):  # a sliding window masks some keys
                assert abs(v - float(want.mean())) < RTOL * scale, (kind, p, k)
    pieces = set(df["query_piece"]) | set(df["key_piece"])
    assert {"error", "b_dec", "bias"} <= pieces
    assert any(p.startswith("F") for p in pieces)
    assert list(df.columns[:3]) == ["layer", "head", "label"]
    assert df.attrs["query_dictionary"]["d_sae"] == D.d_sae and df.attrs["features_scored"] <= 3


@pytest.mark.parametrize(
    "kind", ["attn-only (learned positions)", "gpt2", "llama (GQA, rotary)", "qwen3 (QK-norm)"]
)
def test_a_dictionary_at_an_earlier_hook_adds_the_components_in_between(kind):
    model = kind_model(kind)
    tokens = _tokens(model)
    layer = model.cfg.n_layers - 1
    D = _dictionary(model, "blocks.0.hook_resid_pre")
    df = A.qk_attribution(model, tokens, layer=layer, head=1, dictionary=D, by="layer")
    assert df.attrs["score_gap"] < RTOL
    between = {f"L{l}" for l in range(layer)}
    assert between <= set(df["key_piece"]) and "embed" not in set(df["key_piece"])
    whole = A.qk_attribution(model, tokens, layer=layer, head=1, by="layer")
    got, want = (t.groupby(CELL)["value"].sum() for t in (df, whole))
    assert (got - want).abs().max() < RTOL * df.attrs["score_scale"]


def test_contrast_and_one_sided_dictionaries():
    """Why key a and not key b, in features: the rows sum to score[a] - score[b]; a feature
    active at both keys is one row. A side without a dictionary names its components."""
    model = kind_model("llama (GQA, rotary)")
    tokens = _tokens(model)
    D = _dictionary(model, "blocks.2.hook_resid_pre")
    per_key = A.qk_attribution(model, tokens, layer=2, head=1, key_positions=[2, 6])
    cell = per_key.groupby("key_position")["value"].sum()
    diff = A.qk_attribution(model, tokens, layer=2, head=1, contrast=(2, 6), dictionary=D)
    assert abs(diff["value"].sum() - (cell[2] - cell[6])) < 1e-5 * abs(cell).max()
    assert not diff.duplicated(["query_position", "query_piece", "key_piece"]).any()
    keys_only = A.qk_attribution(model, tokens, layer=2, head=1, key_dictionary=D)
    assert not any(p.startswith("F") for p in keys_only["query_piece"])
    assert "embed" in set(keys_only["query_piece"]) and keys_only.attrs["query_dictionary"] is None
    assert abs(keys_only["value"].sum() - A.qk_attribution(model, tokens, layer=2, head=1)[
        "value"].sum()) < 1e-4 * keys_only.attrs["score_scale"]  # fmt: skip


def test_only_active_features_are_scored(induction_model):
    """Each position brings at most k features, whatever the width: the rows of a cell are at
    most (k + shared pieces) squared for a dictionary 8 times wider, too."""
    tokens = _tokens(induction_model)
    counts = []
    for d_sae in (64, 512):
        D = _dictionary(induction_model, "blocks.1.hook_resid_pre", d_sae=d_sae, k=2)
        df = A.qk_attribution(induction_model, tokens, layer=1, head=1, key_positions=[3],
                              query_positions=[[5], [6], [8]], dictionary=D)  # fmt: skip
        per = df.groupby("sequence").agg(
            q=("query_piece", lambda s: s.str.startswith("F").sum()), n=("value", "size")
        )
        shared = len({"error", "b_dec", "bias"})
        assert (per["n"] <= (2 + shared) ** 2).all(), per
        counts.append(int(per["n"].sum()))
    assert max(counts) <= 2 * min(counts)


def test_chunks_give_the_rows_of_one_batch(induction_model):
    tokens = _tokens(induction_model)
    D = _dictionary(induction_model, "blocks.1.hook_resid_pre")
    opts = dict(layer=1, head=1, dictionary=D, key_positions=[2, 5])
    whole = A.qk_attribution(induction_model, tokens, **opts)
    est = A.qk_attribution(induction_model, tokens, **opts, estimate=True)
    parts = A.qk_attribution(induction_model, tokens, **opts, memory_budget=est.budget_for(1))
    assert parts.attrs["chunks"] == 3
    keys = ["query_position", "key_position", "query_piece", "key_piece"]
    a, b = (t.set_index(keys)["value"].sort_index() for t in (whole, parts))
    assert list(a.index) == list(b.index)
    # a chunk's matmuls sum over a subset of the rows, in another order: float32 rounding,
    # a few ulps of the largest value (2.3e-6 on values near 16 with AVX2 kernels), so the
    # bar is 1e-6 of that scale (about 8 float32 ulps), not 1e-6 absolute
    scale = max(1.0, float(a.abs().max()))
    assert (a - b).abs().max() <= 1e-6 * scale, (float((a - b).abs().max()), scale)


def test_removing_a_feature_from_one_input_is_measured(induction_model):
    """qk_interventions with a dictionary removes its top features (activation x decoder row)
    from the head's query or key input alone; the pieces it cannot remove are left out."""
    tokens = _tokens(induction_model)
    D = _dictionary(induction_model, "blocks.1.hook_resid_pre")
    out = A.qk_interventions(induction_model, tokens, layer=1, head=1, dictionary=D, top=2)
    assert list(out["side"]) == ["query", "query", "key", "key"]
    assert out["component"].str.startswith("F").any()
    assert not out["component"].isin(["error", "b_dec", "bias"]).any()
    assert out["measured"].notna().all() and out.attrs["key_dictionary"]["k"] == 3


def test_bad_dictionaries_are_refused_before_the_forward(induction_model):
    model = induction_model
    t = _tokens(model)
    runs = []
    handle = model.blocks[0].register_forward_hook(lambda *a: runs.append(1))
    z = Dictionary.random(d_in=64, d_sae=8, hook_name="blocks.1.attn.hook_z")
    cases = [
        (dict(dictionary=z), "not upstream"),
        (dict(dictionary=_dictionary(model, "blocks.1.hook_resid_post")), "after layer 1"),
        (
            dict(
                dictionary=Dictionary.random(d_in=64, d_sae=8, hook_name="blocks.1.hook_resid_pre")
            ),
            "d_in is 64",
        ),  # fmt: skip
        (
            dict(key_dictionary=Dictionary.random(d_in=128, d_sae=8, hook_name="blocks.7.hook_x")),
            "not a hook of this model",
        ),  # fmt: skip
        (dict(query_dictionary="sae.safetensors"), "must be a Dictionary"),
        (
            dict(
                dictionary=_dictionary(model, "blocks.1.hook_resid_pre"),
                key_dictionary=_dictionary(model, "blocks.0.hook_resid_pre"),
            ),
            "not both",
        ),  # fmt: skip
    ]
    try:
        for kw, message in cases:
            with pytest.raises(InterpError, match=message):
                A.qk_attribution(model, t, layer=1, head=1, **kw)
            with pytest.raises(InterpError, match=message):
                A.qk_attribution(model, t, layer=1, head=1, estimate=True, **kw)
    finally:
        handle.remove()
    assert runs == []
    with pytest.raises(InterpError, match="no model"):
        A.qk_attribution(None, t, layer=1, head=1, dictionary=z)


def test_the_table_in_the_shipped_model_names_feature_pairs():
    model = load_model("induction-2l")
    D = _dictionary(model, "blocks.1.hook_resid_pre")
    df = A.qk_attribution(model, _tokens(model), layer=1, head=1, dictionary=D, key_positions=[4])
    assert set(df.columns) == {"layer", "head", "label", *CELL, "query_piece", "key_piece", "value"}
    assert df.attrs["analysis"] == "qk_attribution" and df.attrs["method"] == "exact"

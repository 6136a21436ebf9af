"""Writer dictionaries in QK attribution: a head's score over its writers' features.

Every model kind of the QK list splits its last layer's head with a residual dictionary and
attention-output dictionaries (``hook_attn_out``; ``hook_z`` through ``W_O``; the MLP's
``hook_mlp_out`` where there is one). The rows of each cell must add up to the model's own
``hook_attn_scores`` (read from its hooks) and to the component split of the same cells.
"""

import re

import pytest
import torch
from model_kinds import KINDS, kind_model

import interp.analysis as A
from interp.core.errors import InterpError
from interp.dictionaries import Dictionary
from interp.dictionaries.splice import hook_width
from interp.runtime import runtime_of

# Rows vs the model's scores, over the largest score: a cell is a float32 sum of a few
# hundred products, each within a few ulps of that scale (measured gaps 1e-7 to 1e-6 with
# AVX-512 and with AVX2 kernels), so 1e-4 of the scale leaves two orders of margin and still
# catches a missing piece (a piece is at least 1e-3 of the scale here).
RTOL = 1e-4
CELL = ["query_position", "key_position"]
POST_NORM = "bert (bidirectional encoder, post-norm)"


def _dictionary(model, hook, d_sae=32, k=3, seed=0):
    D = Dictionary.random(
        d_in=hook_width(model, hook), d_sae=d_sae, architecture="topk", k=k, hook_name=hook,
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


def _has_mlp(model):
    return not runtime_of(model).attention_only


def _writers(model, m, seed=0):
    """Layer ``m``'s attention (its ``hook_attn_out``; ``hook_z`` on a post-norm model, whose
    ``hook_attn_out`` is the normed stream) and MLP dictionaries."""
    attn = "attn.hook_z" if model is kind_model(POST_NORM) else "hook_attn_out"
    out = [_dictionary(model, f"blocks.{m}.{attn}", seed=seed)]
    if _has_mlp(model):
        out.append(_dictionary(model, f"blocks.{m}.hook_mlp_out", seed=seed + 2))
    return out


def _check_sums(model, tokens, df, opts, kind):
    """Each cell's rows against the component split and the model's own scores."""
    assert df.attrs["score_gap"] < RTOL, kind
    scale = df.attrs["score_scale"]
    sums = df.groupby(CELL)["value"].sum()
    whole = A.qk_attribution(model, tokens, **opts)
    components = whole.groupby(CELL)["value"].sum()
    assert (sums - components).abs().max() < RTOL * scale, kind
    # the writers' pieces add up to what they wrote: a remainder only where the components
    # have one too (a post-norm model's norms)
    has = {c: "remainder" in set(df[c]) for c in ("query_piece", "key_piece")}
    assert not any(has.values()) or "remainder" in set(whole["key_component"]), (kind, has)
    layer, head = opts["layer"], opts["head"]
    _, c = model.run_with_cache(tokens)
    scores = c[f"blocks.{layer}.attn.hook_attn_scores"][:, head]
    if df.attrs["checked_against"] == "scores" and not runtime_of(model).qk_geometry(layer).softcap:
        for (p, k), v in sums.items():
            want = scores[:, p, k]
            if bool((want > -1e20).all()):  # a sliding window masks some keys
                assert abs(v - float(want.mean())) < RTOL * scale, (kind, p, k)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_writer_rows_add_up_to_the_models_own_score(kind):
    model = kind_model(kind)
    tokens = _tokens(model)
    layer, head = model.cfg.n_layers - 1, model.cfg.n_heads - 1
    opts = dict(layer=layer, head=head, query_positions=[-1, 4])
    # the query over a residual dictionary at the head's input; the key over the writers
    # (layer 0's attention and MLP dictionaries, and a hook_z dictionary through W_O)
    resid = _dictionary(model, f"blocks.{layer}.hook_resid_pre", seed=5)
    z = _dictionary(model, f"blocks.{layer - 1}.attn.hook_z", seed=7)
    keys = [*_writers(model, 0), z] if layer > 1 else [z, *_writers(model, 0)[1:]]
    df = A.qk_attribution(model, tokens, query_dictionary=resid, key_dictionary=keys, **opts)
    _check_sums(model, tokens, df, opts, kind)
    key_pieces = set(df["key_piece"])
    assert any(p.startswith("embed:") for p in key_pieces) and "embed" not in key_pieces
    for D in keys:  # several dictionaries on a side: each piece named by its hook
        pre = f"{D.hook_name}:" if len(keys) > 1 else ""
        assert {f"{pre}error", f"{pre}b_dec"} <= key_pieces, kind
        assert any(re.fullmatch(rf"{re.escape(pre)}F\d+", p) for p in key_pieces), kind
    assert any(re.fullmatch(r"F\d+", p) for p in df["query_piece"])
    wrote = {"L0.attn", "L0.mlp", f"L{layer - 1}.attn"} | {f"L0H{h}" for h in range(4)}
    assert not key_pieces & wrote, kind  # the writers with a dictionary are no component
    # a residual dictionary and an attention-output dictionary after it, in one list
    both = [
        _dictionary(model, f"blocks.{layer - 1}.hook_resid_pre", seed=3),
        _writers(model, layer - 1, seed=4)[0],
    ]
    df = A.qk_attribution(model, tokens, dictionary=both, **opts)
    _check_sums(model, tokens, df, opts, kind)
    pieces = set(df["query_piece"]) | set(df["key_piece"])
    assert {f"{D.hook_name}:{p}" for D in both for p in ("error", "b_dec")} <= pieces
    assert not any(p.startswith("embed") for p in pieces)  # inside the residual dictionary
    assert [d["hook_name"] for d in df.attrs["key_dictionary"]] == [D.hook_name for D in both]


def test_names_and_only_active_features(induction_model):
    """``embed:<id>`` without a tokenizer, ``<hook>:F<i>`` with several dictionaries, and
    at each key exactly the features active there (read from the dictionary's own encode)."""
    model = induction_model
    tokens = _tokens(model)
    tokens[:, 3] = 37
    attn = _dictionary(model, "blocks.0.hook_attn_out", d_sae=64, k=2)
    z = _dictionary(model, "blocks.0.attn.hook_z", seed=1)
    _, c = model.run_with_cache(tokens)
    resid = _dictionary(model, "blocks.0.hook_resid_pre", seed=2)
    for keys, pre in (([attn], ""), ([resid, attn], "blocks.0.hook_attn_out:")):
        df = A.qk_attribution(model, tokens, layer=1, head=1, query_positions=[[8]] * 3,
                              query_dictionary=z, key_dictionary=keys)  # fmt: skip
        if not pre:  # the embeddings are inside a residual dictionary at blocks.0
            assert "embed:37" in set(df.loc[df["key_position"] == 3, "key_piece"])
        active = attn.encode(c["blocks.0.hook_attn_out"]) > 0  # [batch, pos, d_sae]
        for (b, p), rows in df.groupby(["sequence", "key_position"]):
            feats = {x for x in rows["key_piece"] if re.fullmatch(rf"{re.escape(pre)}F\d+", x)}
            want = {f"{pre}F{f}" for f in torch.nonzero(active[b, p]).flatten().tolist()}
            assert feats == want, (b, p)
            assert len(feats) <= 2
    assert any(re.fullmatch(r"F\d+", x) for x in df["query_piece"])  # the query's z dictionary


def test_contrast_and_chunks(induction_model):
    model = induction_model
    tokens = _tokens(model)
    Ds = [
        _dictionary(model, "blocks.0.hook_resid_pre"),
        _dictionary(model, "blocks.0.hook_attn_out"),
    ]
    per_key = A.qk_attribution(model, tokens, layer=1, head=1, key_positions=[2, 6])
    cell = per_key.groupby("key_position")["value"].sum()
    diff = A.qk_attribution(model, tokens, layer=1, head=1, contrast=(2, 6), dictionary=Ds)
    # a contrast is the difference of two scores: its scale is theirs
    assert abs(diff["value"].sum() - (cell[2] - cell[6])) < RTOL * abs(cell).max()
    assert not diff.duplicated(["query_position", "query_piece", "key_piece"]).any()
    opts = dict(layer=1, head=1, key_dictionary=Ds[1:], query_dictionary=Ds, key_positions=[2, 5])
    whole = A.qk_attribution(model, tokens, **opts)
    est = A.qk_attribution(model, tokens, **opts, estimate=True)
    parts = A.qk_attribution(model, tokens, **opts, memory_budget=est.budget_for(1))
    assert parts.attrs["chunks"] == 3
    keys = ["query_position", "key_position", "query_piece", "key_piece"]
    a, b = (t.set_index(keys)["value"].sort_index() for t in (whole, parts))
    assert list(a.index) == list(b.index)
    # a chunk's matmuls sum over a subset of the rows, in another order: float32 rounding of
    # a few ulps of the largest value (AVX2 and AVX-512 differ there), so 1e-6 of that scale
    scale = max(1.0, float(a.abs().max()))
    assert (a - b).abs().max() <= 1e-6 * scale, (float((a - b).abs().max()), scale)


def test_removing_a_writer_piece_is_measured(induction_model):
    """qk_interventions removes a token's embedding or a writer's feature from one input."""
    tokens = _tokens(induction_model)
    D = _dictionary(induction_model, "blocks.0.hook_attn_out")
    out = A.qk_interventions(induction_model, tokens, layer=1, head=1, key_dictionary=D, top=3)
    keys = out.loc[out["side"] == "key", "component"]
    assert keys.str.match(r"^(F\d+|embed:\d+|pos_embed)$").all(), list(keys)
    assert out["measured"].notna().all()


def test_bad_writer_lists_are_refused_before_the_forward(induction_model):
    model = induction_model
    t = _tokens(model)
    runs = []
    handle = model.blocks[0].register_forward_hook(lambda *a: runs.append(1))
    attn, z = (
        _dictionary(model, "blocks.0.hook_attn_out"),
        _dictionary(model, "blocks.0.attn.hook_z"),
    )
    later = _dictionary(model, "blocks.1.hook_attn_out")
    resid1 = _dictionary(model, "blocks.1.hook_resid_pre")
    narrow = Dictionary.random(d_in=64, d_sae=8, hook_name="blocks.0.hook_attn_out")
    cases = [
        (dict(dictionary=[later]), "not upstream of layer 1's input"),
        (dict(key_dictionary=[attn, attn]), "twice"),
        (dict(dictionary=[attn, z]), "both replace layer 0's attn"),
        (dict(dictionary=[resid1, attn]), "inside that dictionary's stream"),
        (dict(query_dictionary=[narrow]), "d_in is 64"),
        (dict(key_dictionary=[]), "empty list"),
        (dict(key_dictionary=[attn, "sae"]), "must be a Dictionary"),
        (dict(dictionary=_dictionary(model, "blocks.0.hook_resid_pre"), key_dictionary=[attn]),
         "not both"),
    ]  # fmt: skip
    try:
        for kw, message in cases:
            with pytest.raises(InterpError, match=message):
                A.qk_attribution(model, t, layer=1, head=1, **kw)
            with pytest.raises(InterpError, match=message):
                A.qk_attribution(model, t, layer=1, head=1, estimate=True, **kw)
    finally:
        handle.remove()
    assert runs == []
    bert = kind_model(POST_NORM)
    with pytest.raises(InterpError, match="post-norm"):
        A.qk_attribution(bert, _tokens(bert), layer=2, head=0,
                         key_dictionary=[_dictionary(bert, "blocks.0.hook_attn_out")])  # fmt: skip


@pytest.mark.parametrize("kind", ["attn-only (learned positions)", "gpt2"])
def test_feature_head_attribution_over_upstream_writers(kind):
    """A residual dictionary's pre-activation over its writers' features: the rows of a
    feature add up to its encoder's own pre-activation."""
    model = kind_model(kind)
    tokens = _tokens(model)
    layer = model.cfg.n_layers - 1
    D = _dictionary(model, f"blocks.{layer}.hook_resid_pre", seed=9)
    ups = _writers(model, 0)
    df = A.feature_head_attribution(model, tokens, dictionary=D, upstream=ups,
                                    query_positions=[-1, 4])  # fmt: skip
    # float32 sums of a few dozen products, as the QK rows: 1e-4 of the largest pre-activation
    assert df.attrs["pre_gap"] < RTOL
    _, c = model.run_with_cache(tokens)
    pre = D.pre_activations(c[f"blocks.{layer}.hook_resid_pre"]).detach()
    sums = df.groupby(["sequence", "query_position", "feature"])["value"].sum()
    for (b, p, f), v in sums.items():
        assert abs(v - float(pre[b, p, f])) < RTOL * float(pre.abs().max()), (b, p, f)
    labels = set(df["label"])
    pre0 = "blocks.0.hook_attn_out:" if len(ups) > 1 else ""
    assert any(x.startswith("embed:") for x in labels)
    assert any(re.fullmatch(rf"{re.escape(pre0)}F\d+", x) for x in labels)
    assert {f"{pre0}error", f"{pre0}b_dec", "bias"} <= labels
    heads = df.dropna(subset=["head"])  # the heads of later layers stay heads
    assert set(heads["layer"]) <= set(range(1, layer)), set(heads["layer"])


def test_feature_head_attribution_refuses_bad_upstream(induction_model):
    t = _tokens(induction_model)
    D = _dictionary(induction_model, "blocks.1.hook_resid_pre")
    z = _dictionary(induction_model, "blocks.1.attn.hook_z")
    with pytest.raises(InterpError, match="drop upstream"):
        A.feature_head_attribution(induction_model, t, dictionary=z, upstream=[D])
    later = _dictionary(induction_model, "blocks.1.hook_attn_out")
    with pytest.raises(InterpError, match="not upstream"):
        A.feature_head_attribution(induction_model, t, dictionary=D, upstream=[later])

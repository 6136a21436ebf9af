"""A transcoder as a writer in QK attribution (issue 46 steps 1-2): ``blocks.m.hook_mlp_out``
written by a transcoder reading the MLP's input splits into its active features, its error
(the MLP's real output minus the transcoder's) and its decoder bias (and ``skip``).

On every model kind of the QK list with MLPs, the rows of each cell add up to the model's
own ``hook_attn_scores`` and to the component split (the checks of ``test_qk_writers``).
"""

import re

import pytest
import torch
from model_kinds import KINDS, kind_model
from test_qk_writers import CELL, RTOL, _check_sums, _dictionary, _has_mlp, _tokens

import interp.analysis as A
from interp.core.errors import InterpError
from interp.dictionaries import Transcoder
from interp.dictionaries.splice import hook_width
from interp.runtime import runtime_of

MLP_KINDS = sorted(k for k in KINDS if not k.startswith("attn-only"))


def _transcoder(model, m, skip=False, seed=0):
    """A TopK transcoder of layer ``m``'s MLP with moved biases (so b_dec counts): it reads
    ``blocks.m.mlp.hook_in`` (the MLP's input on every bridge, parallel blocks included)."""
    hook = f"blocks.{m}.mlp.hook_in"
    T = Transcoder.random(
        d_in=hook_width(model, hook), d_out=int(model.cfg.d_model), d_sae=32,
        architecture="topk", k=3, hook_name=hook, hook_name_out=f"blocks.{m}.hook_mlp_out",
        seed=seed, skip=skip,
    )  # fmt: skip
    with torch.no_grad():
        T.b_dec.add_(0.3 * torch.randn(T.d_out, generator=torch.Generator().manual_seed(seed)))
    return T


def _check_scores(model, tokens, df, opts, kind):
    """Each cell's rows against the model's own ``hook_attn_scores`` (one pass, no second
    attribution: ``test_qk_writers`` checks the component split of the same code path)."""
    assert df.attrs["score_gap"] < RTOL, kind
    scale = df.attrs["score_scale"]
    _, c = model.run_with_cache(tokens)
    scores = c[f"blocks.{opts['layer']}.attn.hook_attn_scores"][:, opts["head"]]
    checked = df.attrs["checked_against"] == "scores"
    if checked and not runtime_of(model).qk_geometry(opts["layer"]).softcap:
        for (p, k), v in df.groupby(CELL)["value"].sum().items():
            want = scores[:, p, k]
            if bool((want > -1e20).all()):  # a sliding window masks some keys
                assert abs(v - float(want.mean())) < RTOL * scale, (kind, p, k)


@pytest.mark.parametrize("kind", MLP_KINDS)
def test_transcoder_rows_add_up_to_the_models_own_score(kind):
    model = kind_model(kind)
    assert _has_mlp(model)
    tokens = _tokens(model)
    layer, head = model.cfg.n_layers - 1, model.cfg.n_heads - 1
    opts = dict(layer=layer, head=head, query_positions=[-1, 4])
    T = _transcoder(model, 0, skip=kind.startswith("llama ("), seed=1)
    resid = _dictionary(model, f"blocks.{layer}.hook_resid_pre", seed=5)
    df = A.qk_attribution(model, tokens, query_dictionary=resid, key_dictionary=[T], **opts)
    _check_scores(model, tokens, df, opts, kind)
    keys = set(df["key_piece"])
    assert {"error", "b_dec"} <= keys and "L0.mlp" not in keys, kind
    assert ("skip" in keys) == (T.W_skip is not None), kind
    assert any(re.fullmatch(r"F\d+", p) for p in keys), kind
    assert df.attrs["key_dictionary"][0]["hook_name_out"] == "blocks.0.hook_mlp_out"


def test_transcoder_beside_other_writers_and_only_active_features():
    """A transcoder and an attention-output dictionary on one side (names prefixed by the
    output hook), and at each key exactly the transcoder's active features."""
    model = kind_model("gpt2")
    tokens = _tokens(model)
    layer = model.cfg.n_layers - 1
    T = _transcoder(model, 0, seed=2)
    attn = _dictionary(model, "blocks.0.hook_attn_out", seed=3)
    opts = dict(layer=layer, head=1, query_positions=[-1, 4])
    df = A.qk_attribution(model, tokens, key_dictionary=[attn, T], **opts)
    _check_sums(model, tokens, df, opts, "gpt2")
    # one query per sequence: the rows of each (sequence, key)
    df = A.qk_attribution(model, tokens, key_dictionary=[attn, T], layer=layer, head=1,
                          query_positions=[[8]] * 3)  # fmt: skip
    assert df.attrs["score_gap"] < RTOL
    pre = "blocks.0.hook_mlp_out:"
    assert {f"{pre}error", f"{pre}b_dec", "blocks.0.hook_attn_out:error"} <= set(df["key_piece"])
    _, c = model.run_with_cache(tokens)
    active = T.encode(c[T.hook_name]) > 0
    for (b, p), rows in df.groupby(["sequence", "key_position"]):
        feats = {x for x in rows["key_piece"] if re.fullmatch(rf"{re.escape(pre)}F\d+", x)}
        assert feats == {f"{pre}F{f}" for f in torch.nonzero(active[b, p]).flatten().tolist()}


def test_bad_transcoders_are_refused_before_the_forward():
    model = kind_model("gpt2")
    tokens = _tokens(model)
    runs = []
    handle = model.blocks[0].register_forward_hook(lambda *a: runs.append(1))
    layer = model.cfg.n_layers - 1
    late = _transcoder(model, layer)
    resid_out = Transcoder.random(d_in=32, d_out=32, d_sae=8, hook_name="blocks.0.mlp.hook_in",
                                  hook_name_out="blocks.0.hook_resid_post")  # fmt: skip
    wide = Transcoder.random(d_in=16, d_out=32, d_sae=8, hook_name="blocks.0.mlp.hook_in",
                             hook_name_out="blocks.0.hook_mlp_out")  # fmt: skip
    mlp = _dictionary(model, "blocks.0.hook_mlp_out")
    cases = [
        ([late], "not upstream"),
        ([resid_out], "must be blocks.m.hook_mlp_out"),
        ([wide], "width 16, but the hook has width"),
        ([_transcoder(model, 0), mlp], "'blocks.0.hook_mlp_out' twice"),
        ([_transcoder(model, 0), _transcoder(model, 0, seed=1)], "twice"),
    ]
    try:
        for keys, match in cases:
            with pytest.raises(InterpError, match=match):
                A.qk_attribution(model, tokens, layer=layer, head=0, key_dictionary=keys)
    finally:
        handle.remove()
    assert not runs


def test_feature_head_attribution_over_an_upstream_transcoder():
    """The same list on feature_head_attribution's upstream side: a residual dictionary's
    pre-activation over a transcoder's features, error and b_dec sums to its own."""
    model = kind_model("gpt2")
    tokens = _tokens(model)
    layer = model.cfg.n_layers - 1
    D = _dictionary(model, f"blocks.{layer}.hook_resid_pre", seed=9)
    T = _transcoder(model, 0, seed=4)
    df = A.feature_head_attribution(model, tokens, dictionary=D, upstream=[T],
                                    query_positions=[-1, 4])  # fmt: skip
    # float32 sums of a few dozen products, as the QK rows: 1e-4 of the largest pre-activation
    assert df.attrs["pre_gap"] < RTOL
    _, c = model.run_with_cache(tokens)
    pre = D.pre_activations(c[f"blocks.{layer}.hook_resid_pre"]).detach()
    sums = df.groupby(["sequence", "query_position", "feature"])["value"].sum()
    for (b, p, f), v in sums.items():
        assert abs(v - float(pre[b, p, f])) < RTOL * float(pre.abs().max()), (b, p, f)
    labels = set(df["label"])
    assert {"error", "b_dec"} <= labels and "L0.mlp" not in labels
    assert any(re.fullmatch(r"F\d+", x) for x in labels)

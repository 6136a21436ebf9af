"""What heads move, in features: a feature's pre-activation split over heads (and sources).

The rows are checked against the dictionary's own encoder pre-activation of the model's
activation, read from the model's hooks by hand (``hook_z`` concatenated, or
``hook_resid_pre``), not from the split's algebra.
"""

import pytest
import torch
from model_kinds import KINDS, kind_model

import interp.analysis as A
from interp.core.errors import InterpError
from interp.dictionaries import Dictionary

RTOL = 1e-4  # rows vs the encoder's pre-activation, over the largest (float32)
CELL = ["sequence", "query_position", "feature"]


def _dictionary(d_in, hook, d_sae=32, k=3, seed=0):
    D = Dictionary.random(d_in=d_in, d_sae=d_sae, architecture="topk", k=k, hook_name=hook,
                          seed=seed, apply_b_dec_to_input=True)  # fmt: skip
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # zero biases would hide the bias row
        D.b_dec.add_(0.3 * torch.randn(D.d_in, generator=g))
        D.b_enc.add_(0.1 * torch.randn(D.d_sae, generator=g))
    return D


def _tokens(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, min(40, model.cfg.d_vocab), (2, 8), generator=g)


def _check_sums(df, pre, post):
    sums = df.groupby(CELL)["value"].sum()
    scale = float(pre.abs().max())
    for (b, p, f), v in sums.items():
        assert abs(v - float(pre[b, p, f])) < RTOL * scale, (b, p, f)
        assert post[b, p, f] > 0  # only the active features, by default
    assert sums.index.get_level_values("feature").nunique() >= 2


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_z_feature_splits_over_heads_and_source_positions(kind):
    model = kind_model(kind)
    tokens = _tokens(model)
    layer = model.cfg.n_layers - 1
    hook = f"blocks.{layer}.attn.hook_z"
    D = _dictionary(model.cfg.n_heads * model.cfg.d_head, hook)
    df = A.feature_head_attribution(model, tokens, dictionary=D, query_positions=[-1, 3])
    _, c = model.run_with_cache(tokens, names_filter=[hook])
    with torch.no_grad():
        pre = D.pre_activations(c[hook].flatten(2))
    _check_sums(df, pre, D.activate(pre))
    heads = df.dropna(subset=["head"])
    assert set(heads["label"]) == {f"L{layer}H{h}" for h in range(model.cfg.n_heads)}
    assert set(heads["key_position"]) <= set(range(8)) and "bias" in set(df["label"])
    assert df.attrs["nonlinearity"].startswith("topk (k=3)") and df.attrs["pre_gap"] < RTOL


@pytest.mark.parametrize(
    "kind",
    ["attn-only (learned positions)", "gpt2", "llama (GQA, rotary)",
     "gemma-2 (softcap, scalar, window, sandwich norms)"],
)  # fmt: skip
def test_a_residual_feature_splits_over_the_heads_upstream(kind):
    model = kind_model(kind)
    tokens = _tokens(model)
    layer = model.cfg.n_layers - 1
    hook = f"blocks.{layer}.hook_resid_pre"
    D = _dictionary(int(model.cfg.d_model), hook)
    df = A.feature_head_attribution(model, tokens, dictionary=D)
    _, c = model.run_with_cache(tokens, names_filter=[hook])
    with torch.no_grad():
        pre = D.pre_activations(c[hook])
    _check_sums(df, pre, D.activate(pre))
    want = {f"L{l}H{h}" for l in range(layer) for h in range(model.cfg.n_heads)}
    assert want | {"rest", "bias"} == set(df["label"]) and "key_position" not in df.columns


def test_chosen_features_are_split_even_when_off(induction_model):
    D = _dictionary(64, "blocks.1.attn.hook_z")
    tokens = _tokens(induction_model)
    df = A.feature_head_attribution(induction_model, tokens, dictionary=D, features=[0, 5])
    assert set(df["feature"]) == {0, 5} and df.groupby(CELL).ngroups == 2 * 2
    _, c = induction_model.run_with_cache(tokens, names_filter=["blocks.1.attn.hook_z"])
    with torch.no_grad():
        pre = D.pre_activations(c["blocks.1.attn.hook_z"].flatten(2))
    post = D.activate(pre)
    for (b, p, f), v in df.groupby(CELL)["value"].sum().items():
        assert abs(v - float(pre[b, p, f])) < RTOL * float(pre.abs().max())
        row = df[(df["sequence"] == b) & (df["feature"] == f)]
        assert (row["activation"] == float(post[b, p, f])).all()


def test_bad_inputs_are_refused(induction_model):
    m, t = induction_model, _tokens(induction_model)
    cases = [
        (dict(dictionary=_dictionary(128, "blocks.0.hook_resid_pre")), "first layer's input"),
        (dict(dictionary=_dictionary(128, "blocks.1.hook_resid_post")), "last layer's output"),
        (dict(dictionary=_dictionary(64, "blocks.1.attn.hook_v")), "splits a dictionary"),
        (dict(dictionary=_dictionary(32, "blocks.1.attn.hook_z")), "d_in is 32"),
        (dict(dictionary=_dictionary(64, "blocks.1.attn.hook_z"), features=[99]), "out of range"),
        (dict(dictionary=_dictionary(64, "blocks.1.attn.hook_z"), features=[]), "empty"),
        (dict(dictionary=_dictionary(64, "blocks.1.attn.hook_z"), query_positions=30), "range"),
        (dict(dictionary="folder"), "expected a Dictionary"),
    ]
    for kw, message in cases:
        with pytest.raises(InterpError, match=message):
            A.feature_head_attribution(m, t, **kw)
    with pytest.raises(InterpError, match="no model"):
        A.feature_head_attribution(None, t, dictionary=_dictionary(64, "blocks.1.attn.hook_z"))


def test_a_resid_post_dictionary_is_the_next_layers_input(induction_model):
    """blocks.0.hook_resid_post is the stream blocks.1.hook_resid_pre is (issue 43: it was
    refused): the same weights at either name give the same table."""
    m, t = induction_model, _tokens(induction_model)
    post = A.feature_head_attribution(m, t, dictionary=_dictionary(128, "blocks.0.hook_resid_post"))
    pre = A.feature_head_attribution(m, t, dictionary=_dictionary(128, "blocks.1.hook_resid_pre"))
    assert post["value"].tolist() == pre["value"].tolist() and len(post) > 0
    assert post.attrs["dictionary"]["hook_name"] == "blocks.0.hook_resid_post"

"""The QK tools refuse bad input before the work, and follow the model's own rules.

Each test is one cause of a raw traceback or a silently wrong number that the QK tools
(``qk_attribution``, ``qk_interventions``, ``rotary_bands``, ``qk_circuit``,
``positional_kernel``) had; refusals name the problem and the fix in one InterpError,
with no forward pass where the input alone shows it. The mask and norm causes are
fixed where their rule lives (the runtime's :class:`QKGeometry` mask rule and
:attr:`Norm.gain`), so their tests run over every model kind in ``tests/model_kinds.py``.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from model_kinds import KINDS, kind_model
from test_bad_inputs import refused

import interp.analysis as A
from interp import InterpError
from interp.analysis.heads.ov_scores import OVCircuits
from interp.core.hooks import hook_name
from interp.core.protocol import logits_meaningful
from interp.models import load_model
from interp.models.hf import random_gpt2
from interp.runtime import runtime_of

T3 = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7], [0, 9, 3, 4, 11, 9, 3, 4], [0, 2, 3, 4, 5, 2, 3, 4]])
WINDOWED = ("gemma-2 (softcap, scalar, window, sandwich norms)", "mistral (sliding window)")
ROTARY = "llama (GQA, rotary)"


@pytest.fixture(scope="module")
def model():
    return load_model("induction-2l")


def _tokens(model, n=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, min(40, model.cfg.d_vocab), (3, n), generator=g)


def _seen(model, tokens, layer):
    """``[batch, head, query, key]`` bool: the keys the model's own pass let each query see
    (its score is not the mask's fill, or, where a bridge's score hook holds the pattern,
    the weight is not 0)."""
    names = [hook_name("attn_scores", layer), hook_name("pattern", layer)]
    _, c = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    scores, pattern = c[names[0]], c[names[1]]
    live = scores > -1e20
    if torch.allclose(scores.masked_fill(~live, 0.0), pattern, atol=1e-6):
        return pattern > 0
    return live


# 1. positions in contrast= (and every QK position) follow the one integer rule -----------
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(contrast=([4.7, 5.2, 6.9], 0)), r"contrast a .* must be an integer, got 4.7"),
        (dict(contrast=(True, 0)), r"contrast a must be an integer, got True"),
        (dict(contrast=([[4], [5], [6]], 0)), r"must be one integer position, got \[4\]"),
        (dict(contrast=("5", 0)), r"must be an integer position, got the string '5'"),
        (dict(contrast=(5, np.float64(1.0))), r"contrast b must be an integer"),
        (dict(query_positions=[True]), r"query_positions must be an integer, got True"),
        (dict(key_positions=[2.0]), r"key_positions must be an integer, got 2.0"),
        (dict(query_positions=torch.tensor(7.0)), r"query_positions must be an integer"),
    ],
)
def test_1_positions_follow_the_one_integer_rule(model, kw, match):
    refused(lambda: A.qk_attribution(model, T3, layer=1, head=1, **kw), match, model)
    refused(lambda: A.qk_interventions(model, T3, layer=1, head=1, **kw), match, model)


def test_1_integer_positions_of_any_integer_type_are_read(model):
    plain = A.qk_attribution(model, T3, layer=1, head=1, contrast=([5, 6, 7], 0))
    typed = A.qk_attribution(
        model, T3, layer=1, head=1, contrast=(np.array([5, 6, 7]), torch.tensor(0))
    )
    assert np.allclose(plain["value"], typed["value"], atol=1e-6)


# 2. a key outside a sliding window is refused by the layer's mask rule ----------------------
@pytest.mark.parametrize("kind", WINDOWED)
def test_2_a_key_outside_the_sliding_window_is_refused(kind):
    m = kind_model(kind)
    t = _tokens(m)
    geometry = runtime_of(m).qk_geometry(0)
    assert geometry.window == 4  # layer 0 is a sliding layer in both (Gemma-2 alternates)
    match = r"key position 2 is 6 positions behind query position 8, outside this layer's"
    refused(lambda: A.qk_attribution(m, t, layer=0, head=0, key_positions=[2]), match, m)
    refused(lambda: A.qk_interventions(m, t, layer=0, head=0, key_positions=[2]), match, m)
    refused(
        lambda: A.qk_attribution(m, t, layer=0, head=0, contrast=(8, 2)),
        r"contrast position 2 is 6 positions behind",
        m,
    )
    refused(
        lambda: A.qk_circuit(m, layer=0, head=0, offset=4), r"outside this layer's sliding window"
    )
    # the keys a query sees by default are exactly the window's
    df = A.qk_attribution(m, t, layer=0, head=0, query_positions=[8])
    assert sorted(df["key_position"].unique()) == [5, 6, 7, 8]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_2_the_mask_rule_is_the_models_own_mask_on_every_kind(kind):
    """The runtime's rule (causal or not, each layer's window) against the keys the model's
    own forward pass lets each query see, layer by layer."""
    m = kind_model(kind)
    t = _tokens(m)
    for layer in range(m.cfg.n_layers):
        rule = runtime_of(m).qk_geometry(layer).visible(t.shape[1])
        seen = _seen(m, t, layer)
        assert (seen == rule).all(), (kind, layer)


# 3. head=None is refused by the one head check ------------------------------------------
CALLS = {
    "qk_attribution": lambda m, **kw: A.qk_attribution(m, T3, layer=1, **kw),
    "qk_interventions": lambda m, **kw: A.qk_interventions(m, T3, layer=1, **kw),
    "positional_kernel": lambda m, **kw: A.positional_kernel(m, layer=1, **kw),
    "qk_circuit": lambda m, **kw: A.qk_circuit(m, layer=1, **kw),
    "ov_circuit": lambda m, **kw: A.ov_circuit(m, layer=1, **kw),
    "head_subspaces": lambda m, **kw: A.head_subspaces(m, layer=1, **kw),
    "null_space_probe": lambda m, **kw: A.null_space_probe(m, T3, layer=1, **kw),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_3_head_none_is_refused_by_every_head_tool(model, name):
    match = r"head must be an integer, got None; pass head=<index>"
    refused(lambda: CALLS[name](model, head=None), match, model)
    refused(lambda: CALLS[name](model, head="1"), r"head must be an integer.*pass head=1", model)


def test_3_head_none_is_refused_on_a_rotary_model_too():
    m = kind_model(ROTARY)
    refused(lambda: A.rotary_bands(m, _tokens(m), layer=0, head=None), r"got None", m)
    refused(lambda: A.qk_circuit(m, layer=0, head=None, offset=1), r"got None")


# 4. QK attribution follows the model's mask: an encoder attends to every key ---------------
def test_4_an_encoder_attributes_keys_after_its_query():
    m = kind_model("bert (bidirectional encoder, post-norm)")
    t = _tokens(m)[:1]
    df = A.qk_attribution(m, t, layer=2, head=3, query_positions=[4], by="head")
    assert sorted(df["key_position"].unique()) == list(range(9))  # every key, 5..8 too
    assert df.attrs["checked_against"] == "pattern"  # this adapter's score hook holds it
    assert df.attrs["score_gap"] < 1e-4
    _, c = m.run_with_cache(t, names_filter=hook_name("pattern", 2))
    pattern = c[hook_name("pattern", 2)][0, 3, 4].double()  # [key]
    sums = torch.tensor(df.groupby("key_position")["value"].sum().to_numpy())
    assert torch.allclose(torch.softmax(sums, -1), pattern, atol=1e-5)
    later = A.qk_attribution(m, t, layer=2, head=3, query_positions=[4], contrast=(7, 1))
    assert later.attrs["score_gap"] < 1e-4


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_4_default_keys_are_the_keys_each_query_sees_on_every_kind(kind):
    m = kind_model(kind)
    t = _tokens(m)
    layer = 0
    df = A.qk_attribution(m, t, layer=layer, head=0, query_positions=[2, 8])
    seen = _seen(m, t, layer)[0, 0]  # one sequence and head: the mask is the same for all
    for q in (2, 8):
        keys = sorted(df.loc[df["query_position"] == q, "key_position"].unique())
        assert keys == torch.nonzero(seen[q]).flatten().tolist(), (kind, q)


# 5. every fold of a norm into weights uses the one gain rule -------------------------------
def _hand_gain(module, d):
    """A norm's elementwise gain read off the module itself: its output on unit vectors
    ``e_i`` divided by what LayerNorm / RMSNorm makes of them before the gain (``e_i`` centred
    or not, over its RMS), its bias taken off."""
    with torch.no_grad():
        zero = module(torch.zeros(1, d)).float()[0]  # the bias (0 for RMSNorm)
        out = module(torch.eye(d) * 3.0).float() - zero  # [i, d]
    return out.diagonal()


def _folded_gain_by_hand(norm, d):
    """The gain from the module by one of two unit-vector probes: RMSNorm's ``3 e_i``
    normalises to ``sqrt(d) e_i``; LayerNorm's to ``sqrt(d) (e_i - 1/d) / sqrt(1 - 1/d)``."""
    raw = _hand_gain(norm.module, d)
    if norm.centred:
        return raw / ((1 - 1 / d) * d**0.5 / (1 - 1 / d) ** 0.5)
    return raw / d**0.5


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_5_the_norm_gain_is_the_modules_own_on_every_kind(kind):
    m = kind_model(kind)
    rt = runtime_of(m)
    d = int(m.cfg.d_model)
    stages = [("final", None)] + [("ln1", l) for l in range(m.cfg.n_layers)]
    for stage, layer in stages:
        norm = rt.norm(stage, layer)
        if norm is None or norm.gain is None:
            continue
        hand = _folded_gain_by_hand(norm, d)
        assert torch.allclose(norm.gain.float(), hand, rtol=1e-4, atol=1e-5), (kind, stage)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_5_ov_circuits_and_copying_scores_fold_the_models_own_gains(kind):
    """``ov_circuit(fold_ln=True)`` against the product from the model's own norm modules
    (embedding rows through ``ln1`` less its bias, ``W_U`` scaled by the final norm's gain
    read off the module), and ``copying_scores`` equal to the atlas's copying column."""
    m = kind_model(kind)
    if not logits_meaningful(m):
        pytest.skip("the OV circuit reads an unembedding this model's logits make meaningless")
    rt = runtime_of(m)
    d = int(m.cfg.d_model)
    W_E = m.W_E.detach().float()
    final = rt.norm("final")
    W_U = m.W_U.detach().float()
    if final is not None:
        W_U = W_U * _folded_gain_by_hand(final, d)[:, None]
    layer, head = 0, 0
    ln1 = rt.norm("ln1", layer)
    with torch.no_grad():
        rows = W_E if ln1 is None else ln1.module(W_E).float() - ln1.module(W_E[:1] * 0).float()
    W_V = runtime_of(m).layer(layer).W["v"].float()
    W_V = W_V.repeat_interleave(m.cfg.n_heads // W_V.shape[0], 0)[head]
    W_O = rt.layer_weight("W_O", layer)[head].float()
    want = rows @ W_V @ W_O @ W_U
    got = A.ov_circuit(m, layer=layer, head=head).AB
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-4 * float(want.abs().max())), kind
    scores = A.copying_scores(m, heads=[(layer, head)], top1=False)
    atlas = OVCircuits(m).copying(layer, OVCircuits(m).values(layer))
    assert float(scores["copying_score"].iloc[0]) == pytest.approx(float(atlas[head]), abs=1e-4)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_5_direct_logit_attribution_adds_up_on_every_kind(kind):
    """The final norm's gain (Gemma's ``1 + w``), Gemma-2's sandwich norms (each head's
    write through its post-attention norm, the scale frozen) and its final soft cap (the
    rows are the logit before it): the rows add up to the model's own logit, no remainder."""
    m = kind_model(kind)
    t = _tokens(m)[:1]
    rt = runtime_of(m)
    try:
        rt.check_readout("direct logit attribution")
    except InterpError as exc:  # BERT: its masked-LM head transforms the stream first
        assert kind.startswith("bert"), kind
        match = r"output head is not its final norm and unembedding .*masked-LM head"
        assert re.search(match, str(exc))
        refused(lambda: A.logit_lens(m, t), match)
        return
    df = A.direct_logit_attribution(m, t, answer=5, by="component")
    assert "remainder" not in set(df["component"]), (kind, df.attrs.get("remainder"))
    with torch.no_grad():
        logit = float(m(t)[0, -1, 5])
    cap = rt.final_softcap
    total = df.attrs["total"]
    assert (total if cap is None else cap * np.tanh(total / cap)) == pytest.approx(logit, abs=1e-4)
    assert df["value"].sum() == pytest.approx(total, abs=1e-4)
    lens = A.logit_lens(m, t)  # its last stage is the model's own (capped) prediction
    last = lens[lens["stage"] == lens["stage"].max()]
    assert np.allclose(last["target_logp"].dropna(), torch.log_softmax(m(t)[0].float(), -1)[
        torch.arange(t.shape[1] - 1), t[0, 1:]].detach().numpy(), atol=1e-4)  # fmt: skip


# minor: padding, offsets, duplicates, retired names -----------------------------------------
def test_a_right_padded_query_is_refused_as_dla_refuses_it():
    gpt2 = random_gpt2(2, vocab=30)  # its tokenizer pads with id 1 (its end-of-text too)
    padded = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 1, 1]])
    match = r"sequence 1 is right-padded: QK attribution reads position [34], .*side = 'left'"
    refused(lambda: A.qk_attribution(gpt2, padded, layer=1, head=0), match, gpt2)
    refused(lambda: A.qk_interventions(gpt2, padded, layer=1, head=0), match, gpt2)
    # the rule reads per sequence: sequence 1's own query before its padding is content
    A.qk_attribution(gpt2, padded, layer=1, head=0, query_positions=[[4], [2]])
    refused(
        lambda: A.qk_attribution(gpt2, padded, layer=1, head=0, query_positions=[[2], [4]]),
        r"sequence 1 is right-padded",
        gpt2,
    )


def test_qk_circuit_offsets_are_integers_the_head_can_score():
    m = kind_model(ROTARY)
    ok = A.qk_circuit(m, layer=0, head=0, offset=np.int64(3)).AB
    assert torch.allclose(ok, A.qk_circuit(m, layer=0, head=0, offset=3).AB)
    refused(lambda: A.qk_circuit(m, layer=0, head=0, offset=-1), r"offset -1 puts the key after")
    refused(lambda: A.qk_circuit(m, layer=0, head=0, offset=64), r"does not fit the context")
    refused(lambda: A.qk_circuit(m, layer=0, head=0, offset=2.0), r"offset must be an integer")


def test_duplicate_positions_collapse_with_a_warning(model):
    with pytest.warns(UserWarning, match=r"duplicate query_positions \[7\]"):
        df = A.qk_attribution(model, T3, layer=1, head=1, query_positions=[7, -1])
    assert df["query_position"].unique().tolist() == [7]
    with pytest.warns(UserWarning, match=r"duplicate positions \[2\]"):
        A.ablate_heads(model, T3, heads=["L1H1"], positions=[2, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        A.qk_attribution(model, T3, layer=1, head=1, query_positions=[6, 7])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: A.ablate_heads(m, T3, method="zero"), r"takes ablation= now .*'zero'"),
        (
            lambda m: A.direct_logit_attribution(m, T3, answer=5, positions=-1),
            r"takes at= now \(positions= was its old name\); pass at=-1",
        ),
        (
            lambda m: A.direct_logit_attribution(m, T3, answer=5, unit="head"),
            r"takes by= now .*pass by='head'",
        ),
        (lambda m: A.logit_lens(m, T3, positions=[-1]), r"takes at= now"),
        (lambda m: A.ablate_mlps(m, T3, method="mean"), r"ablate_mlps\(\) takes ablation="),
    ],
)
def test_retired_parameter_names_name_the_new_word(model, call, match):
    refused(lambda: call(model), match, model)

"""Direct logit attribution adds up to the model's own logit difference, on every model kind.

Checked against the model's logits (computed by the model, not by us), against
TransformerLens's own DLA where it is right (a GPT-2 bridge in compatibility
mode), and shown right where TransformerLens's primitives are not (an RMSNorm
bridge with a learned norm weight, unfolded). SmolLM2 is checked in
test_pretrained.py, beside the session's loaded copy.
"""

import pytest
import torch
from conftest import jitter

from interp import InterpError
from interp.analysis import direct_logit_attribution
from interp.models import load_model
from interp.models.hf import random_gpt2, random_llama

MODELS = {
    "attn-only (LayerNorm)": lambda: load_model("induction-2l"),
    "GPT-2 bridge (LayerNorm, biases)": lambda: jitter(random_gpt2(2, vocab=30)),
    "Llama bridge (RMSNorm, GQA, rotary)": lambda: jitter(random_llama(2, vocab=30)),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def _model_logit_diff(model, tokens, a, b, pos=-1):
    with torch.no_grad():
        logits = model(tokens)[:, pos].float()
    rows = torch.arange(len(tokens))
    return float((logits[rows, a] - logits[rows, b]).mean())


@pytest.mark.parametrize("unit", ["head", "component", "layer"])
def test_rows_sum_to_the_models_own_logit_difference(model, unit):
    tokens = torch.randint(2, 30, (4, 9), generator=torch.Generator().manual_seed(0))
    a, b = torch.tensor([5, 7, 9, 11]), torch.tensor([6, 8, 10, 12])
    df = direct_logit_attribution(model, tokens, answer=a, wrong=b, by=unit)
    want = _model_logit_diff(model, tokens, a, b)
    assert df["value"].sum() == pytest.approx(want, rel=1e-4, abs=1e-5)
    # the total is the engine's own logit difference, the model's up to float32 rounding of
    # the logits (a few ulps of their size, not of the difference): 1e-6 of that size
    with torch.no_grad():
        size = max(1.0, float(model(tokens)[:, -1].abs().max()))
    assert df.attrs["total"] == pytest.approx(want, rel=1e-5, abs=1e-6 * size)
    # complete: the pieces alone add up (no remainder row was needed)
    assert "remainder" not in set(df["component"]), df.attrs.get("remainder_reason")
    assert abs(df.attrs["remainder"]) < 1e-4 * max(1.0, abs(want))
    assert "frozen" in df.attrs["final_norm"] and df.attrs["metric"].startswith("logit[answer]")
    if unit == "head":
        n = model.cfg.n_layers * model.cfg.n_heads
        assert (df["component"] == "head").sum() == n
        assert {"embed", "bias"} <= set(df["component"])


def test_units_agree_and_the_logit_alone(model):
    tokens = torch.randint(2, 30, (3, 8), generator=torch.Generator().manual_seed(2))
    by_unit = {
        u: direct_logit_attribution(model, tokens, answer=5, wrong=6, by=u)
        for u in ("head", "component", "layer")
    }
    heads, comps, layers = by_unit["head"], by_unit["component"], by_unit["layer"]
    for l in range(model.cfg.n_layers):
        attn = heads[(heads["layer"] == l) & heads["component"].isin(["head", "attn_bias"])]
        mlp = heads[(heads["layer"] == l) & (heads["component"] == "mlp")]
        got = comps.set_index("label")
        assert got.loc[f"L{l}.attn", "value"] == pytest.approx(attn["value"].sum(), abs=1e-5)
        both = attn["value"].sum() + mlp["value"].sum()
        assert layers.set_index("label").loc[f"L{l}", "value"] == pytest.approx(both, abs=1e-5)
    alone = direct_logit_attribution(model, tokens, answer=5)
    with torch.no_grad():
        want = float(model(tokens)[:, -1, 5].float().mean())
    assert alone["value"].sum() == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert alone.attrs["metric"] == "logit[answer]"


def test_equal_to_transformer_lens_where_it_is_right():
    """TransformerLens 4.3's tools.analysis.direct_logit_attribution(unit="component") on a
    GPT-2 bridge in compatibility mode (its LayerNorm folded, as it requires)."""
    from transformer_lens.tools.analysis import direct_logit_attribution as tl_dla

    model = jitter(random_gpt2(2, vocab=30))
    model.enable_compatibility_mode()
    tokens = torch.randint(2, 30, (3, 7), generator=torch.Generator().manual_seed(0))
    a, b = torch.tensor([5, 5, 5]), torch.tensor([6, 6, 6])
    tl = tl_dla(model, tokens, answer_tokens=a, incorrect_tokens=b, unit="component")
    ours = direct_logit_attribution(model, tokens, answer=a, wrong=b, by="component")
    ours = ours.set_index("label")["value"]
    names = {"embed": "embed", "pos_embed": "pos_embed"}
    for l in range(2):
        names[f"{l}_attn_out"], names[f"{l}_mlp_out"] = f"L{l}.attn", f"L{l}.mlp"
    for label, value in zip(tl.labels, tl.attribution.mean(-1).tolist()):
        assert ours[names[label]] == pytest.approx(value, abs=1e-5), label


def test_transformer_lens_primitives_miss_an_unfolded_rmsnorm_weight():
    """On a Llama bridge as loaded (RMSNorm with a learned weight, nothing folded), TL's DLA
    refuses, and its primitives (decompose_resid + logit_attrs) leave the norm's weight out:
    their sum is not the model's logit difference. Ours is."""
    from transformer_lens.tools.analysis import direct_logit_attribution as tl_dla

    model = jitter(random_llama(2, vocab=30), scale=0.3)
    tokens = torch.randint(2, 30, (3, 7), generator=torch.Generator().manual_seed(0))
    a, b = torch.tensor([5, 5, 5]), torch.tensor([6, 6, 6])
    want = _model_logit_diff(model, tokens, a, b)
    with pytest.raises(ValueError, match="compatibility mode"):
        tl_dla(model, tokens, answer_tokens=a, incorrect_tokens=b)
    _, cache = model.run_with_cache(tokens)
    stack = cache.decompose_resid(apply_ln=False, pos_slice=-1)
    theirs = float(
        cache.logit_attrs(stack, tokens=a, incorrect_tokens=b, pos_slice=-1).sum(0).mean()
    )
    ours = direct_logit_attribution(model, tokens, answer=a, wrong=b)["value"].sum()
    assert ours == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert abs(theirs - want) > 0.05 * abs(want), (theirs, want)


def test_the_induction_head_writes_the_repeated_token():
    from interp.datasets import repeated_random_tokens

    model = load_model("induction-2l")
    data = repeated_random_tokens(8, 10, d_vocab=64, seed=3)
    tokens, answer = data.tokens[:, :15], data.tokens[:, 15]  # predict the repeat of token 4
    df = direct_logit_attribution(model, tokens, answer=answer, wrong=0)
    heads = df[df["component"] == "head"].set_index("label")["value"]
    assert heads.idxmax() == "L1H1" and heads["L1H1"] > 3 * heads.drop("L1H1").abs().max()


def test_bad_input_is_named(minilm):
    model = load_model("induction-2l")
    tokens = torch.randint(1, 64, (2, 6))
    with pytest.raises(InterpError, match="unknown by"):
        direct_logit_attribution(model, tokens, answer=3, by="block")
    with pytest.raises(InterpError, match="same token"):
        direct_logit_attribution(model, tokens, answer=3, wrong=3)
    with pytest.raises(InterpError, match="has 3 entries but there are 2 sequences"):
        direct_logit_attribution(model, tokens, answer=[1, 2, 3])
    with pytest.raises(InterpError, match="outside the vocabulary"):
        direct_logit_attribution(model, tokens, answer=64)
    with pytest.raises(
        InterpError, match=r"is text \(not a token id\), and this model has no tokenizer"
    ):
        direct_logit_attribution(model, tokens, answer="Mary")
    with pytest.raises(InterpError, match="at \\[9\\] out of range"):
        direct_logit_attribution(model, tokens, answer=3, at=9)
    with pytest.raises(InterpError, match="has no language-model head"):
        direct_logit_attribution(minilm, torch.tensor([[101, 2054, 102]]), answer=5)
    gpt2 = random_gpt2(2, vocab=30)
    with pytest.raises(InterpError, match=r"'t5 t6' is 2 tokens for this tokenizer \['t5', 't6'\]"):
        direct_logit_attribution(gpt2, torch.tensor([[0, 3, 4]]), answer="t5 t6")
    assert direct_logit_attribution(gpt2, torch.tensor([[0, 3, 4]]), answer="t5").attrs["total"]

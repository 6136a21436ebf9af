"""Attribution patching: the estimate is the formula it claims, and the exact rows are exact."""

import numpy as np
import pytest
import torch

from interp import InterpError
from interp.analysis.components.ablation import ablate_heads
from interp.analysis.components.attribution import attribute_heads
from interp.analysis.components.patching import patch_heads
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.datasets import repeated_random_tokens
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer
from interp.models.hf import random_gpt2


def attn_only(**kw):
    cfg = dict(n_layers=2, n_heads=3, d_model=24, d_head=8, d_vocab=30, n_ctx=32, seed=4)
    return AttnOnlyTransformer(AttnOnlyConfig(**{**cfg, **kw})).eval()


def hand_gradients(model, tokens, metric):
    """dM/dz at every layer's hook_z, by plain autograd (retain_grad on the activations)."""
    zs = {}

    def keep(z, hook):
        z.retain_grad()
        zs[int(hook.name.split(".")[1])] = z
        return z

    with torch.enable_grad():
        hooks = [(f"blocks.{l}.attn.hook_z", keep) for l in range(model.cfg.n_layers)]
        value = metric(model.run_with_hooks(tokens, fwd_hooks=hooks), tokens)
        value.backward()
    model.zero_grad(set_to_none=True)
    return {l: (z.detach(), z.grad.detach()) for l, z in zs.items()}


@pytest.fixture(scope="module", params=["attn-only", "gpt2"])
def case(request):
    model = attn_only() if request.param == "attn-only" else random_gpt2(2, vocab=30, seed=1)
    data = repeated_random_tokens(3, 8, d_vocab=30, seed=0)
    return model, data


def test_zero_and_mean_estimates_equal_the_formula(case):
    model, data = case
    metric = loss_metric(data.loss_mask)
    grads = hand_gradients(model, data.tokens, metric)
    for ablation in ("zero", "mean"):
        df = attribute_heads(model, data.tokens, ablation=ablation, metric=metric)
        for r in df.itertuples():
            z, g = grads[r.layer]
            target = torch.zeros_like(z) if ablation == "zero" else z.mean(0, keepdim=True)
            want = float(((target - z)[:, :, r.head] * g[:, :, r.head]).sum())
            assert r.estimate == pytest.approx(want, abs=1e-5, rel=1e-4), (ablation, r.label)
        assert df["exact"].isna().all()
        assert {"ablated", "effect", "source"}.isdisjoint(df.columns)  # no column mixes the two
        assert df.attrs["forward_equivalents"] <= 4


def test_patch_estimate_equals_the_formula(case):
    model, data = case
    corrupted = repeated_random_tokens(3, 8, d_vocab=30, seed=5).tokens
    metric = logit_diff_metric(3, 4)
    grads = hand_gradients(model, corrupted, metric)
    _, cache = model.run_with_cache(data.tokens)
    df = attribute_heads(
        model, data.tokens, ablation="patch", corrupted_tokens=corrupted, metric=metric,
        direction="denoising",
    )  # fmt: skip
    for r in df.itertuples():  # denoising: the gradient on the corrupted run, z' clean
        z, g = grads[r.layer]
        z_clean = cache[f"blocks.{r.layer}.attn.hook_z"]
        want = float(((z_clean - z)[:, :, r.head] * g[:, :, r.head]).sum())
        assert r.estimate == pytest.approx(want, abs=1e-5, rel=1e-4), r.label
    noising = attribute_heads(
        model, data.tokens, ablation="patch", corrupted_tokens=corrupted, metric=metric
    )
    clean_grads = hand_gradients(model, data.tokens, metric)
    _, corrupted_cache = model.run_with_cache(corrupted)
    for r in noising.itertuples():  # noising: the gradient on the clean run, z' corrupted
        z, g = clean_grads[r.layer]
        z_corr = corrupted_cache[f"blocks.{r.layer}.attn.hook_z"]
        want = float(((z_corr - z)[:, :, r.head] * g[:, :, r.head]).sum())
        assert r.estimate == pytest.approx(want, abs=1e-5, rel=1e-4), r.label
    assert noising.attrs["direction"] == "noising" and df.attrs["direction"] == "denoising"
    assert {
        "clean",
        "corrupted",
        "estimate",
        "estimate_normalized",
        "exact",
        "exact_normalized",
    } <= set(df.columns)
    assert {"patched", "normalized", "effect"}.isdisjoint(df.columns)


def test_verify_fills_exact_values_equal_to_the_loop(case):
    model, data = case
    metric = loss_metric(data.loss_mask)
    df = attribute_heads(model, data.tokens, metric=metric, verify=2)
    exact = df.dropna(subset="exact")
    assert len(exact) == 2
    assert set(exact["label"]) == set(
        df.reindex(df["estimate"].abs().sort_values().index)["label"][-2:]
    )
    loop = ablate_heads(model, data.tokens, metric=metric, heads=exact["label"].tolist()).set_index(
        "label"
    )
    # effects are differences of metric values (ablated - clean), each rounded in float32 by
    # passes batched otherwise: 1e-6 of the metric's size (about 8 ulps), not 1e-6 absolute
    scale = max(1.0, float(loop["clean"].abs().max()), float(loop["ablated"].abs().max()))
    for r in exact.itertuples():
        assert r.exact == pytest.approx(loop.loc[r.label, "effect"], rel=1e-5, abs=1e-6 * scale)
    corrupted = repeated_random_tokens(3, 8, d_vocab=30, seed=5).tokens
    ld = logit_diff_metric(3, 4)
    pdf = attribute_heads(
        model, data.tokens, ablation="patch", corrupted_tokens=corrupted, metric=ld, verify=1
    )
    row = pdf.dropna(subset="exact").iloc[0]
    ref = patch_heads(
        model, data.tokens, corrupted_tokens=corrupted, metric=ld, heads=[row["label"]]
    )
    scale = max(1.0, abs(ref["clean"].item()), abs(ref["patched"].item()))  # as above
    assert row["exact"] == pytest.approx(ref["effect"].item(), rel=1e-5, abs=1e-6 * scale)


def test_near_linear_model_estimate_matches_exact():
    """Heads that write almost nothing: removing one is a small change, so first order is right."""
    model = attn_only(normalization_type=None, init_range=0.3)
    with torch.no_grad():
        for block in model.blocks:  # each head writes 1% of its usual output
            block.attn.W_O.mul_(0.01)
    data = repeated_random_tokens(4, 8, d_vocab=30, seed=2)
    metric = loss_metric(data.loss_mask)
    est = attribute_heads(model, data.tokens, metric=metric)
    exact = ablate_heads(model, data.tokens, metric=metric)
    scale = float(exact["effect"].abs().max())
    assert scale > 1e-4  # measurable in float32
    # second-order terms are about (1%)^2 of the first-order ones here: 1% of the scale
    np.testing.assert_allclose(est["estimate"], exact["effect"], atol=0.01 * scale)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
def test_bad_input(case):
    model, data = case
    t = data.tokens
    with pytest.raises(InterpError, match="needs corrupted_tokens"):
        attribute_heads(model, t, ablation="patch", metric=logit_diff_metric(1, 2))
    with pytest.raises(InterpError, match="corrupted_tokens are for ablation='patch'"):
        attribute_heads(model, t, corrupted_tokens=t)
    with pytest.raises(InterpError, match="unknown ablation 'median'"):
        attribute_heads(model, t, ablation="median")
    with pytest.raises(InterpError, match="unknown direction"):
        attribute_heads(model, t, direction="up")
    with pytest.raises(InterpError, match="verify must be >= 0"):
        attribute_heads(model, t, verify=-1)
    with pytest.raises(InterpError, match="not differentiable"):
        attribute_heads(model, t, metric=lambda logits, tokens: float(logits.sum()))


def test_the_qk_correction_is_the_exact_first_hop_pattern_change():
    """correction(h) = [M(A_1 from the edited residual) - M] - d/de M(A_1 from x + e D) at 0,
    computed here independently with hooks and autograd (2 layers, no LayerNorm, a metric
    linear in the output, so M is linear in layer 1's pattern given the clean values)."""
    model = attn_only(normalization_type=None, init_range=0.4, seed=1)
    data = repeated_random_tokens(2, 6, d_vocab=30, seed=2)
    t = data.tokens
    metric = logit_diff_metric(3, 4)
    plain = attribute_heads(model, t, metric=metric).set_index("label")["estimate"]
    fixed = attribute_heads(model, t, metric=metric, correction="qk").set_index("label")["estimate"]
    _, cache = model.run_with_cache(t)
    x1 = cache["blocks.1.hook_resid_pre"]

    def pattern_from(resid):
        out = {}

        def swap(x, hook):
            return resid

        def grab(p, hook):
            out["p"] = p

        model.run_with_hooks(
            t, fwd_hooks=[("blocks.1.hook_resid_pre", swap), ("blocks.1.attn.hook_pattern", grab)]
        )
        return out["p"]

    def metric_with_pattern(p):
        hooks = [("blocks.1.attn.hook_pattern", lambda a, hook: p)]
        return metric(model.run_with_hooks(t, fwd_hooks=hooks), t)

    clean = float(metric(model(t), t))
    for h in range(3):
        delta = -cache["blocks.0.attn.hook_z"][:, :, h] @ model.W_O[0, h]  # zeroing head (0, h)
        with torch.no_grad():
            exact_term = float(metric_with_pattern(pattern_from(x1 + delta))) - clean
        eps = torch.zeros((), requires_grad=True)
        with torch.enable_grad():
            (slope,) = torch.autograd.grad(metric_with_pattern(pattern_from(x1 + eps * delta)), eps)
        want = exact_term - float(slope)
        got = fixed[f"L0H{h}"] - plain[f"L0H{h}"]
        assert got == pytest.approx(want, abs=1e-4, rel=1e-4), h
    # the last layer has no later attention: nothing to correct
    assert np.allclose(fixed.filter(like="L1H"), plain.filter(like="L1H"))


def test_the_qk_correction_on_a_bridge_is_the_formula():
    """On a TransformerBridge (LayerNorm, MLPs, the block-output capture path):
    correction(h) = <A_1(x + D) - A_1(x), g> - d/de <A_1(x + e D), g> at 0, with
    ``g = dM/dA_1`` at the clean run, every term computed here with hooks and autograd."""
    model = random_gpt2(2, vocab=30, seed=1)
    with torch.no_grad():  # sharper attention than the default init, so the fix is not ~0
        for blk in model.interp_hf_model.transformer.h:
            blk.attn.c_attn.weight.mul_(6.0)
    data = repeated_random_tokens(2, 6, d_vocab=30, seed=2)
    t = data.tokens
    metric = loss_metric(data.loss_mask)
    plain = attribute_heads(model, t, metric=metric).set_index("label")["estimate"]
    fixed = attribute_heads(model, t, metric=metric, correction="qk").set_index("label")["estimate"]
    _, cache = model.run_with_cache(t)
    x1 = cache["blocks.1.hook_resid_pre"]
    clean_pattern = cache["blocks.1.attn.hook_pattern"]

    def pattern_from(resid):
        out = {}

        def grab(p, hook):
            out["p"] = p

        hooks = [("blocks.1.hook_resid_pre", lambda x, hook: resid)]
        model.run_with_hooks(t, fwd_hooks=hooks + [("blocks.1.attn.hook_pattern", grab)])
        return out["p"]

    p = clean_pattern.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        hooks = [("blocks.1.attn.hook_pattern", lambda a, hook: p)]
        (g,) = torch.autograd.grad(metric(model.run_with_hooks(t, fwd_hooks=hooks), t), p)
    for h in range(model.cfg.n_heads):
        delta = -cache["blocks.0.attn.hook_z"][:, :, h] @ model.W_O[0, h]  # zeroing head (0, h)
        with torch.no_grad():
            first = float(((pattern_from(x1 + delta) - clean_pattern) * g).sum())
        eps = torch.zeros((), requires_grad=True)
        with torch.enable_grad():
            (slope,) = torch.autograd.grad((pattern_from(x1 + eps * delta) * g).sum(), eps)
        got = fixed[f"L0H{h}"] - plain[f"L0H{h}"]
        assert abs(first - float(slope)) > 1e-5  # a correction worth checking
        # got is fixed - plain, a difference of two float32 estimates: besides rel 1e-4 of
        # the correction, a floor of 1e-6 of the estimates' size (about 8 ulps of them)
        floor = 1e-6 * float(plain.abs().max())
        assert got == pytest.approx(first - float(slope), rel=1e-4, abs=floor), h
    assert np.allclose(fixed.filter(like="L1H"), plain.filter(like="L1H"))


def test_estimate_agreement_measures():
    import pandas as pd

    from interp.analysis import estimate_agreement

    labels = ["L0H0", "L0H1", "L1H0", "L1H1"]
    exact = pd.Series([4.0, -3.0, 2.0, 1.0], index=labels)
    reversed_ = pd.Series([1.0, 2.0, 3.0, 4.0], index=labels[::-1])  # other order, same heads
    ag = estimate_agreement(exact, reversed_, top=2, within=(1, 2, 4)).set_index("measure")
    # ranks of exact: 4, 1, 3, 2; of the estimate (L0H0=4, L0H1=3, L1H0=2, L1H1=1): 4, 3, 2, 1
    assert ag.loc["Spearman (estimate vs exact, all heads)", "value"] == pytest.approx(0.4)
    assert ag.loc["exact top 2 in estimate's top 1", "value"] == 1  # L0H0
    assert ag.loc["exact top 2 in estimate's top 2", "value"] == 2
    assert ag.loc["exact top 2 in estimate's top 4", "value"] == 2
    with pytest.raises(InterpError, match="the same heads"):
        estimate_agreement(exact, exact.iloc[:3])
    with pytest.raises(InterpError, match="top must be >= 1"):
        estimate_agreement(exact, exact, top=0)

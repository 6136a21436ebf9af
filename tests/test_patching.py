"""Activation patching equals TransformerLens's patching and the plain loop."""

import numpy as np
import pytest
import torch

from interp import InterpError
from interp.analysis.components.patching import patch_heads
from interp.core.metrics import logit_diff_metric
from interp.datasets import repeated_random_tokens
from interp.models.hf import random_gpt2


@pytest.fixture(scope="module")
def setup():
    model = random_gpt2(2, vocab=40, seed=3)
    clean = repeated_random_tokens(3, 6, d_vocab=40, seed=1).tokens
    corrupted = repeated_random_tokens(3, 6, d_vocab=40, seed=2).tokens
    return model, clean, corrupted, logit_diff_metric(5, 7)


def test_equals_transformer_lens(setup):
    from transformer_lens.patching import get_act_patch_attn_head_out_all_pos

    model, clean, corrupted, metric = setup
    df = patch_heads(model, clean, corrupted_tokens=corrupted, metric=metric, direction="denoising")
    _, cache = model.run_with_cache(clean)
    tl = get_act_patch_attn_head_out_all_pos(
        model, corrupted, cache, lambda lg: metric(lg, corrupted)
    )
    # the metric is a logit difference: TL's loop and our engine round it in float32 to a few
    # ulps of the logits' size, not of the difference: atol 1e-6 of that size (about 8 ulps)
    with torch.no_grad():
        size = max(1.0, *(float(model(t).abs().max()) for t in (clean, corrupted)))
    np.testing.assert_allclose(df["patched"], tl.flatten().numpy(), rtol=1e-5, atol=1e-6 * size)
    assert list(df.columns) == [
        "layer",
        "head",
        "label",
        "clean",
        "corrupted",
        "patched",
        "effect",
        "normalized",
    ]
    assert df.attrs["engine"] == "resume-suffix"  # the two runs share their BOS column
    again = patch_heads(
        model, clean, corrupted_tokens=corrupted, metric=metric, cache=cache, direction="denoising"
    )
    # a cache of the clean run against the engine's own pass: rtol 1e-6 of each value, and
    # 1e-6 of the logits' size for values near 0 (a difference of logits, as above)
    np.testing.assert_allclose(again["patched"], df["patched"], rtol=1e-6, atol=1e-6 * size)


@pytest.mark.parametrize(("shared", "engine"), [(0, "resume-blocks"), (9, "resume-suffix")])
def test_a_shared_prefix_runs_only_the_later_positions(setup, shared, engine):
    """Clean and corrupted prompts that agree on their first ``shared`` tokens: each patched
    pass computes only the later positions against the kept keys and values of the first
    ones (fewer forward-equivalents), and equals TransformerLens's loop of whole passes."""
    from transformer_lens.patching import get_act_patch_attn_head_out_all_pos

    model, clean, corrupted, metric = setup
    corrupted = corrupted.clone()
    if shared:
        corrupted[:, :shared] = clean[:, :shared]
    else:
        corrupted[:, 0] = (clean[:, 0] + 1) % 40
    df = patch_heads(model, clean, corrupted_tokens=corrupted, metric=metric, direction="denoising")
    _, cache = model.run_with_cache(clean)
    tl = get_act_patch_attn_head_out_all_pos(
        model, corrupted, cache, lambda lg: metric(lg, corrupted)
    )
    with torch.no_grad():
        size = max(1.0, *(float(model(t).abs().max()) for t in (clean, corrupted)))
    # the later positions meet the kept keys through other matrix shapes: equal to rounding,
    # 1e-6 of the logits' size (as above), not bit for bit
    np.testing.assert_allclose(df["patched"], tl.flatten().numpy(), rtol=1e-5, atol=1e-6 * size)
    assert df.attrs["engine"] == engine
    est = patch_heads(model, clean, corrupted_tokens=corrupted, metric=metric,
                      direction="denoising", estimate=True)  # fmt: skip
    assert est.forward_equivalents == pytest.approx(df.attrs["forward_equivalents"], rel=1e-6)
    if shared:  # the same sweep counted over whole passes costs more
        from interp.engine.sweeps.sites import head_edits
        from interp.engine.sweeps.sweep import sweep_work

        edits = head_edits([(l, h) for l in range(2) for h in range(model.cfg.n_heads)])
        n = clean.shape[1]
        whole = sweep_work(model, edits, "resume-blocks", pos=n, rows=[n - 1])
        later = sweep_work(model, edits, pos=n, rows=[n - 1], shared=shared)
        assert later < whole * (n - shared / 2) / n


def test_positions_restrict_the_patch(setup):
    model, clean, corrupted, metric = setup
    one = patch_heads(
        model,
        clean,
        corrupted_tokens=corrupted,
        metric=metric,
        heads=["L1H0"],
        positions=[2, -1],
        direction="denoising",
    )
    _, cache = model.run_with_cache(clean)
    z_clean = cache["blocks.1.attn.hook_z"]
    mask = torch.zeros(clean.shape[1], dtype=torch.bool)
    mask[[2, -1]] = True

    def hook(z, hook):
        z = z.clone()
        z[:, mask, 0] = z_clean[:, mask, 0]
        return z

    with torch.no_grad():
        logits = model.run_with_hooks(corrupted, fwd_hooks=[("blocks.1.attn.hook_z", hook)])
    want = float(metric(logits, corrupted))
    # a logit difference from the engine and from hooks: rel 1e-5 of it, and 1e-6 of the
    # logits' size (about 8 float32 ulps) where the difference itself is near 0
    size = max(1.0, float(logits.abs().max()))
    assert one["patched"].item() == pytest.approx(want, rel=1e-5, abs=1e-6 * size)


def test_bad_input(setup):
    model, clean, corrupted, metric = setup
    with pytest.raises(InterpError, match="must have the same shape"):
        patch_heads(model, clean, corrupted_tokens=corrupted[:, :5], metric=metric)
    with pytest.raises(InterpError, match="corrupted tokens are the clean tokens"):
        patch_heads(model, clean, corrupted_tokens=clean, metric=metric)
    with pytest.raises(InterpError, match="outside the vocabulary"):
        patch_heads(model, clean, corrupted_tokens=corrupted, metric=logit_diff_metric(5, 999))
    with pytest.raises(InterpError, match="positions .* out of range"):
        patch_heads(model, clean, corrupted_tokens=corrupted, metric=metric, positions=[40])
    with pytest.raises(InterpError, match="has 2 ids but there are 3"):
        patch_heads(
            model,
            clean,
            corrupted_tokens=corrupted,
            metric=logit_diff_metric(torch.tensor([1, 2]), torch.tensor([3, 4])),
        )


def test_refused_on_a_model_without_an_lm_head(minilm):
    t = torch.tensor([[101, 2000, 2001, 102]])
    with pytest.raises(InterpError, match="logits are meaningless"):
        patch_heads(minilm, t, corrupted_tokens=t.flip(1), metric=logit_diff_metric(5, 7))

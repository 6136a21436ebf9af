"""The batched ablation engine equals the per-head run_with_hooks loop on every model kind."""

import numpy as np
import pytest
import torch

from interp.analysis.ablation import (
    ablate_head_groups,
    ablate_heads,
    logit_diff_metric,
    loss_metric,
    patch_heads,
)
from interp.datasets import repeated_random_tokens
from interp.models import load_induction_model
from interp.models.hf import random_gpt2, random_llama
from interp.models.toy import toy_model


def naive(model, tokens, heads, metric, replacement=None):
    """One run_with_hooks per head: the straightforward loop the engine must equal."""
    out = []
    with torch.no_grad():
        for l, h in heads:

            def hook(z, hook, h=h, l=l):
                z = z.clone()
                z[:, :, h] = 0.0 if replacement is None else replacement[l][:, :, h]
                return z

            logits = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{l}.attn.hook_z", hook)])
            out.append(float(metric(logits, tokens)))
    return np.array(out)


MODELS = {
    "toy": lambda: toy_model(
        np.random.default_rng(0).standard_normal((12, 8)),
        *np.random.default_rng(1).standard_normal((3, 2, 2, 8, 4)),
        np.random.default_rng(2).standard_normal((2, 2, 4, 8)),
        residual=True,
    ),
    "induction": load_induction_model,
    "gpt2": lambda: random_gpt2(3, vocab=40),
    "llama-gqa": lambda: random_llama(3, vocab=40),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model_and_tokens(request):
    model = MODELS[request.param]()
    vocab = int(model.cfg.d_vocab)
    data = repeated_random_tokens(4, 7, d_vocab=min(vocab, 40), seed=0)
    return request.param, model, data


def metric_for(name, data):
    if name == "toy":  # no unembedding: a scalar readout of the final residual

        def m(out, tokens):
            return out[:, -1].pow(2).sum(-1).mean()

        return m
    return loss_metric(data.loss_mask)


@pytest.mark.parametrize("batch_size", [1, 3, None])
def test_zero_ablation_equals_naive_loop(model_and_tokens, batch_size):
    name, model, data = model_and_tokens
    metric = metric_for(name, data)
    df = ablate_heads(model, data.tokens, metric=metric, batch_size=batch_size)
    heads = list(zip(df["layer"], df["head"]))
    ref = naive(model, data.tokens, heads, metric)
    np.testing.assert_allclose(df["ablated"].to_numpy(), ref, rtol=1e-5, atol=1e-6)


def test_mean_ablation_equals_naive(model_and_tokens):
    name, model, data = model_and_tokens
    metric = metric_for(name, data)
    df = ablate_heads(model, data.tokens, metric=metric, method="mean", batch_size=4)
    cfg = model.cfg
    _, cache = model.run_with_cache(data.tokens, names_filter=lambda n: n.endswith("hook_z"))
    repl = {l: cache[f"blocks.{l}.attn.hook_z"].mean(0, keepdim=True) for l in range(cfg.n_layers)}
    ref = naive(model, data.tokens, list(zip(df["layer"], df["head"])), metric, repl)
    np.testing.assert_allclose(df["ablated"].to_numpy(), ref, rtol=1e-5, atol=1e-6)


def test_groups_equal_naive(model_and_tokens):
    name, model, data = model_and_tokens
    metric = metric_for(name, data)
    groups = {"a": [(0, 0), (1, 1)], "b": [(model.cfg.n_layers - 1, 0)]}
    df = ablate_head_groups(model, data.tokens, groups, metric=metric, batch_size=2)

    def run(hs):
        def make(hl):
            def hook(z, hook):
                z = z.clone()
                z[:, :, hl] = 0.0
                return z

            return hook

        by = {}
        for l, h in hs:
            by.setdefault(l, []).append(h)
        with torch.no_grad():
            out = model.run_with_hooks(
                data.tokens,
                fwd_hooks=[(f"blocks.{l}.attn.hook_z", make(hl)) for l, hl in by.items()],
            )
        return float(metric(out, data.tokens))

    np.testing.assert_allclose(
        df["ablated"].to_numpy(), [run(g) for g in groups.values()], rtol=1e-5, atol=1e-6
    )


def test_patching_matches_transformer_lens():
    from transformer_lens.patching import get_act_patch_attn_head_out_all_pos

    model = random_gpt2(2, vocab=40, seed=3)
    clean = repeated_random_tokens(3, 6, d_vocab=40, seed=1).tokens
    corrupted = repeated_random_tokens(3, 6, d_vocab=40, seed=2).tokens
    metric = logit_diff_metric(5, 7)
    df = patch_heads(model, clean, corrupted, metric=metric)
    _, cache = model.run_with_cache(clean)
    tl = get_act_patch_attn_head_out_all_pos(
        model, corrupted, cache, lambda logits: metric(logits, corrupted)
    )
    np.testing.assert_allclose(df["patched"].to_numpy(), tl.flatten().numpy(), rtol=1e-5, atol=1e-6)
    assert list(df.columns) == [
        "layer",
        "head",
        "label",
        "clean",
        "corrupted",
        "patched",
        "delta",
        "normalized",
    ]
    # patching everything at every position restores the clean run
    one = patch_heads(model, clean, corrupted, metric=metric, heads=["L0H0"], positions=[2, 3])
    assert len(one) == 1


def test_memory_budget_chunks_and_progress(model_and_tokens):
    name, model, data = model_and_tokens
    metric = metric_for(name, data)
    small = ablate_heads(model, data.tokens, metric=metric, memory_budget=1)  # one per pass
    big = ablate_heads(model, data.tokens, metric=metric, progress=True)
    np.testing.assert_allclose(small["ablated"], big["ablated"], rtol=1e-5, atol=1e-6)


def test_attention_only_models_resume_after_the_edited_layer():
    """Our models sweep by resuming after each edit's layer; bridges by a growing batch."""
    from interp.analysis._sweep import _resume_supported
    from interp.models.hf import random_gpt2

    model = load_induction_model()
    tokens = repeated_random_tokens(4, 10, d_vocab=64, seed=1).tokens
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        full = model(tokens)
        torch.testing.assert_close(model.forward_from(cache["blocks.0.hook_resid_pre"], -1), full)
        torch.testing.assert_close(model.forward_from(cache["blocks.0.hook_resid_post"], 0), full)
    assert _resume_supported(model, tokens)
    assert not _resume_supported(random_gpt2(2, d_model=32, n_heads=2, vocab=50, n_ctx=16), tokens)


def test_eval_mode_is_enforced_and_mixed_modes_restored():
    from interp.analysis.ablation import eval_no_grad

    model = load_induction_model()
    model.eval()
    model.blocks[1].train()  # a user left one block in training mode
    with eval_no_grad(model):
        assert not any(m.training for m in model.modules())
        assert not torch.is_grad_enabled()
    assert model.blocks[1].training and not model.blocks[0].training and not model.training

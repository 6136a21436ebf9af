"""Head ablations equal the plain per-head run_with_hooks loop, on every model kind and path."""

import numpy as np
import pandas as pd
import pytest
import torch

from interp import InterpError
from interp.analysis.components.ablation import (
    ablate_head_groups,
    ablate_heads,
    head_sweep_outline,
)
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.datasets import repeated_random_tokens
from interp.engine.ablations import resample_index
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer
from interp.models.hf import random_gpt2, random_llama
from interp.models.toy import toy_model


def run(model, tokens, edits, metric, replacement=None, positions=None):
    """The plain loop: one run_with_hooks per edit (a list of (layer, head))."""
    out = []
    with torch.no_grad():
        for edit in edits:
            hooks = []
            for l, h in edit:

                def hook(z, hook, h=h, l=l):
                    z = z.clone()
                    new = (
                        torch.zeros_like(z[:, :, h])
                        if replacement is None
                        else replacement[l][:, :, h]
                    )
                    if positions is not None:
                        new = torch.where(positions.view(1, -1, 1), new, z[:, :, h])
                    z[:, :, h] = new
                    return z

                hooks.append((f"blocks.{l}.attn.hook_z", hook))
            out.append(float(metric(model.run_with_hooks(tokens, fwd_hooks=hooks), tokens)))
    return np.array(out)


def _toy():
    rng = np.random.default_rng(0)
    return toy_model(
        rng.standard_normal((12, 8)),
        *np.random.default_rng(1).standard_normal((3, 2, 2, 8, 4)),
        np.random.default_rng(2).standard_normal((2, 2, 4, 8)),
        residual=True,
    )


MODELS = {
    "toy": (_toy, "resume-after-block"),
    "attn-only": (
        lambda: AttnOnlyTransformer(
            AttnOnlyConfig(
                n_layers=3, n_heads=3, d_model=24, d_head=8, d_vocab=30, n_ctx=32, seed=4
            )
        ).eval(),
        "resume-after-block",
    ),
    "gpt2": (lambda: random_gpt2(3, vocab=40), "resume-blocks"),
    "llama-gqa": (lambda: random_llama(3, vocab=40), "resume-blocks"),
}


@pytest.fixture(scope="module", params=list(MODELS))
def case(request):
    build, path = MODELS[request.param]
    model = build()
    data = repeated_random_tokens(4, 7, d_vocab=min(int(model.cfg.d_vocab), 30), seed=0)
    if request.param == "toy":  # no unembedding: a scalar readout of the final residual

        def metric(out, tokens):
            return out[:, -1].pow(2).sum(-1).mean()

        return model, data, metric, path
    return model, data, loss_metric(data.loss_mask), path


# Tolerances: the metrics of these random models are losses near 3.4 from logits of order 1
# (the toy's, a float64 sum of squares): float32 rounds a loss by a few ulps of the larger of
# the logits and the loss, which rtol 1e-5 (1e-6 for the same pass) of the loss itself
# covers, so atol 1e-6 is only a floor. The trained induction model's logits are larger than
# its loss: there atol is 1e-6 of the logits' size (test_cache_supplies_the_mean).
@pytest.mark.parametrize("batch_size", [1, 3, None])
def test_zero_ablation_equals_the_loop(case, batch_size):
    model, data, metric, path = case
    df = ablate_heads(model, data.tokens, metric=metric, batch_size=batch_size)
    heads = list(zip(df["layer"], df["head"]))
    np.testing.assert_allclose(
        df["ablated"], run(model, data.tokens, [[h] for h in heads], metric), rtol=1e-5, atol=1e-6
    )
    assert df.attrs["engine"] == path and df.attrs["engine_note"] == ""
    assert list(df.columns) == ["layer", "head", "label", "clean", "ablated", "effect"]
    np.testing.assert_allclose(df["clean"], run(model, data.tokens, [[]], metric)[0], rtol=1e-6)


def test_mean_ablation_with_positions_equals_the_loop(case):
    model, data, metric, _ = case
    pos = [0, 2, -1]
    df = ablate_heads(
        model, data.tokens, metric=metric, ablation="mean", positions=pos, batch_size=2
    )
    _, cache = model.run_with_cache(data.tokens, names_filter=lambda n: n.endswith("hook_z"))
    repl = {
        l: cache[f"blocks.{l}.attn.hook_z"].mean(0, keepdim=True) for l in range(model.cfg.n_layers)
    }
    mask = torch.zeros(data.tokens.shape[1], dtype=torch.bool)
    mask[[0, 2, -1]] = True
    want = run(model, data.tokens, [[h] for h in zip(df["layer"], df["head"])], metric, repl, mask)
    np.testing.assert_allclose(df["ablated"], want, rtol=1e-5, atol=1e-6)


def test_groups_spanning_layers_equal_the_loop(case):
    model, data, metric, _ = case
    last = model.cfg.n_layers - 1
    groups = {"a": [(0, 0), (1, 1)], "b": [(last, 0)], "c": [(1, 0), (last, 1), (0, 1)]}
    df = ablate_head_groups(model, data.tokens, groups=groups, metric=metric, batch_size=2)
    np.testing.assert_allclose(
        df["ablated"], run(model, data.tokens, list(groups.values()), metric), rtol=1e-5, atol=1e-6
    )
    assert df["n_heads"].tolist() == [2, 1, 3]


def test_resample_draws_every_reference_row_and_equals_a_hand_loop():
    model = MODELS["attn-only"][0]()
    data = repeated_random_tokens(6, 7, d_vocab=30, seed=0)
    ref = repeated_random_tokens(3, 7, d_vocab=30, seed=9).tokens
    draws = torch.cat([resample_index(6, 3, s) for s in range(40)])
    assert set(draws.tolist()) == {0, 1, 2}  # the last row too
    own = torch.cat([resample_index(5, None, s) for s in range(40)]).view(40, 5)
    assert (own != torch.arange(5)).all() and set(own.flatten().tolist()) == set(range(5))
    metric = loss_metric(data.loss_mask)
    df = ablate_heads(
        model,
        data.tokens,
        ablation="resample",
        heads=["L1H2"],
        seed=5,
        reference_tokens=ref,
        metric=metric,
    )
    idx = resample_index(6, 3, 5)
    _, cache = model.run_with_cache(ref, names_filter="blocks.1.attn.hook_z")
    repl = {1: cache["blocks.1.attn.hook_z"][idx]}
    assert df["ablated"].item() == pytest.approx(
        run(model, data.tokens, [[(1, 2)]], metric, repl)[0], rel=1e-6
    )
    one = ablate_heads(
        model, data.tokens, ablation="resample", heads=["L1H2"], reference_tokens=ref[:1]
    )
    assert np.isfinite(one["ablated"].item())  # a single reference row is fine


def test_cache_supplies_the_mean(induction_model):
    data = repeated_random_tokens(8, 10, d_vocab=64, seed=1)
    _, cache = induction_model.run_with_cache(data.tokens)
    a = ablate_heads(induction_model, data.tokens, ablation="mean", loss_mask=data.loss_mask)
    b = ablate_heads(
        induction_model, data.tokens, ablation="mean", loss_mask=data.loss_mask, cache=cache
    )
    # a loss (1.8 here) is logsumexp - logit: a cache against the engine's own pass rounds it
    # by a few ulps of the logits' size (11 here), so atol is 1e-6 of that size (8 ulps)
    with torch.no_grad():
        size = max(1.0, float(induction_model(data.tokens).abs().max()))
    np.testing.assert_allclose(a["ablated"], b["ablated"], rtol=1e-6, atol=1e-6 * size)


def test_plan_says_what_will_run(induction_model):
    tokens = repeated_random_tokens(2, 10, d_vocab=64, seed=1).tokens
    plan = head_sweep_outline(induction_model, tokens)
    assert plan["path"] == "resume-after-block" and plan["edits"] == 4 and plan["passes"] >= 2


def test_a_path_that_fails_its_check_falls_back_to_the_loop_and_says_so():
    """A model whose forward_from is wrong: the engine notices and runs the loop instead."""
    model = MODELS["attn-only"][0]()
    good = model.forward_from

    def broken(resid, layer):  # wrong only when resuming after a block, as a buggy port would be
        return good(resid, layer) + (1.0 if layer >= 0 else 0.0)

    object.__setattr__(model, "forward_from", broken)
    data = repeated_random_tokens(2, 7, d_vocab=30, seed=0)
    metric = loss_metric(data.loss_mask)
    df = ablate_heads(model, data.tokens, metric=metric)
    assert df.attrs["engine"] == "loop", df.attrs
    assert "differed from the plain loop" in df.attrs["engine_note"]
    object.__delattr__(model, "forward_from")
    np.testing.assert_allclose(
        df["ablated"],
        run(model, data.tokens, [[h] for h in zip(df["layer"], df["head"])], metric),
        rtol=1e-5,
    )


def test_eval_mode_is_enforced_and_mixed_modes_restored(induction_model):
    from interp.core.protocol import eval_no_grad

    induction_model.blocks[1].train()  # a user left one block in training mode
    try:
        with eval_no_grad(induction_model):
            assert not any(m.training for m in induction_model.modules())
            assert not torch.is_grad_enabled()
        assert induction_model.blocks[1].training and not induction_model.blocks[0].training
    finally:
        induction_model.eval()


def test_bad_input(induction_model):
    model = induction_model
    data = repeated_random_tokens(3, 10, d_vocab=64, seed=0)
    t = data.tokens
    cases = [
        (dict(ablation="median"), "unknown ablation 'median'"),
        (dict(heads=[(0, 7)]), "head 7 out of range"),
        (dict(heads=["head3"]), "not of the form"),
        (dict(heads="L1H1"), "not the string 'L1H1'"),
        (dict(heads=[(0, 1, 2)]), "cannot read"),
        (dict(heads=[(0.0, 1.0)]), "must hold two integers"),
        (dict(heads=5), "must be a list of heads"),
        (dict(heads=[]), "no heads given"),
        (dict(ablation="mean", reference_tokens=t[:, :10]), "reference tokens have length"),
        (dict(reference_tokens=t), "reference_tokens are for mean and resample"),
        (dict(loss_mask=data.loss_mask[:, :5]), "loss_mask has shape"),
        (dict(loss_mask=data.loss_mask, metric=logit_diff_metric(3, 4)), "build the mask into it"),
        (dict(metric=lambda logits, tokens: logits.mean(-1)), "must return a scalar"),
        (dict(metric=lambda logits, tokens: torch.tensor(float("nan"))), "returned nan"),
        (dict(metric=logit_diff_metric(3, 999)), "outside the vocabulary"),
        (dict(batch_size=0), "batch_size must be >= 1"),
        (dict(batch_size=-1), "batch_size must be >= 1"),
        (dict(positions=[99]), "out of range"),
        (dict(positions=["a"]), "must be an integer"),
        (dict(seed=-1), "seed must be >= 0"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InterpError, match=message):
            ablate_heads(model, t, **kwargs)
    with pytest.raises(InterpError, match="needs at least two sequences"):
        ablate_heads(model, t[:1], ablation="resample")
    with pytest.raises(InterpError, match="groups must be a mapping"):
        ablate_head_groups(model, t, groups=[["L0H0"], ["L1H1"]])
    with pytest.raises(InterpError, match="answer and wrong are the same id"):
        logit_diff_metric(5, 5)
    with pytest.raises(InterpError, match="must be >= 0"):
        logit_diff_metric(-1, 5)
    with pytest.warns(UserWarning, match="duplicate heads L1H1"):
        df = ablate_heads(model, t, heads=["L1H1", (1, 1)])
    assert df["label"].tolist() == ["L1H1"]


def test_numpy_integers_are_accepted(induction_model):
    t = repeated_random_tokens(2, 10, d_vocab=64, seed=0).tokens
    df = ablate_heads(induction_model, t, heads=[(np.int64(1), np.int32(1))])
    assert df["label"].tolist() == ["L1H1"]


def test_a_single_sequence_takes_a_pos_loss_mask(induction_model):
    """``check_mask`` accepts ``[pos]`` for one sequence, so the loss must read it the same way."""
    data = repeated_random_tokens(1, 10, d_vocab=64, seed=0)
    flat = ablate_heads(induction_model, data.tokens, loss_mask=data.loss_mask[0])
    full = ablate_heads(induction_model, data.tokens, loss_mask=data.loss_mask)
    pd.testing.assert_frame_equal(flat, full)
    with pytest.raises(InterpError, match=r"has shape \(21,\) but tokens are \(3, 21\)"):
        tokens = repeated_random_tokens(3, 10, d_vocab=64, seed=0).tokens
        ablate_heads(induction_model, tokens, loss_mask=data.loss_mask[0])

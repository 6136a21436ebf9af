"""Head ablations equal the straightforward per-head run_with_hooks loop."""

import pytest
import torch

from interp import InterpError
from interp.analysis.ablation import ablate_head_groups, ablate_heads, logit_diff_metric
from interp.datasets import repeated_random_tokens
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer


@pytest.fixture(scope="module")
def setup():
    cfg = AttnOnlyConfig(n_layers=2, n_heads=3, d_model=24, d_head=8, d_vocab=30, n_ctx=32, seed=4)
    model = AttnOnlyTransformer(cfg).eval()
    data = repeated_random_tokens(6, 12, d_vocab=30, seed=0)
    return model, data


def naive_loss(model, tokens, mask, hooks):
    with torch.no_grad():
        return model.run_with_hooks(tokens, "loss", loss_mask=mask, fwd_hooks=hooks).item()


def test_zero_ablation_equals_naive_loop(setup):
    model, data = setup
    df = ablate_heads(model, data.tokens, positions=data.loss_mask)
    clean = naive_loss(model, data.tokens, data.loss_mask, [])
    for row in df.itertuples():

        def hook(z, hook, h=row.head):
            z = z.clone()
            z[:, :, h] = 0
            return z

        expect = naive_loss(
            model, data.tokens, data.loss_mask, [(f"blocks.{row.layer}.attn.hook_z", hook)]
        )
        assert row.ablated == pytest.approx(expect, rel=1e-5)
        assert row.clean == pytest.approx(clean, rel=1e-6)
    assert df.attrs == {"method": "zero", "metric": "loss"}
    assert list(df.columns) == ["layer", "head", "label", "clean", "ablated", "delta"]


def test_mean_and_resample(setup):
    model, data = setup
    mean = ablate_heads(model, data.tokens, method="mean", positions=data.loss_mask, heads=["L1H2"])
    _, cache = model.run_with_cache(data.tokens, names_filter="blocks.1.attn.hook_z")
    zmean = cache["blocks.1.attn.hook_z"].mean(0, keepdim=True)

    def hook(z, hook):
        z = z.clone()
        z[:, :, 2] = zmean[:, :, 2]
        return z

    assert mean["ablated"].item() == pytest.approx(
        naive_loss(model, data.tokens, data.loss_mask, [("blocks.1.attn.hook_z", hook)]), rel=1e-5
    )
    a = ablate_heads(model, data.tokens, method="resample", heads=[(0, 1)], seed=3)
    b = ablate_heads(model, data.tokens, method="resample", heads=[(0, 1)], seed=3)
    assert a["ablated"].item() == b["ablated"].item()


def test_groups_and_custom_metric(setup):
    model, data = setup
    g = ablate_head_groups(
        model,
        data.tokens,
        {"all": [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)], "one": ["L0H0"]},
    )
    assert g["n_heads"].tolist() == [6, 1]
    ld = ablate_heads(model, data.tokens, metric=logit_diff_metric(3, 4), heads=["L0H0"])
    assert ld.attrs["metric"] == "logit_diff"


def test_eval_mode_restored(setup):
    model, data = setup
    model.train()
    ablate_heads(model, data.tokens, heads=["L0H0"])
    assert model.training
    model.eval()


def test_bad_input(setup):
    model, data = setup
    with pytest.raises(InterpError, match="unknown ablation method 'median'"):
        ablate_heads(model, data.tokens, method="median")
    with pytest.raises(InterpError, match="head 7 out of range"):
        ablate_heads(model, data.tokens, heads=[(0, 7)])
    with pytest.raises(InterpError, match="not of the form"):
        ablate_heads(model, data.tokens, heads=["head3"])
    with pytest.raises(InterpError, match="reference tokens have length"):
        ablate_heads(model, data.tokens, method="mean", reference_tokens=data.tokens[:, :10])
    with pytest.raises(InterpError, match="positions mask has shape"):
        ablate_heads(model, data.tokens, positions=data.loss_mask[:, :5])
    with pytest.raises(InterpError, match="must return a scalar"):
        ablate_heads(model, data.tokens, metric=lambda logits, tokens: logits.mean(-1))
    with pytest.raises(InterpError, match="returned nan"):
        ablate_heads(model, data.tokens, metric=lambda logits, tokens: torch.tensor(float("nan")))

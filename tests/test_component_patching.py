"""Patching every component by layer, head and position; MLP and layer ablation.

Each grid equals TransformerLens 4.3's own function (``transformer_lens.patching``)
on bridges it supports (a GPT-2 bridge, and a Llama bridge with grouped-query
attention, where k/v cells are key/value heads), and a per-cell
``run_with_hooks`` loop on our attention-only model; ablations equal a loop.
"""

import pytest
import torch
from transformer_lens import patching as tlp

from interp import InterpError
from interp.analysis import ablate_layers, ablate_mlps, patch_components
from interp.core.hooks import hook_name
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.models import load_model
from interp.models.hf import random_gpt2, random_llama

TL = {
    ("resid_pre", "layer_position"): (tlp.get_act_patch_resid_pre, ("layer", "position")),
    ("resid_mid", "layer_position"): (tlp.get_act_patch_resid_mid, ("layer", "position")),
    ("attn_out", "layer_position"): (tlp.get_act_patch_attn_out, ("layer", "position")),
    ("mlp_out", "layer_position"): (tlp.get_act_patch_mlp_out, ("layer", "position")),
    ("z", "head"): (tlp.get_act_patch_attn_head_out_all_pos, ("layer", "head")),
    ("q", "head"): (tlp.get_act_patch_attn_head_q_all_pos, ("layer", "head")),
    ("k", "head"): (tlp.get_act_patch_attn_head_k_all_pos, ("layer", "head")),
    ("v", "head"): (tlp.get_act_patch_attn_head_v_all_pos, ("layer", "head")),
    ("pattern", "head"): (tlp.get_act_patch_attn_head_pattern_all_pos, ("layer", "head")),
    ("z", "head_position"): (tlp.get_act_patch_attn_head_out_by_pos, ("layer", "position", "head")),
    ("q", "head_position"): (tlp.get_act_patch_attn_head_q_by_pos, ("layer", "position", "head")),
    ("k", "head_position"): (tlp.get_act_patch_attn_head_k_by_pos, ("layer", "position", "head")),
    ("v", "head_position"): (tlp.get_act_patch_attn_head_v_by_pos, ("layer", "position", "head")),
    ("pattern", "head_position"): (
        tlp.get_act_patch_attn_head_pattern_by_pos,
        ("layer", "head", "position"),
    ),
}


def _pair(vocab=30, n=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(2, vocab, (3, n), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 2] = (corrupted[:, 2] + 1 + torch.arange(3)) % (vocab - 2) + 2
    return clean, corrupted


@pytest.fixture(scope="module", params=["gpt2", "llama-gqa"])
def bridge(request):
    return random_gpt2(2, vocab=30) if request.param == "gpt2" else random_llama(2, vocab=30)


@pytest.mark.parametrize("component, by", sorted(TL))
def test_every_grid_equals_transformer_lens(bridge, component, by):
    clean, corrupted = _pair()
    metric = logit_diff_metric(5, 6)
    fn, axes = TL[(component, by)]
    _, cache = bridge.run_with_cache(clean)
    want = fn(bridge, corrupted, cache, lambda logits: metric(logits, corrupted))
    df = patch_components(
        bridge,
        clean,
        corrupted_tokens=corrupted,
        component=component,
        by=by,
        metric=metric,
        direction="denoising",
    )
    got = torch.zeros_like(want)
    index = tuple(torch.tensor(df[a].to_numpy()) for a in axes)
    got[index] = torch.tensor(df["patched"].to_numpy(), dtype=got.dtype)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(df) == want.numel()  # one row per cell, no cell twice


def test_key_value_cells_are_the_key_value_heads():
    model = random_llama(2, vocab=30, n_heads=4, n_kv_heads=2)
    clean, corrupted = _pair()
    for component in ("k", "v"):
        df = patch_components(
            model, clean, corrupted_tokens=corrupted, component=component, by="head",
            metric=logit_diff_metric(5, 6),
        )  # fmt: skip
        assert df["label"].tolist() == ["L0KV0", "L0KV1", "L1KV0", "L1KV1"]
        assert df.attrs["heads"] == "key/value heads (2 per layer)"
    q = patch_components(
        model, clean, corrupted_tokens=corrupted, component="q", by="head",
        metric=logit_diff_metric(5, 6),
    )  # fmt: skip
    assert len(q) == 8 and q["label"].iloc[5] == "L1H1"


def _loop(model, clean, corrupted, metric, component, layer, head, positions, pos_dim, head_dim):
    """One run_with_hooks per cell: the clean activation's slice spliced into the corrupted run."""
    name = hook_name(component, layer)
    _, cache = model.run_with_cache(clean, names_filter=[name])

    def hook(x, hook):
        x = x.clone()
        sel = [slice(None)] * x.ndim
        if head is not None:
            sel[head_dim] = head
        if positions is not None:
            sel[pos_dim] = torch.tensor(positions)
        x[tuple(sel)] = cache[name][tuple(sel)]
        return x

    return float(metric(model.run_with_hooks(corrupted, fwd_hooks=[(name, hook)]), corrupted))


def test_every_cell_equals_a_hooks_loop_on_our_model():
    model = load_model("induction-2l")
    clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7], [0, 9, 3, 4, 11, 9, 3, 4]])
    corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7], [0, 9, 3, 4, 12, 9, 3, 4]])
    metric = logit_diff_metric(torch.tensor([8, 11]), torch.tensor([9, 12]))
    for component, by in [
        ("resid_pre", "layer_position"),
        ("attn_out", "layer"),
        ("z", "head_position"),
        ("k", "head"),
        ("pattern", "head_position"),
    ]:
        df = patch_components(
            model, clean, corrupted_tokens=corrupted, component=component, by=by, metric=metric,
            direction="denoising", positions=[3, 4, 7],
        )  # fmt: skip
        pattern = component == "pattern"
        for r in df.itertuples():
            head = getattr(r, "head", None)
            pos = [r.position] if "position" in df.columns else [3, 4, 7]
            want = _loop(
                model, clean, corrupted, metric, component, r.layer, head, pos,
                2 if pattern else 1, 1 if pattern else 2,
            )  # fmt: skip
            assert r.patched == pytest.approx(want, abs=1e-5), (component, r)
    assert df.attrs["engine"] in ("resume-blocks", "resume-after-block")


def test_mlp_and_layer_ablation_equal_a_loop(bridge):
    clean, _ = _pair()
    metric = loss_metric()
    mlps = ablate_mlps(bridge, clean, metric=metric)
    groups = ablate_mlps(bridge, clean, metric=metric, neuron_groups=4, ablation="mean")
    layers = ablate_layers(bridge, clean, metric=metric, ablation="resample", seed=3)
    d_mlp = bridge.cfg.d_mlp
    assert groups["label"].iloc[1] == f"L0.mlp[{d_mlp // 4}:{d_mlp // 2}]"
    assert layers["label"].tolist() == ["L0.attn", "L0.mlp", "L1.attn", "L1.mlp"]
    _, cache = bridge.run_with_cache(clean)
    with torch.no_grad():
        base = float(metric(bridge(clean), clean))

    def run(name, edit):
        with torch.no_grad():
            return float(metric(bridge.run_with_hooks(clean, fwd_hooks=[(name, edit)]), clean))

    for r in mlps.itertuples():
        want = run(hook_name("mlp_out", r.layer), lambda x, hook: torch.zeros_like(x))
        assert r.effect == pytest.approx(want - base, abs=1e-5)
    for r in groups.itertuples():
        a, b = (int(v) for v in r.neurons.split("-"))
        name = f"blocks.{r.layer}.mlp.hook_post"

        def mean_group(x, hook, a=a, b=b, name=name):
            x = x.clone()
            x[..., a : b + 1] = cache[name][..., a : b + 1].mean(0, keepdim=True)
            return x

        assert r.effect == pytest.approx(run(name, mean_group) - base, abs=1e-5)
    from interp.engine.ablations import resample_index

    idx = resample_index(3, None, 3)
    for r in layers.itertuples():
        kind = "z" if r.part == "attn" else "mlp_out"
        name = hook_name(kind, r.layer)
        want = run(name, lambda x, hook, name=name: cache[name][idx].clone())
        assert r.effect == pytest.approx(want - base, abs=1e-5), r.label


def test_bad_input_is_named():
    model = load_model("induction-2l")
    clean, corrupted = torch.tensor([[0, 5, 6, 7]]), torch.tensor([[0, 5, 6, 8]])
    metric = logit_diff_metric(5, 6)

    def call(**kw):
        opts = dict(corrupted_tokens=corrupted, component="z", by="head", metric=metric)
        return patch_components(model, clean, **{**opts, **kw})

    with pytest.raises(InterpError, match="unknown component 'mlp'"):
        call(component="mlp")
    with pytest.raises(InterpError, match="unknown by 'position'"):
        call(by="position")
    with pytest.raises(InterpError, match="resid_pre is one vector per layer"):
        call(component="resid_pre", by="head")
    with pytest.raises(InterpError, match="z is per head"):
        call(by="layer")
    with pytest.raises(InterpError, match="no blocks.0.hook_mlp_out .*attention-only"):
        call(component="mlp_out", by="layer")
    with pytest.raises(InterpError, match="same shape"):
        call(corrupted_tokens=corrupted[:, :3])
    with pytest.raises(InterpError, match="positions \\[4\\] out of range"):
        call(positions=[4])
    with pytest.raises(InterpError, match="has no MLPs"):
        ablate_mlps(model, clean)
    with pytest.raises(InterpError, match="neuron_groups=10000 is more than"):
        ablate_mlps(random_gpt2(2, vocab=30), torch.tensor([[0, 3, 4]]), neuron_groups=10000)
    with pytest.raises(InterpError, match="parts must be a subset"):
        ablate_layers(model, clean, parts=["ffn"])

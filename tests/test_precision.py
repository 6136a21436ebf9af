"""Lower precision that stays right, and models split over devices.

Every exactness claim states its tolerance through one rule
(:mod:`interp.core.precision`): a float32 claim keeps its own; in bfloat16 it is
``ULPS * eps`` (16 * 2**-7 = 0.125) of the magnitude the claim names. Each test
below holds one claim on a random grouped-query Llama (2 layers, 4 query and 2
key/value heads) in bfloat16, the twin of a float32 one with the same weights.
Measured gaps are 0 to 1.5 eps on these models and 2.9 eps at most (the edge
probe on the 16-layer Llama-3.2-1B shape; ``benchmarks/precision.py``).
"""

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import jitter

from interp import InterpError
from interp.analysis import (
    ablate_heads,
    attribute_edges,
    direct_logit_attribution,
    evaluate_circuit,
    qk_attribution,
)
from interp.core.errors import CheckpointError
from interp.core.hooks import hook_name
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.core.precision import ULPS, rtol, tolerance
from interp.models import load_model
from interp.models.hf import bridge_from_hf

B16 = torch.bfloat16
EPS = torch.finfo(B16).eps
METRIC = logit_diff_metric(torch.tensor([5, 7, 9]), torch.tensor([6, 8, 10]))
ARCH = "meta-llama/Llama-3.2-1B"


def _hf_llama(layers=2, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=30, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=1, pad_token_id=1, interp_tokenizer="word",
    )  # fmt: skip
    return jitter(LlamaForCausalLM(cfg))


@pytest.fixture(scope="module")
def pair():
    """The same jittered Llama bridge in float32 and in bfloat16."""
    hf = _hf_llama()
    half = copy.deepcopy(hf).to(B16)
    return bridge_from_hf(hf, architecture_name=ARCH), bridge_from_hf(half, architecture_name=ARCH)


def _tokens(seed=0, n=8):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(2, 30, (3, n), generator=gen), torch.randint(2, 30, (3, n), generator=gen)


def _spearman(a: pd.Series, b: pd.Series) -> float:
    return float(a.rank().corr(b.reindex(a.index).rank()))


def test_the_rule_is_the_float32_claim_or_ulps_of_the_precision():
    assert ULPS == 16
    assert rtol(torch.float32, float32=1e-5) == 1e-5
    assert rtol(B16, float32=1e-5) == 16 * 2**-7
    assert rtol(torch.float16, float32=1e-5) == 16 * 2**-10
    assert tolerance(B16, 0.5, float32=1e-5) == 16 * 2**-7  # magnitudes below 1 count as 1


def test_a_folder_loads_in_bfloat16_and_float16_converted_piece_by_piece(tmp_path, pair):
    """A float32 folder read in bfloat16: every weight is the float32 weight rounded (the
    reader converts through one buffer, no float32 copy of the model); float16 loads and runs
    on this CPU too."""
    from safetensors.torch import load_file

    from interp.models.weights import read_weights, stored_dtypes

    hf = _hf_llama()
    hf.save_pretrained(tmp_path)
    assert stored_dtypes(tmp_path) == {torch.float32}
    stored = load_file(tmp_path / "model.safetensors")
    got = read_weights(tmp_path, B16)
    assert set(got) == set(stored)
    for name, w in stored.items():
        assert got[name].dtype == B16 and torch.equal(got[name], w.to(B16)), name
    f32 = pair[0]  # the same weights, bridged in float32
    for dtype in ("bfloat16", "float16"):
        model = load_model(tmp_path, dtype=dtype)
        assert model.W_Q.dtype == getattr(torch, dtype)
        assert torch.equal(model.W_Q, f32.W_Q.to(getattr(torch, dtype)))
        with torch.no_grad():
            logits = model(_tokens()[0])
        assert logits.dtype == getattr(torch, dtype) and bool(torch.isfinite(logits).all())
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])  # a copy cut short
    with pytest.raises(CheckpointError, match="damaged or incomplete: restore them"):
        load_model(tmp_path, dtype="bfloat16")


def test_dla_rows_add_up_to_the_logit_difference_in_bfloat16(pair):
    """Rows sum to the model's own (bfloat16) logit difference within 16 eps of the logits
    read; no remainder row: the gap is the model's rounding."""
    f32, b16 = pair
    clean, _ = _tokens()
    df = direct_logit_attribution(b16, clean, answer=5, wrong=9)
    assert "remainder" not in df["label"].tolist()
    gap = abs(df["value"].sum() - df.attrs["total"])
    assert gap <= df.attrs["remainder_tol"] <= tolerance(B16, 10.0, float32=1e-5)
    ref = direct_logit_attribution(f32, clean, answer=5, wrong=9).set_index("label")["value"]
    assert _spearman(ref, df.set_index("label")["value"]) > 0.95


def test_qk_rows_add_up_to_the_score_in_bfloat16(pair):
    """Rows reproduce the model's bfloat16 scores to 16 eps of the largest score."""
    _, b16 = pair
    clean, _ = _tokens()
    df = qk_attribution(b16, clean, layer=1, head=2)
    assert df.attrs["check_rtol"] == rtol(B16, float32=1e-4)
    assert df.attrs["score_gap"] <= df.attrs["check_rtol"]
    assert not df.attrs["remainder"]
    assert df["value"].sum() == pytest.approx(df.attrs["total"], abs=1e-4)


def test_the_whole_circuit_is_the_model_in_bfloat16(pair):
    """Every edge kept edits nothing: the clean metric exactly; no edge kept is the corrupted
    run within 16 eps of the logits (each receiver's input summed in float32, rounded once)."""
    _, b16 = pair
    clean, corrupted = _tokens()
    whole = evaluate_circuit(b16, clean, corrupted_tokens=corrupted, edges=None, metric=METRIC)
    assert whole["metric"].item() == pytest.approx(whole["clean"].item(), abs=1e-6)
    assert whole["faithfulness"].item() == pytest.approx(1.0, abs=1e-6)
    empty = evaluate_circuit(b16, clean, corrupted_tokens=corrupted, edges=[], metric=METRIC)
    with torch.no_grad():
        size = float(b16(corrupted).float().abs().max())
    gap = abs(empty["metric"].item() - empty["corrupted"].item())
    assert gap <= tolerance(B16, size, float32=1e-4)


def test_eap_gradients_in_bfloat16_are_autograds_through_split_inputs(pair):
    """EAP in bfloat16 is (corrupted - clean) . dM/d(input) by plain autograd through
    TransformerLens's split-qkv hooks in bfloat16, to 16 eps of the sum of |terms| (measured:
    about 0.03 eps; the engine carries the gradients in float32)."""
    _, b16 = pair
    clean, corrupted = _tokens(6, 7)
    eap = attribute_edges(b16, clean, corrupted_tokens=corrupted, metric=METRIC)
    table = eap.set_index("label")["estimate"]
    split = bridge_from_hf(copy.deepcopy(_hf_llama()).to(B16), architecture_name=ARCH)
    split.set_use_split_qkv_input(True)
    for p in split.parameters():
        p.requires_grad_(False)
    kept = {}

    def keep(x, hook):
        kept[hook.name] = x = x.detach().requires_grad_(True)
        return x

    names = [f"blocks.1.hook_{k}_input" for k in ("q", "k", "v")]
    logits = split.run_with_hooks(clean, fwd_hooks=[(n, keep) for n in names])
    grads = dict(zip(kept, torch.autograd.grad(METRIC(logits, clean), list(kept.values()))))
    with torch.no_grad():
        _, cc = split.run_with_cache(clean)
        _, kc = split.run_with_cache(corrupted)

    def out(cache):  # L0H1's output, in float32
        return cache[hook_name("z", 0)][:, :, 1].float() @ split.W_O[0, 1].float()

    delta = out(kc) - out(cc)
    for kind, idx, label in (("q", 2, "L0H1 -> L1H2.q"), ("k", 1, "L0H1 -> L1KV1.k"),
                             ("v", 0, "L0H1 -> L1KV0.v")):  # fmt: skip
        g = grads[[n for n in grads if f"hook_{kind}_input" in n][0]][:, :, idx].float()
        terms = delta * g
        assert abs(table[label] - float(terms.sum())) <= rtol(B16, float32=1e-4) * float(
            terms.abs().sum()
        ), label


def test_sweeps_keep_their_exact_path_in_bfloat16(pair):
    """The resumed sweep is trusted in bfloat16 (its probe holds to 16 eps of the logits), and
    each head's effect is one run_with_hooks's, within that tolerance of the metric's logits."""
    from interp.analysis import zero_head_hooks

    _, b16 = pair
    clean, _ = _tokens()
    df = ablate_heads(b16, clean, metric=METRIC)
    assert df.attrs["engine"] == "resume-blocks"
    with torch.no_grad():
        base = b16(clean)
        for row in df.itertuples():
            edited = b16.run_with_hooks(clean, fwd_hooks=zero_head_hooks(b16, heads=[row.label]))
            want = float(METRIC(edited, clean) - METRIC(base, clean))
            size = float(edited.float().abs().max())
            assert abs(row.effect - want) <= tolerance(B16, size, float32=1e-5), row.label


def test_bfloat16_ranks_edges_and_heads_like_float32(pair):
    """The cheap version of benchmarks/precision.py: Spearman correlation, over every edge, of
    EAP scores in bfloat16 and float32, and over every head of zero-ablation effects."""
    from interp.datasets import repeated_tokens

    f32, b16 = pair
    clean, corrupted = _tokens(1, 10)
    rho = {}
    for what, fn, col in (
        ("eap", lambda m: attribute_edges(m, clean, corrupted_tokens=corrupted, metric=METRIC),
         "estimate"),
        ("ablate", lambda m: ablate_heads(m, clean, metric=METRIC), "effect"),
    ):  # fmt: skip
        rho[what] = _spearman(*(fn(m).set_index("label")[col] for m in (f32, b16)))
    data = repeated_tokens(8, d_vocab=64, seq_len=32, segment_lengths=(8, 12), seed=1)
    ind = [load_model("induction-2l", dtype=d) for d in ("float32", "bfloat16")]
    corrupt = data.tokens.clone()
    corrupt[:, 1:12] = torch.randint(1, 64, (8, 11), generator=torch.Generator().manual_seed(3))
    loss = loss_metric(data.loss_mask)
    eaps = [
        attribute_edges(m, data.tokens, corrupted_tokens=corrupt, metric=loss)
        .set_index("label")["estimate"]
        for m in ind
    ]  # fmt: skip
    rho["induction eap"] = _spearman(*eaps)
    assert min(rho.values()) >= 0.95, rho


def test_offload_is_refused_before_or_as_the_weights_load():
    """Weights offloaded to disk (or to the CPU beside a GPU) are not in memory outside the
    forward pass, where interp reads them: refused with the fix."""
    from accelerate import cpu_offload

    from interp.models.placement import check_device_map

    check_device_map({"model.layers.0": "cpu", "lm_head": "cpu"})  # devices only: fine
    with pytest.raises(InterpError, match="offloads model.layers.1 to 'disk'.*map every module"):
        check_device_map({"model.layers.0": "cpu", "model.layers.1": "disk"})
    with pytest.raises(InterpError, match="offloads lm_head to 'cpu'"):
        check_device_map({"model.layers.0": "cuda:0", "lm_head": "cpu"})
    hf = _hf_llama()
    cpu_offload(hf, execution_device="cpu")  # every weight on the meta device between passes
    with pytest.raises(InterpError, match="weights of this model were offloaded"):
        bridge_from_hf(hf, architecture_name=ARCH)


def test_a_model_split_over_devices_gives_the_numbers_of_the_whole(tmp_path, pair):
    """A device_map naming every module's device, and accelerate's dispatch with its hooks
    on every module (the hooks that move activations between devices, forced here where
    every device is the CPU), give the unsplit model's DLA, QK attribution, head ablation, EAP
    and circuit evaluation to 1e-6."""
    from accelerate import dispatch_model

    hf = _hf_llama()
    hf.save_pretrained(tmp_path)
    names = ["model.embed_tokens", *(f"model.layers.{l}" for l in range(2))]
    device_map = {n: "cpu" for n in [*names, "model.norm", "model.rotary_emb", "lm_head"]}
    whole = pair[0]  # the same weights, unsplit
    split = load_model(tmp_path, device_map=device_map)
    dispatched = copy.deepcopy(hf)
    dispatch_model(dispatched, device_map=device_map, force_hooks=True)
    assert any(hasattr(m, "_hf_hook") for m in dispatched.modules())
    hooked = bridge_from_hf(dispatched, architecture_name=ARCH)
    clean, corrupted = _tokens(2)
    circuit = ["L0H1 -> L1H1.q", "L0.mlp -> logits", "embed -> L1KV0.v"]
    analyses = {
        "dla": (lambda m: direct_logit_attribution(m, clean, answer=5, wrong=9), "value"),
        "qk": (lambda m: qk_attribution(m, clean, layer=1, head=1), "value"),
        "ablate": (lambda m: ablate_heads(m, clean, metric=METRIC), "effect"),
        "eap": (
            lambda m: attribute_edges(m, clean, corrupted_tokens=corrupted, metric=METRIC),
            "estimate",
        ),
        "circuit": (
            lambda m: evaluate_circuit(
                m, clean, corrupted_tokens=corrupted, edges=circuit, metric=METRIC
            ),
            "faithfulness",
        ),
    }
    for name, (fn, col) in analyses.items():
        want = fn(whole)[col].to_numpy()
        for other in (split, hooked):
            got = fn(other)[col].to_numpy()
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6, err_msg=name)

"""Memory budgets, estimates and placement refuse what cannot run, and only that (issue 32).

Each test is one cause of a wrong refusal, a silently wrong number or a misleading message
that ``memory_budget=``, ``estimate=``, ``progress=`` and ``device_map`` had; each names the
problem and the fix in one InterpError, before any forward pass where the input alone shows
it. Every analysis that runs its prompts in chunks (``CHUNKED`` in tests/test_signatures.py)
is called here by :data:`CALLS`, so a new one must be added to every rule at once.
"""

from __future__ import annotations

import re
import time
from functools import partial

import numpy as np
import pytest
import torch
from flop_meter import FlopMeter
from test_bad_inputs import _NoPasses, refused
from test_signatures import CHUNKED

import interp.analysis as A
import interp.core.memory as M
from interp import InterpError
from interp.core.errors import CheckpointError
from interp.core.metrics import logit_diff_metric
from interp.engine.chunks import Estimate
from interp.models import load_model
from interp.models.hf import random_gpt2

ROW = [0, 5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 8, 9]  # repeats: every stripe has rows
SMALL = torch.tensor([ROW, [0, *ROW[1:][::-1]], ROW[::-1], [0, 9, 3, 4, 11] * 3 + [3]])
DIFF = logit_diff_metric(5, 6)  # one answer for every prompt, however many
EDGES = ["L0H1 -> L1H1.q", "L1H1 -> logits", "embed -> L1H0.q"]


@pytest.fixture(scope="module")
def model():
    return load_model("induction-2l")


@pytest.fixture(scope="module")
def gpt2():  # ablate_mlps needs MLPs
    return random_gpt2(2, vocab=30)


@pytest.fixture(scope="module")
def scores(model):
    return A.attribute_edges(model, SMALL, corrupted_tokens=other(SMALL), metric=DIFF)


def other(tokens):
    """Corrupted tokens: every prompt's fifth token changed."""
    out = tokens.clone()
    out[:, 4] = (out[:, 4] + 1) % 12 + 2
    return out


def calls(model, gpt2, scores, tokens):
    """Every chunked analysis on ``tokens``, as ``fn(**options)``."""
    bad = other(tokens)
    pair = dict(corrupted_tokens=bad, metric=DIFF)
    return {
        "ablate_heads": lambda **k: A.ablate_heads(model, tokens, **k),
        "ablate_head_groups": lambda **k: A.ablate_head_groups(
            model, tokens, groups={"a": ["L0H0", "L1H1"], "b": ["L1H0"]}, ablation="mean", **k
        ),
        "ablate_mlps": lambda **k: A.ablate_mlps(gpt2, tokens, ablation="resample", **k),
        "ablate_layers": lambda **k: A.ablate_layers(model, tokens, **k),
        "patch_heads": lambda **k: A.patch_heads(model, tokens, **pair, **k),
        "patch_components": lambda **k: A.patch_components(
            model, tokens, **pair, component="v", by="head", **k
        ),
        "attribute_heads": lambda **k: A.attribute_heads(model, tokens, ablation="mean", **k),
        "path_patch": lambda **k: A.path_patch(model, tokens, **pair, **k),
        "attribute_edges": lambda **k: A.attribute_edges(model, tokens, **pair, **k),
        "evaluate_circuit": lambda **k: A.evaluate_circuit(model, tokens, **pair, edges=EDGES, **k),
        "circuit_curve": lambda **k: A.circuit_curve(
            model, tokens, **pair, scores=scores, points=3, **k
        ),
        "find_circuit": lambda **k: A.find_circuit(model, tokens, **pair, scores=scores, **k),
        "direct_logit_attribution": lambda **k: A.direct_logit_attribution(
            model, tokens, answer=5, wrong=6, **k
        ),
        "logit_lens": lambda **k: A.logit_lens(model, tokens, at=[5, -1], **k),
        "head_scores": lambda **k: A.head_scores(model, tokens, **k),
        "head_atlas": lambda **k: A.head_atlas(model, tokens, **k),
        "qk_attribution": lambda **k: A.qk_attribution(model, tokens, layer=1, head=1, **k),
        "induction_scores": lambda **k: A.induction_scores(model, tokens, **k),
        "previous_token_scores": lambda **k: A.previous_token_scores(model, tokens, **k),
        "duplicate_token_scores": lambda **k: A.duplicate_token_scores(model, tokens, **k),
        "generate": lambda **k: A.generate(
            model, tokens, max_new_tokens=2, interventions=[A.HeadAblation(["L1H1"])], **k
        ),
        "compare_generations": lambda **k: A.compare_generations(
            model, tokens, max_new_tokens=2, interventions=[A.HeadAblation(["L1H1"])], **k
        ),
    }


def test_calls_cover_every_chunked_analysis(model, gpt2, scores):
    assert set(calls(model, gpt2, scores, SMALL)) == CHUNKED


def many(n):
    """``n`` prompts of 16 tokens: one row expanded (no memory of its own)."""
    return torch.tensor([ROW]).expand(n, len(ROW))


# 6. a whole-batch memory check ran before chunking --------------------------------------
def test_6_a_whole_batch_memory_check_does_not_refuse_what_chunks_can_run(
    model, gpt2, scores, monkeypatch
):
    # the call: 400,000 prompts need about 47 GiB as one batch, 1 GiB in chunks
    est = A.ablate_heads(model, many(400_000), memory_budget=2**30, estimate=True)
    assert est.prompts == 400_000 and est.chunks > 1 and est.peak_bytes <= 2**30
    # on a machine with 1 GiB free, every chunked analysis plans 20,000 prompts (2.4 GiB as
    # one batch) into chunks, before any pass
    monkeypatch.setattr(M, "available_memory", lambda device=None: 2**30)
    n = 20_000
    assert M.forward_bytes(model, n, len(ROW)) > 2**30
    for name, fn in calls(model, gpt2, scores, many(n)).items():
        with _NoPasses(gpt2 if name == "ablate_mlps" else model) as seen:
            est = fn(estimate=True)
        assert seen.calls == 0, f"{name}: {seen.calls} forward passes ran for its estimate"
        assert isinstance(est, Estimate) and est.prompts == n and est.chunks > 1, name
        assert est.peak_bytes <= 2**30 // M.BUDGET_FRACTION, name
    # what one batch runs is still refused when that batch cannot fit
    for fn in (
        lambda: A.attention_patterns(model, many(n)),
        lambda: A.per_token_loss(model, many(n)),
        lambda: A.null_space_probe(model, many(n), layer=1, head=1),
    ):
        refused(fn, r"20000 x 16 tokens needs about 2.3\d GiB for its forward pass, but only "
                r"1.00 GiB is available", model)  # fmt: skip
    # the token ids themselves are the one limit on the number of prompts
    refused(
        lambda: A.ablate_heads(model, many(10**8), estimate=True),
        r"tokens of shape 100,000,000 x 16 need about 11.92 GiB as int64 ids alone, but only "
        r"1.00 GiB is available; pass fewer prompts at a time",
        model,
    )


def test_6_a_batch_larger_than_the_free_memory_runs_in_chunks(model, monkeypatch):
    """A real run: 64 prompts whose one batch is refused on a machine with 4 MiB free run in
    chunks there, and give the numbers of one batch (1e-6 of the metric)."""
    tokens = torch.cat([SMALL] * 16)  # 64 prompts
    whole = A.ablate_heads(model, tokens, ablation="mean")
    lens = A.logit_lens(model, tokens, at=[5, -1])
    monkeypatch.setattr(M, "available_memory", lambda device=None: 4 * 2**20)
    assert M.forward_bytes(model, 64, tokens.shape[1]) > 4 * 2**20
    split = A.ablate_heads(model, tokens, ablation="mean")
    assert split.attrs["chunks"] > 1 and whole.attrs["chunks"] == 1
    assert np.abs(split["effect"] - whole["effect"]).max() <= 1e-6 * max(
        1.0, whole["clean"].abs().max()
    )
    split_lens = A.logit_lens(model, tokens, at=[5, -1])
    assert split_lens.attrs["chunks"] > 1
    assert np.abs(split_lens["target_logp"] - lens["target_logp"]).max() <= 1e-5


# budget refusals printed the same rounded number on both sides ----------------------------
SIZE = re.compile(r"[\d,]+(?:\.\d+)? (?:GiB|MiB|KiB|bytes?)\b")


def _two_sizes(fn):
    with pytest.raises(InterpError) as err:
        fn()
    found = SIZE.findall(str(err.value))
    assert len(found) == 2, str(err.value)
    return found


def test_budget_refusals_show_two_sizes_that_differ(model, monkeypatch):
    one = A.ablate_heads(model, SMALL, estimate=True).footprint.peak(1)
    for budget in (1, 1000, one // 2, one - 1):
        need, have = _two_sizes(lambda b=budget: A.ablate_heads(model, SMALL, memory_budget=b))
        assert need != have, (budget, need, have)
    assert _two_sizes(lambda: A.ablate_heads(model, SMALL, memory_budget=1))[1] == "1 byte"
    # one batch that misses the free memory by a byte, and a table that misses its budget
    need = M.forward_bytes(model, *SMALL.shape)
    monkeypatch.setattr(M, "available_memory", lambda device=None: need - 1)
    a, b = _two_sizes(lambda: A.attention_patterns(model, SMALL))
    assert a != b, (a, b)
    monkeypatch.setattr(M, "available_memory", lambda device=None: 4 * 2**20)
    a, b = _two_sizes(
        lambda: A.attribute_edges(
            model,
            SMALL,
            corrupted_tokens=other(SMALL),
            metric=DIFF,
            positions="each",
            memory_budget=100 * 300 - 1,
        )  # fmt: skip
    )
    assert a != b, (a, b)
    for x, y in [(2**30 + 1, 2**30), (2**20 + 100, 2**20), (5 * 2**30, 2**20), (1025, 1024)]:
        sx, sy = M.sizes(x, y)
        assert sx != sy, (x, y, sx, sy)
    assert M.sizes(2**20 + 2**12, 2**20) == ("1.004 MiB", "1.000 MiB")
    assert str(A.ablate_heads(model, SMALL, estimate=True)).count("KiB") == 1  # peak, not 0 MiB


# estimate="yes" and progress="no" were read as True ----------------------------------------
def test_estimate_and_progress_must_be_booleans(model, gpt2, scores, capsys):
    for name, fn in calls(model, gpt2, scores, SMALL).items():
        m = gpt2 if name == "ablate_mlps" else model
        for option, value in (("estimate", "yes"), ("estimate", 1), ("progress", "no"),
                              ("progress", None)):  # fmt: skip
            got = re.escape(repr(value))
            refused(partial(fn, **{option: value}), f"{option} must be True or False, got {got}", m)
        assert isinstance(fn(estimate=np.True_, progress=np.False_), Estimate), name
        assert isinstance(fn(estimate=torch.tensor(True)), Estimate), name
    assert capsys.readouterr().err == ""  # no bar was drawn


# ablate_heads estimated 4.0 forward-equivalents where the run recorded 2.0 ------------------
def test_an_estimate_counts_the_passes_the_run_records(model, gpt2, scores):
    """The estimate's forward-equivalents are the run's ``attrs["forward_equivalents"]``
    (both rounded to 1e-3), by the same rule: the sweep's path (attention-only models resume
    after the edited block), the values' pass (its share of the blocks, on the reference
    batch), the cache's own; at most that where the run's own results decide."""
    at_most = {"find_circuit"}  # the candidates its search tries
    for name, fn in calls(model, gpt2, scores, SMALL).items():
        if name == "head_atlas":  # its run (seconds) is compared in tests/test_chunks.py
            continue
        est, out = fn(estimate=True), fn()
        ran = (out.info if name == "find_circuit" else out.attrs)["forward_equivalents"]
        if name in at_most:
            assert ran <= est.forward_equivalents, (name, ran, est.forward_equivalents)
        else:
            assert est.forward_equivalents == pytest.approx(ran, abs=1e-3), name
    # the count is the FLOPs torch counts over one plain forward's (issue 44; it was 2.0,
    # 1 + 2 x 1/2 + 2 x 0 blocks, with no unembedding counted)
    with torch.no_grad(), FlopMeter() as plain:
        model(SMALL)
    with FlopMeter() as meter:
        zero = A.ablate_heads(model, SMALL)
    measured = meter.total / plain.total
    assert A.ablate_heads(model, SMALL, estimate=True).forward_equivalents == pytest.approx(
        zero.attrs["forward_equivalents"], abs=1e-3
    )
    assert zero.attrs["forward_equivalents"] == pytest.approx(measured, rel=0.02)
    ref = other(SMALL)[:3]
    _, cache = model.run_with_cache(SMALL)
    variants = {  # the values' and the cache's passes, in one chunk and in several
        "mean on a reference": lambda **k: A.ablate_heads(
            model, SMALL, ablation="mean", reference_tokens=ref, heads=["L0H1"], **k
        ),
        "resample on a reference": lambda **k: A.ablate_heads(
            model, SMALL, ablation="resample", reference_tokens=ref, **k
        ),
        "mean from a cache": lambda **k: A.ablate_heads(
            model, SMALL, ablation="mean", cache=cache, **k
        ),
        "denoising from a cache": lambda **k: A.patch_heads(
            model,
            SMALL,
            corrupted_tokens=other(SMALL),
            metric=DIFF,
            direction="denoising",
            cache=cache,
            **k,
        ),  # fmt: skip
        "attribution on a reference": lambda **k: A.attribute_heads(
            model, SMALL, ablation="resample", reference_tokens=ref, **k
        ),
        "ablated MLPs": lambda **k: A.ablate_mlps(gpt2, SMALL, ablation="mean", **k),
    }
    for name, fn in variants.items():
        one = fn(estimate=True)
        for budget in (None, one.budget_for(1)):
            est, out = fn(estimate=True, memory_budget=budget), fn(memory_budget=budget)
            assert out.attrs["chunks"] == est.chunks, name
            ran = out.attrs["forward_equivalents"]
            assert est.forward_equivalents == pytest.approx(ran, abs=1e-3), (name, budget)
    verified = A.attribute_heads(model, SMALL, verify=2)  # its heads known only after
    bound = A.attribute_heads(model, SMALL, verify=2, estimate=True).forward_equivalents
    assert A.attribute_heads(model, SMALL, estimate=True).forward_equivalents < bound
    assert verified.attrs["forward_equivalents"] <= bound


# device_map="cuda" on a CPU, "xpu" and {} were reported as a damaged folder ---------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=30, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=1, pad_token_id=1, interp_tokenizer="word",
    )  # fmt: skip
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def _device_refused(folder, device_map, match):
    start = time.perf_counter()
    with pytest.raises(InterpError, match=match) as err:
        load_model(folder, device_map=device_map)
    assert not isinstance(err.value, CheckpointError), str(err.value)
    assert "damaged" not in str(err.value)
    assert time.perf_counter() - start < 30  # refused before the weights load


def test_device_map_errors_name_the_device_not_a_damaged_folder(folder):
    if not torch.cuda.is_available():
        _device_refused(folder, "cuda", r"device_map 'cuda': CUDA is not available on this "
                        r"machine .*; use device='cpu'")  # fmt: skip
        _device_refused(folder, {"model": 0, "lm_head": 0}, r"device_map\['model'\] 'cuda:0': "
                        "CUDA is not available")  # fmt: skip
    _device_refused(folder, "xpu", r"device_map 'xpu' is not supported here; use 'cpu'")
    _device_refused(folder, {"model": "npu", "lm_head": "cpu"}, r"unknown device_map\['model'\]")
    _device_refused(folder, {}, r"device_map is empty: it places no module")
    with pytest.raises(InterpError, match=r"unknown device 'tpu'"):  # device=, as before
        load_model(folder, device="tpu")
    assert load_model(folder, device_map={"": "cpu"}).cfg.n_layers == 2  # a real map loads

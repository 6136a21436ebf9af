"""Analyses on models of realistic size: seconds, forward-equivalents and peak memory.

For each model shape (random weights, real shapes: Llama-3.2-1B, Qwen2.5-1.5B,
Gemma-2-2B; Llama-3.1-8B for ``--plan`` and a GPU), a Hugging Face folder is
built locally once (a temporary folder, deleted at the end, or ``--keep DIR``),
then every measurement runs in a fresh process of its own, so its peak
memory is its own:

* ``load``: ``load_model(folder)`` wall seconds, peak resident memory during
  the load over what was resident before it, the weights' bytes, and the
  largest logit gap of the bridge against the Hugging Face model on the
  loader's 8 probe tokens (the check :func:`interp.models.hf.bridge_from_hf`
  runs at every load);
* ``forward``: one plain ``model(tokens)`` under no_grad, the reference row;
* ``dla``, ``lens``, ``heads`` (``attribute_heads``, patching), ``eap`` and
  ``eap-ig`` (``attribute_edges``, EAP-IG with 5 steps), ``evaluate``
  (``evaluate_circuit`` of the top 2,000 EAP edges, or 2,000 seeded random
  edges without an EAP run), ``patch`` (``patch_components`` of ``resid_pre`` by
  layer), ``path`` (``path_patch`` of the middle layer's heads to the logits),
  ``ablate`` (``ablate_heads``, zero ablation of the middle layer's heads: the main
  sweep, its copies packed under the budget) and ``qk`` (``qk_attribution`` of one
  head, last query, every key): wall
  seconds and their ratio to the plain forward measured in the same process,
  the forward-equivalents the analysis counts (``df.attrs``), the peak
  resident memory over the loaded model (``VmHWM`` reset just before the call;
  on a GPU ``max_memory_allocated``) in GiB and over the weights' bytes; beside it
  the peak over what was resident when the call began (``peak_call_gib``: the
  warm-up forwards' own growth, thread pools and kernel caches, is no analysis's),
  which the estimate is compared with.

The task is random clean / corrupted tokens (seeded) with a logit-difference
metric on random answer / wrong ids per sequence. Analyses that take
``memory_budget=`` get ``--memory``; those that take ``estimate=True`` report
their :class:`Estimate` beside the measurement (missing where the keyword is
refused); ``--compare`` also runs each chunked analysis as one batch and
reports the largest difference between the two tables.

Results are appended to a JSON-lines file as each process ends; a rerun
skips the rows already measured (same model, shape, analysis, tokens, dtype,
device, budget), so a long run resumes where it stopped. ``--table`` prints
the Markdown table for the README from that file. ``--plan`` prints, without
building anything, each shape's weights and one forward's activations
(:func:`interp.memory.forward_bytes`) against the budget.

    python benchmarks/scale.py --shrink 8                # every shape at 1/8: minutes
    python benchmarks/scale.py --models llama-1b --analyses load,forward,dla,lens,eap
    python benchmarks/scale.py --models llama-1b --batch 64 --pos 128 --memory 16GiB --compare
    python benchmarks/scale.py --table [--out scale.jsonl]
    python benchmarks/scale.py --plan --models llama-1b,llama-8b --batch 64 --pos 128

Full shapes are heavy (Llama-3.2-1B: 4.9 GB of float32 weights, one forward of
4 x 64 tokens about 15 s on 2 cores; Gemma-2-2B: 10.5 GB): run them alone,
one model at a time; ``--max-rss`` kills a measurement whose resident
memory passes a limit (the row records it).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

GiB = 1 << 30
SLOW_FORWARD_S = 60.0  # a warm-up forward longer than this is the measurement's reference
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# The real shapes, from each model's Hugging Face config.json. Special ids are the word
# tokenizer's (t0 BOS, t1 EOS): prompts here are token ids.
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-1b": (
        "llama",
        dict(
            hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
            tie_word_embeddings=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_parameters={**LLAMA3_ROPE, "factor": 32.0},
        ),
    ),
    "qwen-1.5b": (
        "qwen2",
        dict(
            hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
            num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
            tie_word_embeddings=True, max_position_embeddings=131072, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            use_sliding_window=False, sliding_window=131072, max_window_layers=21,
        ),
    ),
    "gemma-2b": (
        "gemma2",
        dict(
            hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
            num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
            tie_word_embeddings=True, max_position_embeddings=8192, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0, query_pre_attn_scalar=256, sliding_window=4096,
        ),
    ),
    "llama-8b": (
        "llama",
        dict(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
            tie_word_embeddings=False, max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_parameters={**LLAMA3_ROPE, "factor": 8.0},
        ),
    ),
}  # fmt: skip
ANALYSES = (
    "load", "forward", "dla", "lens", "heads", "eap", "eap-ig", "evaluate", "patch", "path",
    "ablate", "qk",
)  # fmt: skip
CIRCUIT_EDGES = 2000


def shape_config(name: str, shrink: int = 1) -> tuple[str, dict[str, Any]]:
    """The model type and config keywords of shape ``name``, its layers, head widths, MLP
    and vocabulary divided by ``shrink`` (head counts kept, so the graph keeps its fan-out).

    Raises:
        SystemExit: for an unknown shape.
    """
    if name not in SHAPES:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(SHAPES)}")
    kind, cfg = SHAPES[name]
    cfg = {**cfg, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
    if shrink > 1:
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // heads)
        head_dim = max(8, head_dim // shrink // 2 * 2)
        cfg["num_hidden_layers"] = max(2, round(cfg["num_hidden_layers"] / shrink))
        cfg["intermediate_size"] = max(16, cfg["intermediate_size"] // shrink)
        cfg["vocab_size"] = max(64, cfg["vocab_size"] // shrink)
        if kind == "gemma2":  # its width is not heads x head_dim; its query scale is head_dim
            cfg["hidden_size"] = max(16, cfg["hidden_size"] // shrink // 8 * 8)
            cfg["query_pre_attn_scalar"] = head_dim
        else:
            cfg["hidden_size"] = heads * head_dim
        if "head_dim" in cfg:
            cfg["head_dim"] = head_dim
    return kind, cfg


def hf_config(name: str, shrink: int = 1) -> Any:
    from transformers import AutoConfig

    kind, cfg = shape_config(name, shrink)
    return AutoConfig.for_model(kind, **cfg)


# ---------------------------------------------------------------- memory readings (child)


def _status(field: str) -> int:
    """A ``/proc/self/status`` field (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _settle() -> int:
    """Resident bytes after a garbage collection and returning free heap to the system."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass
    return _status("VmRSS")


class Peak:
    """The peak of resident memory (and of CUDA allocations) from ``start()`` to ``stop()``.

    ``VmHWM`` is reset by writing 5 to ``/proc/self/clear_refs`` (Linux 4.0+); where that
    is refused, a thread samples ``VmRSS`` every 2 ms instead.
    """

    def __init__(self, device: Any):
        self.cuda = getattr(device, "type", str(device)) == "cuda"

    def start(self) -> None:
        self.rss0 = _settle()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.sampler = None
        except OSError:
            self.done, self.sampled = threading.Event(), [self.rss0]
            self.sampler = threading.Thread(target=self._sample, daemon=True)
            self.sampler.start()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.cuda0 = torch.cuda.memory_allocated()

    def _sample(self) -> None:
        while not self.done.is_set():
            self.sampled[0] = max(self.sampled[0], _status("VmRSS"))
            self.done.wait(0.002)

    def stop(self) -> dict[str, float]:
        if self.sampler is None:
            rss_peak = _status("VmHWM")
        else:
            self.done.set()
            self.sampler.join()
            rss_peak = max(self.sampled[0], _status("VmRSS"))
        out = {"rss_peak": rss_peak}
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            out["cuda_peak"] = torch.cuda.max_memory_allocated()
            out["cuda_before"] = self.cuda0
        return out


def _host() -> dict[str, Any]:
    """The machine's state: load average and available memory (others' work shows here)."""
    from interp.memory import available_memory

    return {
        "loadavg": round(os.getloadavg()[0], 2),
        "mem_available_gib": round(available_memory() / GiB, 2),
    }


def weights_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, each storage counted once (tied
    embeddings are one matrix)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.device, t.untyped_storage().data_ptr())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


# ---------------------------------------------------------------- the child processes


def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Build and save the random-weight folder of one shape (seeded)."""
    import torch
    from transformers import AutoModelForCausalLM

    from interp.models.hf_tokenizers import WORD_TOKENIZER_KEY

    t = time.perf_counter()
    torch.manual_seed(0)
    cfg = hf_config(spec["model"], spec["shrink"])
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, spec["dtype"]))
    n_params = sum(p.numel() for p in model.parameters())
    folder = Path(spec["folder"])
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config[WORD_TOKENIZER_KEY] = "word"  # a toy vocabulary t0 .. tN: no tokenizer files
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "BUILT").write_text(json.dumps({"params": n_params}))
    return {"params": n_params, "seconds": time.perf_counter() - t}


def _task(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Seeded clean / corrupted random tokens and random answer / wrong ids per sequence."""
    import torch

    from interp.metrics import logit_diff_metric
    from interp.protocol import model_device

    vocab = int(model.cfg.d_vocab)
    gen = torch.Generator().manual_seed(0)
    shape = (spec["batch"], spec["pos"])
    clean = torch.randint(2, vocab, shape, generator=gen)
    corrupted = torch.randint(2, vocab, shape, generator=gen)
    clean[:, 0] = corrupted[:, 0] = 0  # BOS
    answer = torch.randint(2, vocab, (spec["batch"],), generator=gen)
    wrong = (answer + torch.randint(1, vocab - 2, (spec["batch"],), generator=gen) - 2) % (
        vocab - 2
    ) + 2  # never equal to answer
    device = model_device(model)
    return {
        "clean": clean.to(device),
        "corrupted": corrupted.to(device),
        "answer": answer,
        "wrong": wrong,
        "metric": logit_diff_metric(answer, wrong),
    }


def _circuit_edges(model: Any, folder: Path) -> tuple[Any, str]:
    """The top edges of this folder's EAP run, else seeded random edges of the graph."""
    import numpy as np

    from interp.analysis import circuit_graph

    saved = folder / "eap-top-edges.json"
    if saved.is_file():
        return json.loads(saved.read_text()), "eap top"
    valid = circuit_graph(model).valid
    where = np.flatnonzero(valid)
    pick = np.random.default_rng(0).choice(where, min(CIRCUIT_EDGES, len(where)), replace=False)
    mask = np.zeros(valid.shape, dtype=bool)
    mask.flat[pick] = True
    return mask, "random"


def _call(name: str, model: Any, task: dict[str, Any], folder: Path) -> tuple[Any, Any, dict]:
    """The analysis ``name`` as a function and its arguments (after ``model, tokens``)."""
    from interp import analysis as A

    corrupted, metric = task["corrupted"], task["metric"]
    L, H = int(model.cfg.n_layers), int(model.cfg.n_heads)
    pair = dict(corrupted_tokens=corrupted, metric=metric)
    info: dict[str, Any] = {}
    if name == "dla":
        return A.direct_logit_attribution, dict(answer=task["answer"], wrong=task["wrong"]), info
    if name == "lens":
        return A.logit_lens, {}, info
    if name == "heads":
        return A.attribute_heads, dict(ablation="patch", **pair), info
    if name == "eap":
        return A.attribute_edges, pair, info
    if name == "eap-ig":
        return A.attribute_edges, dict(method="eap-ig", steps=5, **pair), info
    if name == "evaluate":
        edges, info["edges_from"] = _circuit_edges(model, folder)
        return A.evaluate_circuit, dict(edges=edges, **pair), info
    if name == "patch":
        return A.patch_components, dict(component="resid_pre", by="layer", **pair), info
    if name == "path":
        info["senders"] = f"L{L // 2}H0..{H - 1} -> logits"
        senders = [f"L{L // 2}H{h}" for h in range(H)]
        return A.path_patch, dict(senders=senders, **pair), info
    if name == "ablate":
        info["heads"] = f"L{L // 2}H0..{H - 1}, zero"
        heads = [(L // 2, h) for h in range(H)]
        return A.ablate_heads, dict(ablation="zero", metric=metric, heads=heads), info
    if name == "qk":
        info["head"] = f"L{L // 2}H0, last query, every key"
        return A.qk_attribution, dict(layer=L // 2, head=0), info
    raise ValueError(name)


def _accepts(fn: Any, keyword: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False
    return keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _estimate(fn: Any, model: Any, clean: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The analysis's own estimate (``estimate=True``), or None where it has none yet."""
    try:
        est = fn(model, clean, estimate=True, **kwargs)
    except TypeError as exc:
        if "estimate" in str(exc):
            return None
        raise
    fields = ("peak_bytes", "forward_equivalents", "chunks", "prompts_per_chunk")
    return {f: getattr(est, f, None) for f in fields}


def _difference(a: Any, b: Any) -> float:
    """The largest absolute difference between the numeric columns of two tables."""
    import numpy as np
    import pandas as pd

    if not isinstance(a, pd.DataFrame) or a.shape != b.shape:
        return float("nan")
    cols = [c for c in a.columns if pd.api.types.is_numeric_dtype(a[c])]
    if not cols:
        return 0.0
    x, y = a[cols].to_numpy(dtype=float), b[cols].to_numpy(dtype=float)
    both = np.isnan(x) & np.isnan(y)
    return float(np.nanmax(np.where(both, 0.0, np.abs(x - y)), initial=0.0))


def child_measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the model, then measure the load or one analysis (module docstring)."""
    import torch

    import interp.models.hf as hf
    from interp.models import load_model

    out: dict[str, Any] = {"host_before": _host()}
    gaps: list[float] = []
    check = hf.check_agreement

    def recorded(*args: Any, **kwargs: Any) -> float:
        gaps.append(check(*args, **kwargs))
        return gaps[-1]

    hf.check_agreement = recorded  # the loader's own check, with its gap kept
    device = torch.device(spec["device"])
    peak = Peak(device)
    peak.start()
    t = time.perf_counter()
    model = load_model(spec["folder"], dtype=spec["dtype"], device=spec["device"])
    load_s = time.perf_counter() - t
    p = peak.stop()
    rss_model = _settle()
    w = weights_bytes(model)
    out.update(weights_gib=w / GiB, rss_model_gib=rss_model / GiB)
    if spec["analysis"] == "load":
        out.update(
            seconds=load_s,
            peak_gib=(p["rss_peak"] - peak.rss0) / GiB,
            peak_over_weights=(p["rss_peak"] - peak.rss0) / w,
            resident_over_weights=(rss_model - peak.rss0) / w,
            logit_gap=max(gaps) if gaps else None,
            check_ran=bool(gaps),
        )
        if "cuda_peak" in p:
            out.update(cuda_peak_gib=p["cuda_peak"] / GiB)
        out["host_after"] = _host()
        return out

    task = _task(model, spec)
    clean = task["clean"]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t = time.perf_counter()
    with torch.no_grad():
        model(clean)  # warm-up: first-call costs are no analysis's
        sync()
    # a forward of minutes is its own reference: its first-call costs are noise, and two more
    # would cost more than many analyses
    slow = time.perf_counter() - t if time.perf_counter() - t > SLOW_FORWARD_S else None

    def forwards() -> list[float]:  # up to 3 within 10 s (a slow forward: the warm-up's)
        if slow is not None:
            return [slow]
        times: list[float] = []
        while len(times) < 3 and sum(times) < 10:
            t = time.perf_counter()
            with torch.no_grad():
                model(clean)
                sync()
            times.append(time.perf_counter() - t)
        return times

    peak.start()
    before = forwards()
    p = peak.stop()
    if spec["analysis"] == "forward":
        forward_s = seconds = sorted(before)[len(before) // 2]
        rows, fe, info, est, chunked = 1, 1.0, {}, None, False
    else:
        fn, kwargs, info = _call(spec["analysis"], model, task, Path(spec["folder"]))
        chunked = spec["memory"] is not None and _accepts(fn, "memory_budget")
        if chunked:
            kwargs["memory_budget"] = spec["memory"]
        if _accepts(fn, "progress"):
            kwargs["progress"] = True
        est = _estimate(fn, model, clean, kwargs)
        peak.start()
        t = time.perf_counter()
        df = fn(model, clean, **kwargs)
        sync()
        seconds = time.perf_counter() - t
        p = peak.stop()
        rows, fe = len(df), df.attrs.get("forward_equivalents")
        if spec["analysis"] == "eap":
            top = df.reindex(df["estimate"].abs().sort_values(ascending=False).index)
            labels = top["label"].head(CIRCUIT_EDGES).tolist()
            (Path(spec["folder"]) / "eap-top-edges.json").write_text(json.dumps(labels))
            info["edges"] = len(df)
        if spec["analysis"] == "evaluate":
            info["faithfulness"] = float(df["faithfulness"].iloc[0])
            info["edges"] = int(df["n_edges"].iloc[0])
        if spec["compare"] and chunked:
            kwargs["memory_budget"] = 1 << 50  # one batch
            t = time.perf_counter()
            whole = fn(model, clean, **kwargs)
            out["one_batch_s"] = time.perf_counter() - t
            out["one_batch_max_diff"] = _difference(df, whole)
            del whole
        del df
        # the reference brackets the analysis: the machine's load drifts while it runs
        times = before + (forwards() if slow is None else [])
        forward_s = sorted(times)[len(times) // 2]
        out["forwards_timed"] = [round(x, 3) for x in times]
    out["forward_s"] = forward_s
    grew = p["rss_peak"] - rss_model
    own = p["rss_peak"] - peak.rss0  # over what was resident when the call began
    out.update(
        seconds=seconds,
        wall_fwd=seconds / forward_s,
        forward_equivalents=fe,
        rows=rows,
        chunked=chunked,
        peak_gib=grew / GiB,
        peak_over_weights=grew / w,
        peak_call_gib=own / GiB,
        warm_gib=(peak.rss0 - rss_model) / GiB,  # the warm-up's own growth (thread pools...)
        **info,
    )
    if "cuda_peak" in p:
        out["cuda_peak_gib"] = (p["cuda_peak"] - p["cuda_before"]) / GiB
        grew = own = p["cuda_peak"] - p["cuda_before"]
    if est is not None:
        out["estimate"] = est
        if est.get("peak_bytes"):
            out["estimate_over_measured"] = est["peak_bytes"] / max(1, own)
    out["host_after"] = _host()
    return out


def child_main(spec: dict[str, Any], conn: Any) -> None:
    """A forked process's body: the result (or the error) goes back through ``conn``."""
    try:
        result = child_build(spec) if spec["analysis"] == "build" else child_measure(spec)
        conn.send({"status": "ok", **result})
    except BaseException as exc:  # noqa: BLE001 - every failure is a row, not a lost run
        import traceback

        traceback.print_exc()
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        conn.send({"status": "failed", "error": type(exc).__name__, "last": first})
        raise SystemExit(1) from None
    finally:
        conn.close()


# ---------------------------------------------------------------- the parent


def preload() -> None:
    """Import the heavy modules once, in the parent, before any fork: each measurement is a
    fresh process (its own memory) that does not pay the imports again. No torch work runs
    here, so no thread pool is forked."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch  # noqa: F401
    import transformer_lens.model_bridge  # noqa: F401
    import transformers  # noqa: F401

    import interp.analysis  # noqa: F401
    import interp.models.hf  # noqa: F401


def run_child(spec: dict[str, Any], *, timeout: float, max_rss: float | None) -> dict[str, Any]:
    """Run one measurement in a forked process (its output goes to this terminal); its
    result, or why there is none (killed for memory or time, an exception, a crash)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_main, args=(spec, send), daemon=False)
    proc.start()
    send.close()
    killed = ""
    start = time.monotonic()
    while proc.is_alive() and not receive.poll(0.2):
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                rss = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS:"))
        except (OSError, StopIteration):
            rss = 0
        if max_rss is not None and rss > max_rss:
            killed = f"resident memory {rss / GiB:.1f} GiB passed --max-rss"
        elif time.monotonic() - start > timeout:
            killed = f"ran past --timeout {timeout:.0f} s"
        if killed:
            proc.kill()
            break
    try:
        result = receive.recv() if not killed and receive.poll(1.0) else None
    except EOFError:
        result = None
    proc.join()
    if result is not None:
        return result
    why = killed or f"exit {proc.exitcode}" + (
        " (killed by the system: out of memory?)" if (proc.exitcode or 0) < 0 else ""
    )
    return {"status": "failed", "error": why, "last": ""}


def _key(row: dict[str, Any]) -> tuple:
    return tuple(
        row.get(k)
        for k in ("model", "shrink", "analysis", "batch", "pos", "dtype", "device", "memory")
    )


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return rows


def parse_bytes(text: str) -> int | None:
    """``16GiB``, ``500MB``, ``1e9`` as bytes; ``none`` as None.

    Raises:
        SystemExit: for text that is no size.
    """
    t = text.strip().lower().replace(" ", "")
    if t in ("none", "", "0"):
        return None
    units = {"gib": GiB, "mib": 1 << 20, "kib": 1 << 10, "gb": 10**9, "mb": 10**6, "kb": 10**3}
    for unit, scale in units.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * scale)
    try:
        return int(float(t.rstrip("b")))
    except ValueError:
        raise SystemExit(f"cannot read {text!r} as a size; write e.g. 16GiB or 500MB") from None


def _folder(args: Any, model: str, tmp: Path) -> Path:
    name = f"{model}-s{args.shrink}-{args.dtype}"
    return (Path(args.keep) if args.keep else tmp) / name


def measure(args: Any) -> None:
    out = Path(args.out)
    done = {_key(r) for r in read_rows(out) if r.get("status") == "ok"}
    tmp = Path(tempfile.mkdtemp(prefix="interp-scale-"))
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    try:
        for model in args.models:
            _measure_model(args, model, _folder(args, model, tmp), done, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nresults in {out}; the table: python benchmarks/scale.py --table --out {out}")


def _measure_model(args: Any, model: str, folder: Path, done: set, out: Path) -> None:
    common = dict(
        model=model, shrink=args.shrink, batch=args.batch, pos=args.pos, dtype=args.dtype,
        device=args.device, memory=args.memory,
    )  # fmt: skip
    todo = [a for a in args.analyses if _key({**common, "analysis": a}) not in done]
    if not todo:
        print(f"{model}: every analysis already in {out}")
        return
    cfg = hf_config(model, args.shrink)
    print(
        f"\n== {model}{f' / {args.shrink}' if args.shrink > 1 else ''}: "
        f"{cfg.num_hidden_layers} layers, {cfg.num_attention_heads} heads "
        f"({cfg.num_key_value_heads} KV), d_model {cfg.hidden_size}, vocab {cfg.vocab_size:,}; "
        f"{args.batch} x {args.pos} tokens, {args.dtype}; to do: {', '.join(todo)}"
    )
    try:
        if not (folder / "BUILT").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            print(f"  building {folder} ...", flush=True)
            spec = {**common, "analysis": "build", "folder": str(folder)}
            built = run_child(spec, timeout=args.timeout, max_rss=args.max_rss)
            if built["status"] != "ok":
                print(f"  build failed: {built['error']}: {built['last']}")
                return
            print(f"  built {built['params'] / 1e9:.3f}B parameters in {built['seconds']:.0f} s")
        params = json.loads((folder / "BUILT").read_text())["params"]
        for analysis in todo:
            print(f"  {analysis} ...", flush=True)
            spec = {**common, "analysis": analysis, "folder": str(folder)}
            spec["compare"] = args.compare
            t = time.perf_counter()
            row = run_child(spec, timeout=args.timeout, max_rss=args.max_rss)
            row.update(common, analysis=analysis, params=params, child_s=time.perf_counter() - t)
            row["when"] = time.strftime("%Y-%m-%d %H:%M:%S")
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"  {analysis}: {summary(row)}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def summary(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return f"FAILED ({row.get('error')}): {row.get('last', '')}"
    if row["analysis"] == "load":
        return (
            f"{row['seconds']:.1f} s, peak {row['peak_gib']:.2f} GiB = "
            f"{row['peak_over_weights']:.2f} x the weights ({row['weights_gib']:.2f} GiB); "
            f"logit gap vs Hugging Face {row['logit_gap']:.1e}"
        )
    fe = row.get("forward_equivalents")
    est = row.get("estimate")
    return (
        f"{row['seconds']:.1f} s = {row['wall_fwd']:.2f} x one forward ({row['forward_s']:.2f} s);"
        f" counted {fe if fe is not None else '-'} fwd-eq; peak +{row['peak_gib']:.2f} GiB "
        f"({row['peak_over_weights']:.2f} x the weights)"
        + (f"; estimate {est['peak_bytes'] / GiB:.2f} GiB" if est and est.get("peak_bytes") else "")
        + (
            f"; one batch differs by {row['one_batch_max_diff']:.1e}"
            if "one_batch_max_diff" in row
            else ""
        )
    )


# ---------------------------------------------------------------- table and plan


def _f(x: Any, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def table(path: Path) -> str:
    """The Markdown table of the last result of each measurement in ``path``."""
    latest: dict[tuple, dict[str, Any]] = {}
    for row in read_rows(path):
        latest[_key(row)] = row
    if not latest:
        return f"no results in {path}"
    lines = [
        "| model | tokens | analysis | seconds | x forward | fwd-eq (counted) | peak GiB over "
        "model | peak / weights | estimate GiB (/ measured) | notes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    order = {a: i for i, a in enumerate(ANALYSES)}
    first: dict[tuple, int] = {}  # models in the order they were run
    for r in latest.values():
        first.setdefault(_key(r)[:2], len(first))
    rows = sorted(latest.values(), key=lambda r: (first[_key(r)[:2]], order.get(r["analysis"], 99)))
    for r in rows:
        shape = r["model"] + (f" / {r['shrink']}" if r.get("shrink", 1) > 1 else "")
        tokens = f"{r['batch']} x {r['pos']} {r['dtype']}"
        head = f"| {shape} | {tokens} | {r['analysis']} |"
        if r.get("status") != "ok":
            why = f"{r.get('error')}: {r.get('last', '')}"[:160].replace("|", "/")
            lines.append(f"{head} failed | | | | | | {why} |")
            continue
        notes = []
        if r["analysis"] == "load":
            gap = _f(r.get("logit_gap"), ".1e")
            notes.append(f"weights {r['weights_gib']:.2f} GiB; logit gap vs HF {gap}")
            lines.append(
                f"{head} {r['seconds']:.1f} | | | {r['peak_gib']:.2f} | "
                f"{r['peak_over_weights']:.2f} | | {'; '.join(notes)} |"
            )
            continue
        est = r.get("estimate") or {}
        if est.get("peak_bytes"):
            ratio = r["estimate_over_measured"]
            est_text = f"{est['peak_bytes'] / GiB:.2f} ({ratio:.2f})"
            notes.append(
                f"estimate {'within' if abs(ratio - 1) <= 0.25 else 'off by more than'} 25%"
            )
        else:
            est_text = "-" if r["analysis"] == "forward" else "missing"
        if est.get("forward_equivalents") is not None:
            notes.append(f"estimated {est['forward_equivalents']:g} fwd-eq")
        if r.get("chunked"):
            notes.append(f"{est['chunks']} chunks" if est.get("chunks") else "budget passed")
        if "one_batch_max_diff" in r:
            notes.append(f"vs one batch {r['one_batch_max_diff']:.1e}")
        notes.append(f"load avg {r['host_before']['loadavg']}-{r['host_after']['loadavg']}")
        for k in ("edges", "edges_from", "faithfulness", "senders", "heads", "head"):
            if k in r:
                notes.append(f"{k} {r[k]:.3f}" if isinstance(r[k], float) else f"{k} {r[k]}")
        lines.append(
            f"{head} {r['seconds']:.1f} | {r['wall_fwd']:.2f} | "
            f"{_f(r.get('forward_equivalents'))} | {r['peak_gib']:.2f} | "
            f"{r['peak_over_weights']:.2f} | {est_text} | {'; '.join(notes)} |"
        )
    return "\n".join(lines)


def plan(args: Any) -> None:
    """Each shape's memory on paper: the weights, one forward's activations
    (:func:`interp.memory.forward_bytes`), and what EAP stores (every sender's output and
    every receiver's gradient, ``[batch, pos, d_model]`` each), with the prompts per chunk
    that fit the budget."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM

    from interp.memory import forward_bytes

    size = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    budget = args.memory
    print(
        f"on paper: {args.batch} x {args.pos} tokens, {args.dtype}, budget "
        f"{_f(budget / GiB if budget else None)} GiB over the weights\n"
        "| model | parameters | weights GiB | one forward's activations GiB | EAP's senders + "
        "receivers GiB | EAP prompts per chunk |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    )
    for name in args.models:
        cfg = hf_config(name, args.shrink)
        with torch.device("meta"):
            hf = AutoModelForCausalLM.from_config(cfg)
        params = sum(p.numel() for p in {id(p): p for p in hf.parameters()}.values())
        L, H, KV = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
        tl = SimpleNamespace(
            n_heads=H, d_model=cfg.hidden_size, d_mlp=cfg.intermediate_size,
            d_vocab=cfg.vocab_size, attn_only=False,
        )  # fmt: skip
        act = forward_bytes(SimpleNamespace(cfg=tl), args.batch, args.pos) * size / 4
        senders, receivers = L * H + L + 1, L * (H + 2 * KV) + L + 1
        eap = (senders + receivers) * args.batch * args.pos * cfg.hidden_size * size
        per_prompt = (eap + act) / args.batch
        chunk = "-" if budget is None else f"{min(args.batch, int(budget // per_prompt))}"
        print(
            f"| {name} | {params / 1e9:.2f}B | {params * size / GiB:.1f} | {act / GiB:.2f} | "
            f"{eap / GiB:.2f} | {chunk} of {args.batch} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        default="llama-1b,qwen-1.5b,gemma-2b",
        help=f"comma-separated, from {', '.join(SHAPES)}",
    )
    parser.add_argument(
        "--analyses",
        default=",".join(ANALYSES),
        help=f"comma-separated, from {', '.join(ANALYSES)}",
    )
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--pos", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--memory",
        default="16GiB",
        help="memory_budget for analyses that take one (none: not passed)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run each chunked analysis as one batch and compare",
    )
    parser.add_argument(
        "--shrink", type=int, default=1, help="divide layers, head widths, MLP and vocabulary by N"
    )
    parser.add_argument("--out", default="scale.jsonl", help="JSON lines, appended")
    parser.add_argument("--keep", default=None, help="keep the model folders here (reused)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per process")
    parser.add_argument(
        "--max-rss",
        default="none",
        help="kill a process whose resident memory passes this (e.g. 12GiB)",
    )
    parser.add_argument("--table", action="store_true", help="print the Markdown table of --out")
    parser.add_argument(
        "--plan", action="store_true", help="weights and activations on paper, nothing built"
    )
    args = parser.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.analyses = [a.strip() for a in args.analyses.split(",") if a.strip()]
    for a in args.analyses:
        if a not in ANALYSES:
            parser.error(f"unknown analysis {a!r}; choose from {', '.join(ANALYSES)}")
    for m in args.models:
        if m not in SHAPES:
            parser.error(f"unknown model {m!r}; choose from {', '.join(SHAPES)}")
    if args.shrink < 1:
        parser.error("--shrink must be at least 1")
    args.memory = parse_bytes(args.memory)
    args.max_rss = parse_bytes(args.max_rss)
    if args.table:
        print(table(Path(args.out)))
    elif args.plan:
        plan(args)
    else:
        preload()
        measure(args)


if __name__ == "__main__":
    main()

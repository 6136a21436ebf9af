"""The processes of :mod:`scale`: a forked child builds a folder or measures one analysis
(its own peak memory), and the parent that starts it, watches it and reads its result.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from scale.calls import CIRCUIT_EDGES, _accepts, _call, _difference, _estimate, _task
from scale.peak import GiB, Peak, _host, _settle, weights_bytes
from scale.shapes import child_build

SLOW_FORWARD_S = 60.0  # a warm-up forward longer than this is the measurement's reference


def child_measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the model, then measure the load or one analysis (run.py's docstring)."""
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

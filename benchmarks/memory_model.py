"""The memory model checked: each analysis's estimate against its measured peak, three sizes.

Every analysis states its peak bytes over the model's weights before it runs
(``estimate=True``: :class:`interp.engine.chunks.Estimate`, from its
:class:`~interp.engine.chunks.Footprint`). This runs :mod:`benchmarks.scale`'s
measurements (each analysis in a fresh process: peak resident memory over the
loaded model) on three sizes of the Llama-3.2-1B shape (``--shrink 4``, ``2`` and
the full shape, random weights, float32) at 4 x 64 tokens, and at 8 x 64 tokens
on the smallest (a check of the per-prompt terms), then prints estimate /
measured with a pass or fail per row against :data:`TOLERANCE`.

The heavy work is resumable: measurements are appended to ``--out`` as each
process ends and a rerun skips those already there (:mod:`benchmarks.scale`);
the model folders stay in ``--keep``. ``--estimates`` recomputes only the
estimates with the code as it is now (one process per size, no analysis run),
so a change to a formula needs no new measurement; ``--table`` prints the
table from what is stored.

    python benchmarks/memory_model.py --keep ~/interp-models          # hours: the full shape
    python benchmarks/memory_model.py --sizes 4,2 --keep /tmp/m       # minutes
    python benchmarks/memory_model.py --estimates --keep ~/interp-models
    python benchmarks/memory_model.py --table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import calls as scale_calls  # noqa: E402
from scale import child as scale_child  # noqa: E402
from scale import run as scale  # noqa: E402
from scale import table as scale_table  # noqa: E402

TOLERANCE = 0.25  # the estimate must be within 25% of the measured peak
MODEL = "llama-1b"
ANALYSES = ("dla", "lens", "heads", "eap", "eap-ig", "evaluate", "patch", "path", "ablate")
# (shrink, batch, pos): three sizes at 4 x 64 tokens, and 8 x 64 on the smallest
RUNS = ((4, 4, 64), (4, 8, 64), (2, 4, 64), (1, 4, 64))
GiB = 1 << 30


def _runs(sizes: list[int]) -> list[tuple[int, int, int]]:
    return [r for r in RUNS if r[0] in sizes]


def _args(opts: Any, shrink: int, batch: int, pos: int) -> SimpleNamespace:
    """The :mod:`benchmarks.scale` arguments of one size and shape."""
    return SimpleNamespace(
        models=[MODEL], analyses=list(opts.analyses), batch=batch, pos=pos, dtype="float32",
        device="cpu", memory=scale.parse_bytes(opts.memory), compare=False, shrink=shrink,
        out=opts.out, keep=opts.keep, timeout=opts.timeout,
        max_rss=scale.parse_bytes(opts.max_rss),
    )  # fmt: skip


def measure(opts: Any) -> None:
    """Every run's measurements not yet in ``--out`` (scale.py's children, one at a time)."""
    scale_child.preload()
    out = Path(opts.out)
    Path(opts.keep).mkdir(parents=True, exist_ok=True)
    for shrink, batch, pos in _runs(opts.sizes):
        args = _args(opts, shrink, batch, pos)
        done = {scale_table._key(r) for r in scale_table.read_rows(out) if r.get("status") == "ok"}
        folder = scale._folder(args, MODEL, Path(opts.keep))
        scale._measure_model(args, MODEL, folder, done, out)
    recompute(opts)


def _estimates_child(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: each analysis's estimate with the code as it is now."""
    import torch

    from interp.models import load_model

    model = load_model(spec["folder"], dtype="float32")
    out = {}
    for batch, pos in spec["shapes"]:
        task = scale_calls._task(model, {"batch": batch, "pos": pos})
        for name in spec["analyses"]:
            fn, kwargs, _ = scale_calls._call(name, model, task, Path(spec["folder"]))
            if spec["memory"] is not None:
                kwargs["memory_budget"] = spec["memory"]
            with torch.no_grad():
                est = scale_calls._estimate(fn, model, task["clean"], kwargs)
            out[f"{batch}x{pos}:{name}"] = est
    return {"status": "ok", "estimates": out}


def recompute(opts: Any) -> None:
    """The estimates of every run whose model folder is kept, stored in ``--out``'s
    ``.estimates.json`` beside it."""
    import multiprocessing

    store = _estimates_path(opts.out)
    saved = json.loads(store.read_text()) if store.is_file() else {}
    for shrink in sorted({r[0] for r in _runs(opts.sizes)}, reverse=True):
        args = _args(opts, shrink, 4, 64)
        folder = scale._folder(args, MODEL, Path(opts.keep))
        if not (folder / "BUILT").is_file():
            print(f"  no model folder for shrink {shrink} in {opts.keep}: estimates skipped")
            continue
        shapes = [(b, p) for s, b, p in _runs(opts.sizes) if s == shrink]
        spec = {
            "folder": str(folder), "shapes": shapes, "analyses": list(opts.analyses),
            "memory": scale.parse_bytes(opts.memory),
        }  # fmt: skip
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_send, args=(spec, send))
        proc.start()
        send.close()
        got = receive.recv() if receive.poll(opts.timeout) else {"status": "failed"}
        proc.join()
        if got.get("status") != "ok":
            print(f"  estimates for shrink {shrink} failed: {got.get('error', '')}")
            continue
        for key, est in got["estimates"].items():
            saved[f"{shrink}:{key}"] = est
        print(f"  estimates for shrink {shrink}: {len(got['estimates'])}")
    store.write_text(json.dumps(saved, indent=1))


def _send(spec: dict[str, Any], conn: Any) -> None:
    try:
        conn.send(_estimates_child(spec))
    except Exception as exc:  # noqa: BLE001 - reported as a failed row
        conn.send({"status": "failed", "error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def _estimates_path(out: str) -> Path:
    return Path(out).with_suffix(".estimates.json")


def rows(opts: Any) -> list[dict[str, Any]]:
    """One row per run and analysis: measured peak, the estimate (recomputed where stored,
    else the one recorded beside the measurement) and their ratio."""
    latest = {scale_table._key(r): r for r in scale_table.read_rows(Path(opts.out))}
    store = _estimates_path(opts.out)
    saved = json.loads(store.read_text()) if store.is_file() else {}
    out = []
    for shrink, batch, pos in _runs(opts.sizes):
        for name in opts.analyses:
            common = dict(
                model=MODEL, shrink=shrink, analysis=name, batch=batch, pos=pos, dtype="float32",
                device="cpu", memory=scale.parse_bytes(opts.memory),
            )  # fmt: skip
            r = latest.get(scale_table._key(common))
            row: dict[str, Any] = {"shrink": shrink, "batch": batch, "pos": pos, "analysis": name}
            if r is None or r.get("status") != "ok":
                row["status"] = "missing" if r is None else f"failed: {r.get('error')}"
                out.append(row)
                continue
            est = saved.get(f"{shrink}:{batch}x{pos}:{name}") or r.get("estimate") or {}
            measured = r.get("peak_call_gib", r["peak_gib"]) * GiB  # the call's own peak
            row.update(status="ok", measured=measured, estimate=est.get("peak_bytes"))
            if row["estimate"]:
                row["ratio"] = row["estimate"] / max(1.0, measured)
                row["pass"] = abs(row["ratio"] - 1) <= TOLERANCE
            out.append(row)
    return out


def table(opts: Any) -> str:
    """The Markdown table: estimate / measured per run and analysis, pass or fail."""
    lines = [
        "| size | tokens | analysis | estimate GiB | measured GiB | estimate / measured | "
        f"within {TOLERANCE:.0%} |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    passed = total = 0
    for r in rows(opts):
        size = "full" if r["shrink"] == 1 else f"1/{r['shrink']}"
        head = f"| {size} | {r['batch']} x {r['pos']} | {r['analysis']} |"
        if r["status"] != "ok" or not r.get("estimate"):
            lines.append(f"{head} | | | {r['status']} |")
            continue
        total += 1
        passed += bool(r["pass"])
        lines.append(
            f"{head} {r['estimate'] / GiB:.3f} | {r['measured'] / GiB:.3f} | {r['ratio']:.2f} | "
            f"{'pass' if r['pass'] else 'FAIL'} |"
        )
    lines.append(f"\n{passed} of {total} measured rows within {TOLERANCE:.0%}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="4,2,1", help="shrink factors: 4,2,1 (1: full)")
    parser.add_argument("--analyses", default=",".join(ANALYSES))
    parser.add_argument("--out", default="memory_model.jsonl", help="JSON lines, appended")
    parser.add_argument("--keep", default="memory-model-models", help="model folders (reused)")
    parser.add_argument("--memory", default="16GiB", help="memory_budget passed (scale.py's)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per process")
    parser.add_argument("--max-rss", default="12GiB", help="kill a process past this")
    parser.add_argument("--estimates", action="store_true", help="recompute the estimates only")
    parser.add_argument("--table", action="store_true", help="print the table of --out")
    opts = parser.parse_args()
    opts.sizes = [int(s) for s in opts.sizes.split(",") if s.strip()]
    opts.analyses = [a.strip() for a in opts.analyses.split(",") if a.strip()]
    for a in opts.analyses:
        if a not in scale_calls.ANALYSES:
            parser.error(f"unknown analysis {a!r}; choose from {', '.join(ANALYSES)}")
    if opts.table:
        print(table(opts))
        return
    if opts.estimates:
        scale_child.preload()
        recompute(opts)
    else:
        measure(opts)
    print(table(opts))


if __name__ == "__main__":
    main()

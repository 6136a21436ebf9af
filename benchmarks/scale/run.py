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
the Markdown table for ``docs/benchmarks.md`` from that file. ``--plan`` prints, without
building anything, each shape's weights and one forward's activations
(:func:`interp.core.memory.forward_bytes`) against the budget.

    python benchmarks/scale/run.py --shrink 8                # every shape at 1/8: minutes
    python benchmarks/scale/run.py --models llama-1b --analyses load,forward,dla,lens,eap
    python benchmarks/scale/run.py --models llama-1b --batch 64 --pos 128 --memory 16GiB --compare
    python benchmarks/scale/run.py --table [--out scale.jsonl]
    python benchmarks/scale/run.py --plan --models llama-1b,llama-8b --batch 64 --pos 128

Full shapes are heavy (Llama-3.2-1B: 4.9 GB of float32 weights, one forward of
4 x 64 tokens about 15 s on 2 cores; Gemma-2-2B: 10.5 GB): run them alone,
one model at a time; ``--max-rss`` kills a measurement whose resident
memory passes a limit (the row records it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scale.calls import ANALYSES  # noqa: E402
from scale.child import preload, run_child  # noqa: E402
from scale.peak import GiB  # noqa: E402
from scale.shapes import SHAPES, hf_config  # noqa: E402
from scale.table import _key, plan, read_rows, summary, table  # noqa: E402


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
    print(f"\nresults in {out}; the table: python benchmarks/scale/run.py --table --out {out}")


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

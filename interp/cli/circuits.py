"""``interp circuit`` and ``interp paths``: which edges carry a task, and what one path carries.

Both take a task: ``--clean`` and ``--corrupted`` prompts (each may be given
several times, in pairs of equal token length: :mod:`interp.cli.pairs`) with a metric, or by default
the model's default circuit task (:func:`interp.analysis.circuits.prompts.circuit_task`:
repeated tokens without a tokenizer, indirect-object prompts with one).

``interp circuit`` scores every edge with EAP or EAP-IG, finds the smallest
top-n circuit whose exact faithfulness reaches ``--target``, and writes it as
JSON (:meth:`interp.analysis.circuits.circuit.Circuit.save`), with its edge table and
layered drawing if asked. ``interp paths`` path-patches every sender into the
``--receivers`` (default the logits). Everything checkable without weights is
checked first (the labels' form, the prompts' lengths, each answer one token:
with the tokenizer alone); bad input is one line on stderr and exit 2. The
circuit, its table and its figure are computed first and then written
together (:func:`interp.cli.outputs.write_outputs`), so Ctrl-C or a failure
leaves every earlier file as it was, or every new one.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from interp.cli.args import (
    add_cost,
    add_model,
    announce,
    check_model_args,
    count_arg,
    load,
    seed_arg,
)
from interp.cli.inputs import tokenizer_of
from interp.cli.outputs import (
    check_distinct,
    check_out,
    check_svg,
    export_to,
    print_top,
    text_to,
    write_outputs,
)
from interp.cli.pairs import add_pairs, check_pairs, pair_task
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel


def _add_task(p: argparse.ArgumentParser) -> None:
    add_pairs(p, required=False)
    p.add_argument("--n", type=count_arg(2), default=16, help="prompt pairs of the default task")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the default task")


def add_parsers(sub: Any) -> None:
    """Add ``circuit`` and ``paths`` to ``sub``."""
    ci = sub.add_parser("circuit", help="find the smallest faithful circuit of edges for a task")
    add_model(ci)
    _add_task(ci)
    ci.add_argument("--method", default="eap-ig", choices=("eap", "eap-ig"), help="edge scores")
    ci.add_argument("--steps", type=count_arg(1), default=5, help="EAP-IG's integration steps")
    ci.add_argument("--target", type=float, default=0.8, help="faithfulness to reach, in (0, 1]")
    ci.add_argument("--out", required=True, help="the circuit (.json)")
    ci.add_argument("--table", help="also every edge's score: .csv .parquet .md .html .json")
    ci.add_argument("--figure", help="also the circuit as a layered graph (.svg)")
    add_cost(ci)
    ci.set_defaults(func=run_circuit)

    pa = sub.add_parser("paths", help="path patching: each sender's effect through a receiver")
    add_model(pa)
    _add_task(pa)
    pa.add_argument(
        "--receivers",
        default="logits",
        help="comma-separated receiving inputs, e.g. L1H1.k or L1H1 (its q, k, v) or L2.mlp",
    )
    pa.add_argument("--senders", help="comma-separated senders, e.g. L0H1,embed (default: all)")
    pa.add_argument(
        "--direction",
        default="noising",
        choices=("noising", "denoising"),
        help="noising (default): each sender's corrupted output into the clean run; "
        "denoising: its clean output into the corrupted run",
    )
    pa.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    pa.add_argument("--top", type=count_arg(0), default=10, help="senders to print")
    add_cost(pa)
    pa.set_defaults(func=run_paths)


# ------------------------------------------------------------------ checks, no weights
_SENDER = re.compile(r"^(L\d+H\d+|L\d+\.mlp|embed|pos_embed)$", re.IGNORECASE)
_RECEIVER = re.compile(r"^(logits|L\d+H\d+(\.[qkv])?|L\d+KV\d+\.[kv]|L\d+\.mlp)$", re.IGNORECASE)
_FORMS = {
    "--senders": "a head (L0H1), an MLP (L2.mlp), embed or pos_embed",
    "--receivers": "a head's input (L1H1.q, L1H1.k, L1H1.v; L1KV0.k on grouped-query models), "
    "a head (L1H1: its q, k and v), an MLP (L2.mlp) or logits",
}


def _labels(text: str | None, option: str) -> list[str] | None:
    """Comma-separated ``--senders``/``--receivers`` labels, each of a well-formed kind
    (whether the model has that layer is checked once it loads)."""
    if text is None:
        return None
    parts = [t.strip() for t in text.split(",")]
    if not all(parts):
        raise InterpError(f"{option} {text!r} holds an empty label; e.g. L1H1.k,logits")
    form = _SENDER if option == "--senders" else _RECEIVER
    bad = [t for t in parts if not form.match(t)]
    if bad:
        raise InterpError(f"{option} label {bad[0]!r} is not one; each is {_FORMS[option]}")
    return list(dict.fromkeys(parts))


def _prechecked(args: argparse.Namespace) -> None:
    check_pairs(args)
    check_model_args(args)
    if args.clean:
        pair_task(args, tokenizer_of(args.model))


def _task(args: argparse.Namespace, model: HookedModel) -> tuple[Any, Any, Any, str]:
    if args.clean:
        clean, corrupted, metric = pair_task(args, model)
        return clean, corrupted, metric, f"{len(args.clean)} prompt pair(s) from --clean"
    from interp.analysis.circuits.prompts import circuit_task

    prompts = circuit_task(model, n=args.n, seed=args.seed)
    what = f"{prompts.name}: {prompts.description}"
    return prompts.clean, prompts.corrupted, prompts.metric, what


# ------------------------------------------------------------------------ commands
def run_circuit(args: argparse.Namespace) -> int:
    from interp.outputs.files import check_output_file

    out = Path(args.out)
    if out.suffix.lower() != ".json":
        raise InterpError(f"--out {args.out!r} must end in .json (the circuit document)")
    check_output_file(out, "--out")
    table = check_out(args.table) if args.table else None
    figure = check_svg(args.figure)
    check_distinct({"--out": out, "--table": table, "--figure": figure})
    if not 0 < args.target <= 1:
        raise InterpError(f"--target must be in (0, 1], got {args.target}")
    _prechecked(args)
    import numpy as np

    from interp.analysis.circuits.edge_attribution import attribute_edges
    from interp.analysis.circuits.search import find_circuit
    from interp.engine.edges.graph import build_graph

    model = load(args)
    clean, corrupted, metric, what = _task(args, model)
    print(f"task: {what}; {clean.shape[0]} x {clean.shape[1]} tokens")
    options = dict(corrupted_tokens=corrupted, metric=metric, memory_budget=args.memory)
    blank = np.zeros(build_graph(model).valid.shape)  # the search's cost needs no scores
    announce(
        attribute_edges(model, clean, **options, method=args.method, steps=args.steps,
                        estimate=True),
        find_circuit(model, clean, **options, scores=blank, target=args.target, estimate=True),
    )  # fmt: skip
    if args.estimate:
        return 0
    scores = attribute_edges(
        model, clean, **options, method=args.method, steps=args.steps, progress=True
    )
    a = scores.attrs
    n_edges = len(scores)
    cost = f"{a.get('forward_equivalents', 0):g} forward-pass equivalents"
    print(f"scored {n_edges:,} edges by {args.method} ({cost}); clean {a['clean']:.4f}")
    circuit = find_circuit(
        model, clean, **options, scores=scores, target=args.target, progress=True
    )
    info = circuit.info
    circuit.info.update(task=what, method=args.method, seed=args.seed if not args.clean else None)
    print(
        f"circuit: {info['n_edges']} of {n_edges:,} edges ({info['fraction_of_edges']:.2%}), "
        f"faithfulness {info['faithfulness']:.3f} (target {args.target}, measured exactly)"
    )
    for label in circuit.edges()["label"][:12]:
        print(f"  {label}")
    writers = {out: circuit.save}
    if table is not None:
        scores.attrs.update(model=args.model, inputs=what)
        writers[table] = export_to(scores)
    if figure is not None:  # drawn before anything is written
        from interp.outputs.figures import circuit_figure

        plot = circuit_figure(
            circuit.edges().to_dict("records"),
            n_layers=int(model.cfg.n_layers),
            caption=f"The smallest top-n circuit by |{args.method.upper()}| (pruned to edges "
            f"connected to the input and the logits) keeping {info['faithfulness']:.2f} of the "
            f"clean - corrupted difference: {info['n_edges']} of {n_edges:,} edges. "
            "Width is |score|; faithfulness measured with the corrupted prompts as replacement.",
        )
        writers[figure] = text_to(plot.svg())
    write_outputs(writers)  # all new files, or (interrupted, failed) all the old ones
    for path in (table, figure, out):
        if path is not None:
            print(f"wrote {path}")
    return 0


def run_paths(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    receivers = _labels(args.receivers, "--receivers")
    senders = _labels(args.senders, "--senders")
    _prechecked(args)
    from interp.analysis.circuits.paths import path_patch

    model = load(args)
    clean, corrupted, metric, what = _task(args, model)
    print(f"task: {what}; {clean.shape[0]} x {clean.shape[1]} tokens")
    options = dict(
        corrupted_tokens=corrupted, metric=metric, senders=senders, receivers=receivers,
        direction=args.direction, memory_budget=args.memory,
    )  # fmt: skip
    announce(path_patch(model, clean, **options, estimate=True))
    if args.estimate:
        return 0
    df = path_patch(model, clean, **options, progress=True)
    print(f"path patching ({args.direction}) into {', '.join(receivers)} ({len(df)} senders)")
    print_top(df, "normalized", args.top)
    df.attrs.update(model=args.model, inputs=what)
    write_outputs({out: export_to(df)})
    print(f"wrote {out}")
    return 0

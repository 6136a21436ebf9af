"""The ``interp`` command line.

Errors print one line on stderr and exit non-zero (2 for bad input, 130 for
Ctrl-C, 1 for anything unexpected); set ``INTERP_DEBUG=1`` for a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

# Lab name -> module with run() and DEFAULT_OUT; only the induction lab takes --format.
LABS = {
    "induction": "interp.labs.induction_report",
    "bank-sense": "interp.labs.bank_sense_report",
    "feature-recovery": "interp.labs.feature_recovery_report",
    "pretrained": "interp.labs.pretrained_report",
}


def _lab(args: argparse.Namespace) -> int:
    import importlib

    from interp.errors import InterpError

    lab = importlib.import_module(LABS[args.name])
    out_dir = args.out or lab.DEFAULT_OUT
    if args.model and args.name != "pretrained":
        raise InterpError(f"--model is for the pretrained lab; the {args.name} lab has its own")
    if args.name == "induction":
        out = lab.run(out_dir, fmt=args.format, checkpoint=args.checkpoint)
    elif args.format != "csv":
        raise InterpError(f"the {args.name} lab writes CSV tables only; drop --format")
    elif args.name == "pretrained":
        out = lab.run(out_dir, models=args.model or lab.DEFAULT_MODELS, seed=args.seed)
    else:
        out = lab.run(out_dir)
    for line in out.summary:
        print(line)
    return 0


def _train(args: argparse.Namespace) -> int:
    from interp._io import check_out_dir
    from interp.training import InductionTrainConfig, save_checkpoint, train_induction

    out = check_out_dir(args.out)  # before training, not after
    cfg = InductionTrainConfig(seed=args.seed, steps=args.steps)
    result = train_induction(cfg, progress=not args.quiet)
    if result.interrupted:
        print("interp: interrupted; no checkpoint written", file=sys.stderr)
        return 130
    save_checkpoint(result, out)
    last = result.history[-1]
    print(
        f"trained {len(result.history) and last['step']} steps in {result.seconds:.1f} s: "
        f"held-out induction {last['induction']:.3f}, previous-token {last['previous_token']:.3f}"
        f", repeated-half loss {last['repeated_loss']:.3f}"
    )
    print(f"wrote {out}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from interp.models.pretrained import list_models

    for row in list_models():
        state = ("cached" if row["cached"] else "installed") if row["installed"] else "missing"
        print(f"{row['alias']:<14}{state:<11}{row['size_mb']:>9.1f} MB   {row['install']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interp", description="Open up attention heads.")
    sub = parser.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("lab", help="run a lab and write its report")
    lab.add_argument("name", choices=list(LABS), help="which lab")
    lab.add_argument("--out", help="output directory (default: reports/<lab>)")
    lab.add_argument(
        "--format",
        default="csv",
        choices=("csv", "parquet", "md", "json"),
        help="table format (induction lab)",
    )
    lab.add_argument("--checkpoint", help="induction checkpoint directory (default: shipped)")
    lab.add_argument(
        "--model",
        action="append",
        help="pretrained lab: model alias or local directory, repeatable "
        "(default: smollm2-135m and minilm-l6)",
    )
    lab.add_argument("--seed", type=int, default=0, help="pretrained lab: seed for probes/draws")
    lab.set_defaults(func=_lab)
    train = sub.add_parser("train", help="train a model from scratch")
    train.add_argument("what", choices=("induction",))
    train.add_argument("--out", default="checkpoints/induction-2l", help="checkpoint directory")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--steps", type=int, default=1200)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)
    models = sub.add_parser("models", help="list built-in model aliases")
    models.set_defaults(func=_models)
    from interp.cli_ablate import add_parsers

    add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from interp.errors import InterpError

    try:
        return args.func(args)
    except InterpError as exc:
        print(f"interp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interp: interrupted; no partial output was written", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, not a traceback
        if os.environ.get("INTERP_DEBUG"):
            raise
        print(
            f"interp: unexpected error: {type(exc).__name__}: {exc} "
            "(set INTERP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

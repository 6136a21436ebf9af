"""The ``interp`` command line.

Errors print one line on stderr and exit non-zero (2 for bad input, 130 for
Ctrl-C, 1 for anything unexpected); set ``INTERP_DEBUG=1`` for a traceback.
Arguments are checked before anything heavy is imported or computed, so
``interp --help`` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), like every other error."""

    def error(self, message: str) -> NoReturn:
        print(f"interp: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def seed_arg(text: str) -> int:
    """A seed: an integer in [0, 2**63)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seed must be an integer, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2**63), got {value}")
    return value


def count_arg(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _lab(args: argparse.Namespace) -> int:
    from interp.labs import default_out, run_lab

    out = run_lab(  # checks every option and the output folder before any work
        args.name,
        out=args.out or default_out(args.name),
        fmt=args.format,
        models=args.model,
        seed=args.seed,
        progress=not args.quiet,
    )
    for line in out.summary:
        print(line)
    return 0


def _train(args: argparse.Namespace) -> int:
    from interp.files import check_output_dir

    out = check_output_dir(args.out, "--out")  # before importing torch, let alone training
    from interp.training import InductionTrainConfig, save_result, train_induction

    cfg = InductionTrainConfig(seed=args.seed, steps=args.steps)
    result = train_induction(cfg, progress=not args.quiet)
    if result.interrupted:
        print("interp: interrupted; no checkpoint written", file=sys.stderr)
        return 130
    save_result(result, out)
    last = result.history[-1]
    print(
        f"trained {last['step']} steps in {result.seconds:.1f} s: held-out induction "
        f"{last['induction']:.3f}, previous-token {last['previous_token']:.3f}, repeated-half "
        f"loss {last['repeated_loss']:.3f}"
    )
    print(f"wrote {out}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from interp.models.loader import list_models

    for row in list_models():
        print(f"{row['alias']:<14}{row['state']:<16}{row['size_mb']:>9.1f} MB   {row['where']}")
        print(f"{'':<14}{row['description']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="interp", description="Open up attention heads.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    lab = sub.add_parser("lab", help="run a lab and write its report, tables and figures")
    from interp.labs import LABS, TABLE_FORMATS

    lab.add_argument("name", choices=list(LABS), help="which lab")
    lab.add_argument("--out", help="output folder (default: reports/<lab>); replaced atomically")
    lab.add_argument("--format", default="csv", choices=TABLE_FORMATS, help="table format")
    lab.add_argument(
        "--model",
        action="append",
        help="model alias, checkpoint or Hugging Face folder (labs on models; repeatable for "
        "the pretrained lab)",
    )
    lab.add_argument("--seed", type=seed_arg, default=0, help="seed of every random draw")
    lab.add_argument("--quiet", action="store_true", help="no progress bar")
    lab.set_defaults(func=_lab)
    train = sub.add_parser("train", help="train a model from scratch")
    train.add_argument("what", choices=("induction",))
    train.add_argument("--out", default="checkpoints/induction-2l", help="checkpoint folder")
    train.add_argument("--seed", type=seed_arg, default=0)
    train.add_argument("--steps", type=count_arg(1), default=1200)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)
    models = sub.add_parser("models", help="list built-in model aliases and their cache state")
    models.set_defaults(func=_models)
    from interp.cli_heads import add_parsers

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
        print("interp: interrupted; earlier output (if any) is left as it was", file=sys.stderr)
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

"""``interp lab``, ``interp train``, ``interp models``: runs that write folders; the model list."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from interp.cli.args import DEVICE_HELP, DTYPE_HELP, count_arg, seed_arg
from interp.core.errors import InterpError


def add_parsers(sub: Any) -> None:
    """Add ``lab``, ``train`` and ``models`` to ``sub``."""
    from interp.experiments import LABS
    from interp.experiments.writer import TABLE_FORMATS

    lab = sub.add_parser("lab", help="run a lab and write its report, tables and figures")
    lab.add_argument("name", choices=list(LABS), help="which lab")
    lab.add_argument("--out", help="output folder (default: reports/<lab>); replaced atomically")
    lab.add_argument("--format", default="csv", choices=TABLE_FORMATS, help="table format")
    lab.add_argument(
        "--model",
        action="append",
        help="model alias, checkpoint or Hugging Face folder (labs on models; repeatable for "
        "the pretrained lab)",
    )
    lab.add_argument("--device", help=DEVICE_HELP)
    lab.add_argument(
        "--dtype", choices=("float32", "bfloat16", "float16", "float64"), help=DTYPE_HELP
    )
    lab.add_argument("--seed", type=seed_arg, default=0, help="seed of every random draw")
    lab.add_argument("--quiet", action="store_true", help="no progress bar")
    lab.set_defaults(func=run_lab)
    train = sub.add_parser(
        "train", help="train a model from scratch, or a dictionary at a hook of a model"
    )
    train.add_argument("what", choices=("induction", "dictionary"))
    train.add_argument(
        "--out",
        help="checkpoint folder (induction; default checkpoints/induction-2l) or the "
        "dictionary's sae-lens folder (dictionary; required)",
    )
    train.add_argument("--seed", type=seed_arg, default=0)
    train.add_argument("--steps", type=count_arg(1), help="induction: steps (default 1200)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    from interp.cli.dictionaries import add_dictionary_options

    add_dictionary_options(train)
    train.set_defaults(func=run_train)
    models = sub.add_parser("models", help="list built-in model aliases and their cache state")
    models.set_defaults(func=run_models)


def run_lab(args: argparse.Namespace) -> int:
    from interp.experiments import default_out, run_lab

    out = run_lab(  # checks every option and the output folder before any work
        args.name,
        out=args.out or default_out(args.name),
        fmt=args.format,
        models=args.model,
        seed=args.seed,
        progress=not args.quiet,
        device=args.device,
        dtype=args.dtype,
    )
    for line in out.summary:
        print(line)
    return 0


def run_train(args: argparse.Namespace) -> int:
    from interp.outputs.files import check_output_dir

    if args.what == "dictionary":
        from interp.cli.dictionaries import run_train_dictionary

        if args.steps is not None:  # before: ignored silently
            raise InterpError(
                "--steps is for `interp train induction`; a dictionary trains --epochs passes "
                "over --sequences sequences, --batch-size positions a step: set those"
            )
        return run_train_dictionary(args)
    given = [
        f"--{k.replace('_', '-')}"
        for k in ("hook", "features", "k", "seq_len", "lr", "skip_columns", "memory")
        if getattr(args, k, None) is not None
    ]
    if given:
        raise InterpError(
            f"{given[0]} is for `interp train dictionary`; `interp train induction` takes "
            "--seed, --steps and --out"
        )
    out = check_output_dir(
        args.out or "checkpoints/induction-2l", "--out"
    )  # before importing torch, let alone training
    from interp.training.induction import InductionTrainConfig, save_result, train_induction

    steps = InductionTrainConfig.steps if args.steps is None else args.steps
    cfg = InductionTrainConfig(seed=args.seed, steps=steps)
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


def run_models(args: argparse.Namespace) -> int:
    from interp.models.loader import list_models

    for row in list_models():
        print(f"{row['alias']:<14}{row['state']:<16}{row['size_mb']:>9.1f} MB   {row['where']}")
        print(f"{'':<14}{row['description']}")
    return 0

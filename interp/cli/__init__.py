"""The ``interp`` command line: one module per command group, shared argument types in one place.

* :mod:`interp.cli.args`: argument types, input readers and the checks every
  command runs before a model loads;
* :mod:`interp.cli.labs`: ``interp lab``, ``interp train``, ``interp models``;
* :mod:`interp.cli.heads`: ``interp ablate``, ``attribute``, ``patch``, ``scores``;
* :mod:`interp.cli.components`: ``interp dla``, ``lens``, ``attention``;
* :mod:`interp.cli.circuits`: ``interp circuit``, ``paths``;
* :mod:`interp.cli.atlas`: ``interp atlas``;
* :mod:`interp.cli.generate`: ``interp generate``;
* :mod:`interp.cli.features`: ``interp features`` (a dictionary's features on a page).

Errors print one line on stderr and exit non-zero (2 for bad input, 130 for
Ctrl-C, 1 for anything unexpected); set ``INTERP_DEBUG=1`` for a traceback.
Warnings are one line too. Arguments are checked before anything heavy is
imported or computed, so ``interp --help`` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from interp.cli.args import Parser

GROUPS = (
    "interp.cli.labs",
    "interp.cli.heads",
    "interp.cli.components",
    "interp.cli.circuits",
    "interp.cli.atlas",
    "interp.cli.generate",
    "interp.cli.features",
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (each group module adds its own)."""
    import importlib

    parser = Parser(prog="interp", description="Open up attention heads.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in GROUPS:
        importlib.import_module(module).add_parsers(sub)
    return parser


def _one_line_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    print(f"interp: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    workers, argv = _workers(argv)
    parser = build_parser()
    args = parser.parse_args(argv)  # bad arguments: one line here, before any process starts
    if workers is not None:
        return _launch(workers, argv)
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C, at any point
        if not os.environ.get("INTERP_LAUNCHER"):  # a rank's launcher says it once
            _say("interp: interrupted; earlier output (if any) is left as it was")
        return 130


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command inside the process group torchrun describes, if any; its exit
    status, errors as one line (module docstring)."""
    from interp.core.errors import InterpError

    previous = warnings.showwarning
    warnings.showwarning = _one_line_warning
    try:
        group = _join_group()  # launched by torchrun: every rank runs the command
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        _say(
            f"interp: error: WORLD_SIZE={os.environ.get('WORLD_SIZE')} asks for a process "
            f"group, but joining it failed ({type(exc).__name__}: {exc}); launch with torchrun "
            "or --workers N, or unset WORLD_SIZE",
        )
        warnings.showwarning = previous
        return 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default", UserWarning)  # each distinct warning once
            return args.func(args)
    except InterpError as exc:
        _say(f"interp: error{_rank_tag()}: {exc}")
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, not a traceback
        if os.environ.get("INTERP_DEBUG"):
            raise
        _say(
            f"interp: unexpected error{_rank_tag()}: {type(exc).__name__}: {exc} "
            "(set INTERP_DEBUG=1 for a traceback)",
        )
        return 1
    finally:
        warnings.showwarning = previous
        if group:
            _leave_group()


def _workers(argv: list[str]) -> tuple[int | None, list[str]]:
    """``--workers N`` taken out of ``argv`` (any place before a lone ``--``): N local
    processes started by PyTorch's own launcher; None when not given.

    Raises:
        SystemExit: (2, one line) for N that is not a positive integer.
    """
    out, n, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        if a == "--workers" or a.startswith("--workers="):
            text = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in a else 2
            if not text.isdigit() or int(text) < 1:
                print(f"interp: error: --workers must be a positive integer, got {text!r}",
                      file=sys.stderr)  # fmt: skip
                raise SystemExit(2)
            n = int(text)
            continue
        out.append(a)
        i += 1
    return n, out


def _launch(workers: int, argv: list[str]) -> int:
    """Run ``interp argv`` on ``workers`` local processes through PyTorch's launcher
    (:mod:`interp.cli.workers`; one process: here, as usual); its exit status."""
    if workers == 1:
        return main(argv)
    from interp.cli.workers import launch

    return launch(workers, argv)


def _say(line: str) -> None:
    """One line on stderr; in a rank that ``--workers`` started, to its launcher instead,
    which says the failing rank's line once (:mod:`interp.cli.workers`)."""
    where = os.environ.get("INTERP_LAUNCHER", "")
    if where and os.path.isdir(where):
        with open(os.path.join(where, f"rank{os.environ.get('RANK', '0')}.err"), "a") as f:
            f.write(line + "\n")
        return
    print(line, file=sys.stderr)


def _rank_tag() -> str:
    """`` (rank 1)`` inside a process group, else nothing: which rank failed."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return ""
    return f" (rank {dist.get_rank()})"


def _join_group() -> bool:
    """Join the ``torch.distributed`` process group ``torchrun`` describes (``WORLD_SIZE``
    above 1; gloo on CPU, nccl on CUDA), once; other ranks than 0 print nothing to stdout
    (rank 0 prints and writes the one copy of each output). Returns whether it joined."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return False
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from datetime import timedelta

    # no rank waits forever for another: a collective that cannot complete times out
    seconds = float(os.environ.get("INTERP_RANK_TIMEOUT", "600"))
    dist.init_process_group(backend, timeout=timedelta(seconds=seconds))
    if dist.get_rank() != 0:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    return True


def _leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

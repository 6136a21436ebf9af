"""The ``interp`` command line.

Errors print one line on stderr and exit non-zero (2 for bad input, 130 for
Ctrl-C, 1 for anything unexpected); set ``INTERP_DEBUG=1`` for a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _lab(args: argparse.Namespace) -> int:
    if args.name == "bank-sense":
        from interp.labs import bank_sense_report as lab

        out = lab.run(args.out or lab.DEFAULT_OUT)
    else:  # pragma: no cover - argparse restricts choices
        raise AssertionError(args.name)
    for line in out.summary:
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interp", description="Open up attention heads.")
    sub = parser.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("lab", help="run a lab and write its report")
    lab.add_argument("name", choices=["bank-sense"], help="which lab")
    lab.add_argument("--out", help="output directory (default: reports/<lab>)")
    lab.set_defaults(func=_lab)
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

"""Argument types and input readers shared by every ``interp`` command (no torch at import).

Every check here runs before a model loads: a bad option is one line on
stderr and exit 2. Readers that need the model (or only its tokenizer) take
it as an argument and say so.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn

from interp.core.errors import InterpError

DEFAULT_BATCH = 16
DEVICE_HELP = "device for the model: cpu (default), cuda, cuda:1, mps"
DTYPE_HELP = "model precision: float32 (default), bfloat16, float16, float64"
# The one rule for token ids, on the CLI as in the API (interp.core.checks.token_id).
TOKEN_RULE = (
    "digits only (7, spaces around ignored) is a token id; any other text must be exactly "
    "one token, leading spaces counting (' Mary')"
)
_INTEGER = re.compile(r"[-+]?[0-9]+")
_HEAD_LABEL = re.compile(r"L[0-9]+H[0-9]+", re.IGNORECASE)
_FLOAT = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+)")
LARGEST_ID = 2**63 - 1
# How errors name the two parts of --logit-diff ANSWER,WRONG.
LOGIT_DIFF_PARTS = ("--logit-diff ANSWER", "--logit-diff WRONG")


# Where a parse records the options already given (removed before the namespace is returned).
_GIVEN = "_interp_options_given"
# How to give several values to an option that takes one (said when it is given twice).
SEVERAL = {
    "--heads": "name several heads in one, comma-separated (--heads L1H4,L0H7)",
    "--positions": "give several positions in one, comma-separated (--positions 3,-1)",
    "--at": "give several positions in one, comma-separated (--at 3,-1)",
    "--senders": "name several senders in one, comma-separated (--senders L0H1,embed)",
    "--receivers": "name several receivers in one, comma-separated (--receivers L1H1.k,logits)",
}


class StoreOnce(argparse._StoreAction):
    """Store an option's value, refusing a second occurrence (plain argparse keeps the last
    one, silently). Every option of a :class:`Parser` that takes a value acts so, unless it
    asks for ``action="append"`` (``--clean`` and ``--corrupted`` in pairs)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        given = vars(namespace).setdefault(_GIVEN, set())
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice, but {self._one(parser)}")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)

    def _one(self, parser: Any) -> str:
        option = max(self.option_strings, key=len)
        if option in SEVERAL:
            return f"it takes one list: {SEVERAL[option]}"
        if option == "--prompt":
            if parser.takes("--tokens"):
                return "it takes one prompt: give several as a --tokens file (a line of ids each)"
            return "it takes one prompt: run the command once per prompt"
        return "it takes one value: give it once"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), like every other error,
    and whose options take one value each: a second ``--prompt`` is such an error, not a
    silent replacement of the first (:class:`StoreOnce`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, StoreOnce)  # its argument groups share the registry
        self.register("action", "store", StoreOnce)

    def takes(self, option: str) -> bool:
        """Whether this parser has ``option`` (e.g. ``"--tokens"``)."""
        return option in self._option_string_actions

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, rest = super().parse_known_args(args, namespace)
        vars(namespace).pop(_GIVEN, None)
        return namespace, rest

    def error(self, message: str) -> NoReturn:
        print(f"interp: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _not_an_integer(text: str) -> str | None:
    """Why ``text`` is not a strict integer (ASCII digits, an optional sign), or None."""
    t = text.strip()
    if _INTEGER.fullmatch(t):
        return None
    if _FLOAT.fullmatch(t):
        return f"got the float {text!r}; give a whole number (floats are not rounded)"
    return f"got {text!r}"


def seed_arg(text: str) -> int:
    """A seed: an integer in [0, 2**63) (a float is refused, not rounded)."""
    problem = _not_an_integer(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"seed must be an integer, {problem}")
    value = int(text.strip())
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2**63), got {value}")
    return value


def count_arg(minimum: int) -> Any:
    """An integer option of at least ``minimum`` (a float is refused, not rounded)."""

    def parse(text: str) -> int:
        problem = _not_an_integer(text)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"expected an integer, {problem}")
        value = int(text.strip())
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def add_model(p: argparse.ArgumentParser, default: str | None = "induction-2l") -> None:
    """``--model``, ``--device`` and ``--dtype`` (what :func:`interp.models.load_model` takes)."""
    p.add_argument(
        "--model",
        default=default,
        help="alias (induction-2l, smollm2-135m, minilm-l6), checkpoint or Hugging Face folder",
    )
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument(
        "--dtype", choices=("float32", "bfloat16", "float16", "float64"), help=DTYPE_HELP
    )


_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def memory_arg(text: str) -> int:
    """A memory size in bytes: ``16GiB``, ``500MB``, ``2.5GiB`` or a plain number of bytes."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a size like 16GiB, 500MiB or 2000000000 (bytes), got {text!r}"
        )
    value = float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return int(value)


def add_cost(p: argparse.ArgumentParser) -> None:
    """``--memory`` (the work's memory budget) and ``--estimate`` (say the cost, run nothing)."""
    p.add_argument(
        "--memory",
        type=memory_arg,
        help="memory budget beyond the weights, e.g. 16GiB (default: a quarter of the free "
        "memory); prompts run in chunks to stay under it",
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="print the cost (chunks, peak memory, forward passes) and stop, writing nothing",
    )


def announce(*estimates: Any) -> None:
    """Print what a run will cost, before it starts (:class:`interp.engine.chunks.Estimate`)."""
    for est in estimates:
        print(f"estimate: {est}")


def load(args: argparse.Namespace) -> Any:
    """The model of ``--model``, on ``--device`` in ``--dtype``."""
    from interp.models.loader import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def check_model_args(
    args: argparse.Namespace, *, heads: list[str] | None = None, option: str = "--heads"
) -> None:
    """``--model`` names something loadable, ``--device`` exists and the ``heads`` are the
    model's (from its config alone: :mod:`interp.cli.model_checks`), before any loading.

    Raises:
        InterpError: as :func:`interp.models.loader.check_model_name` and
            :func:`interp.models.placement.check_device`, or for a head out of range.
    """
    from interp.models.loader import check_model_name
    from interp.models.placement import check_device

    check_model_name(args.model)
    if getattr(args, "device", None) is not None:
        check_device(args.device)
    if heads is not None:
        from interp.cli.model_checks import check_heads_fit, model_spec_of

        check_heads_fit(model_spec_of(args.model), heads, option)


def heads_arg(text: str | None) -> list[str] | None:
    """``--heads L1H4,L0H7`` as labels, duplicates dropped with one warning line. Whether
    the model has each head is checked once it loads.

    Raises:
        InterpError: for an empty label, or one not of the form L<layer>H<head>.
    """
    if text is None:
        return None
    labels = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in labels):
        raise InterpError(
            f"--heads {text!r} holds an empty label; give labels like L1H4,L0H7 or drop the option"
        )
    bad = [t for t in labels if not _HEAD_LABEL.fullmatch(t)]
    if bad:
        raise InterpError(
            f"--heads label {bad[0]!r} is not of the form L<layer>H<head> (e.g. L1H4,L0H7)"
        )
    upper = [t.upper() for t in labels]
    unique = list(dict.fromkeys(upper))
    dupes = [t for t in unique if upper.count(t) > 1]
    if dupes:
        print(
            f"interp: warning: --heads names {', '.join(dupes)} more than once; each is used once",
            file=sys.stderr,
        )
    return unique


def positions_arg(text: str | None, option: str = "--positions") -> list[int] | None:
    """``--positions 3,-1`` (or ``--at``) as ints.

    Raises:
        InterpError: for anything but comma-separated integers (a float is refused).
    """
    if text is None:
        return None
    parts = text.split(",")
    if all(_INTEGER.fullmatch(t.strip()) for t in parts):
        return [int(t) for t in parts]
    floats = [t.strip() for t in parts if _FLOAT.fullmatch(t.strip())]
    extra = f" ({floats[0]!r} is a float; positions are whole numbers)" if floats else ""
    raise InterpError(
        f"{option} must be comma-separated integers (negative from the end), got {text!r}{extra}"
    )


def is_token_id(text: str) -> bool:
    """Whether a typed token is an id, by the API's rule (:func:`interp.core.checks.token_id`): a
    string of digits (spaces around them ignored) is an id; anything else (``"-1"``,
    ``"7.0"``, ``"t7"``) is text.

    Example:
        >>> [is_token_id(t) for t in ("7", " 7 ", "-1", "7.0", "Mary")]
        [True, True, False, False, False]
    """
    return text.strip().isdigit()


def pair_arg(text: str, option: str = "--logit-diff") -> tuple[str, str]:
    """``ANSWER,WRONG``, each part kept exactly as typed: digits only (spaces around them
    ignored: ``"5, 6"`` is the ids 5 and 6) is a token id, anything else is text that must
    be one token (``" Mary"`` is not ``"Mary"``).

    Raises:
        InterpError: for anything but two non-empty parts, or the same token twice.
    """
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise InterpError(f"{option} must be ANSWER,WRONG (each {TOKEN_RULE}), got {text!r}")
    ids = [int(p.strip()) if is_token_id(p) and p.isascii() else None for p in parts]
    texts = [None if is_token_id(p) else p for p in parts]
    if (ids[0] is not None and ids[0] == ids[1]) or (texts[0] is not None and texts[0] == texts[1]):
        raise InterpError(
            f"{option} {text!r} names the same token twice; the difference would always be 0"
        )
    return parts[0], parts[1]


def check_prompt(text: str | None, what: str) -> None:
    """Refuse an empty prompt.

    Raises:
        InterpError: for a prompt of only whitespace.
    """
    if text is not None and not text.strip():
        raise InterpError(
            f"empty {what}: give some text (or token ids for models without a tokenizer)"
        )


# ------------------------------------------------------------ tokenizer-only checks


# ------------------------------------------------------------------ token inputs

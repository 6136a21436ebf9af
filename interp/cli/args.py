"""Argument types and input readers shared by every ``interp`` command (no torch at import).

Every check here runs before a model loads: a bad option is one line on
stderr and exit 2. Readers that need the model (or only its tokenizer) take
it as an argument and say so.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from interp.errors import InterpError

DEFAULT_BATCH = 16
DEVICE_HELP = "device for the model: cpu (default), cuda, cuda:1, mps"
DTYPE_HELP = "model precision: float32 (default), bfloat16, float16, float64"
# The one rule for token ids, on the CLI as in the API (interp.checks.token_id).
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


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), like every other error."""

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


def load(args: argparse.Namespace) -> Any:
    """The model of ``--model``, on ``--device`` in ``--dtype``."""
    from interp.models.loader import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def check_model_args(args: argparse.Namespace) -> None:
    """``--model`` names something loadable and ``--device`` exists, before any loading.

    Raises:
        InterpError: as :func:`interp.models.loader.check_model_name` and
            :func:`interp.models.loader.check_device`.
    """
    from interp.models.loader import check_device, check_model_name

    check_model_name(args.model)
    if getattr(args, "device", None) is not None:
        check_device(args.device)


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
    """Whether a typed token is an id, by the API's rule (:func:`interp.checks.token_id`): a
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


def check_out(path: str) -> Path:
    """A table path checked before any work (:func:`interp.tables.check_export_path`)."""
    from interp.tables import check_export_path

    return check_export_path(path)


def check_svg(path: str | None) -> Path | None:
    """A ``--figure`` path (``.svg``) checked before any work; ``None`` when not asked for."""
    if path is None:
        return None
    p = Path(path)
    if p.suffix.lower() != ".svg":
        raise InterpError(f"--figure {path!r} must end in .svg")
    from interp.files import check_output_file

    return check_output_file(p, "--figure")


def check_distinct(outputs: dict[str, Path | None]) -> None:
    """Every output (``{option: path}``) its own file, a CSV table's sidecar included.

    Raises:
        InterpError: for two options that would write the same file.
    """
    from interp.tables import sidecar

    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        files = [path, sidecar(path)] if path.suffix.lower() == ".csv" else [path]
        for f in files:
            key = os.path.realpath(f)
            if key in seen:
                raise InterpError(
                    f"{option} {str(path)!r} and {seen[key]} would write the same file "
                    f"{str(f)!r}; give each output its own path"
                )
            seen[key] = f"{option} {str(path)!r}"


def write_outputs(writers: dict[Path, Callable[[Path], object]]) -> None:
    """Write every output of a command together, after all the work is done: each to a
    temporary sibling, then all moved into place at once (:func:`interp.files.write_files`),
    so Ctrl-C or a failure leaves every old file or every new one."""
    from interp.files import write_files

    write_files(writers)


def export_to(df: Any) -> Callable[[Path], object]:
    """A writer (for :func:`write_outputs`) exporting ``df`` as its path's format."""
    from interp import export

    return lambda path: export(df, path)


def text_to(text: str) -> Callable[[Path], object]:
    """A writer (for :func:`write_outputs`) of ``text``."""
    from interp.files import write_text

    return lambda path: write_text(path, text)


# ------------------------------------------------------------ tokenizer-only checks
def tokenizer_of(model_name: str) -> Any:
    """The tokenizer of a model name, loaded without its weights (``None`` if it has none).

    Raises:
        InterpError: as :func:`interp.models.loader.load_tokenizer`.
    """
    from interp.models.loader import load_tokenizer

    return load_tokenizer(model_name)


def token_id(tokenizer: Any, text: str, option: str = "--logit-diff") -> int:
    """A typed token as one id, by the one rule the API follows too
    (:func:`interp.checks.token_id`): digits only (spaces around them ignored) is an id,
    anything else is text that must encode to exactly one token (leading spaces count).

    Raises:
        InterpError: naming ``option``, for digits outside 0-9 or beyond any vocabulary,
            text without a tokenizer, or text that is not one token (the message lists
            the pieces).
    """
    from interp.checks import token_id as api_token_id

    if is_token_id(text):
        digits = text.strip()
        if not digits.isascii():
            raise InterpError(f"{option} {text!r}: write a token id with the digits 0-9")
        if int(digits) > LARGEST_ID:
            raise InterpError(f"{option} {text!r} is not a token id of any vocabulary")
    return api_token_id(text, tokenizer, name=option)


def answer_ids(
    tokenizer: Any, answer: str | None, wrong: str | None, options: tuple[str, str]
) -> tuple[int | None, int | None]:
    """``answer`` and ``wrong`` (either may be None) as ids, by :func:`token_id`.

    Raises:
        InterpError: as :func:`token_id`, or when both name the same token.
    """
    a = token_id(tokenizer, answer, options[0]) if answer is not None else None
    w = token_id(tokenizer, wrong, options[1]) if wrong is not None else None
    if a is not None and a == w:
        raise InterpError(
            f"{options[0]} {answer!r} and {options[1]} {wrong!r} are the same token (id {a}); "
            "the difference would always be 0"
        )
    return a, w


def encode(model_or_tokenizer: Any, text: str, what: str = "prompt") -> Any:
    """``[1, pos]`` ids of a prompt: through the tokenizer (with its BOS), or ids typed
    as numbers (digits only) for models without one.

    Raises:
        InterpError: for an empty prompt, or anything but ids for a model without a tokenizer.
    """
    import torch

    check_prompt(text, what)
    to_tokens = getattr(model_or_tokenizer, "to_tokens", None)
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    if to_tokens is not None and getattr(model_or_tokenizer, "tokenizer", None) is not None:
        return to_tokens(text)
    if tok is not None and hasattr(tok, "encode") and not hasattr(tok, "cfg"):
        from interp.models.loader import prompt_ids

        return prompt_ids(tok, text)
    pieces = text.split()
    bad = [t for t in pieces if not (t.isascii() and t.isdigit()) or int(t) > LARGEST_ID]
    if bad:
        raise InterpError(
            f"this model has no tokenizer: give the {what} as token ids separated by spaces "
            f"(digits only); {bad[0]!r} is not one"
        )
    return torch.tensor([[int(x) for x in pieces]])


def check_same_length(clean: Any, corrupted: Any, what: str = "prompt") -> None:
    """A clean prompt and its corrupted twin of one token count (ids from :func:`encode`).

    Raises:
        InterpError: for different lengths.
    """
    if clean.shape[-1] != corrupted.shape[-1]:
        raise InterpError(
            f"the clean {what} is {clean.shape[-1]} tokens and the corrupted one "
            f"{corrupted.shape[-1]}: they must have the same length, so that positions "
            "correspond (reword one of them)"
        )


def check_positions_fit(
    positions: list[int] | None, length: int, what: str = "prompt", option: str = "--positions"
) -> None:
    """Positions (of ``option``) inside a prompt of ``length`` tokens.

    Raises:
        InterpError: for a position out of range.
    """
    if positions is None:
        return
    bad = [p for p in positions if not -length <= p < length]
    if bad:
        raise InterpError(
            f"{option} {bad} out of range: the {what} has {length} tokens (0..{length - 1}, "
            f"or -{length}..-1 from the end)"
        )


# ------------------------------------------------------------------ token inputs
def add_inputs(p: argparse.ArgumentParser) -> None:
    """``--model``, one input (``--tokens``, ``--prompt``, ``--repeated``) and ``--batch``."""
    add_model(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--tokens", help="file of token ids: .npy, or .txt with one sequence a line")
    src.add_argument("--prompt", help="text (ids separated by spaces for models without tokenizer)")
    src.add_argument("--repeated", type=count_arg(2), help="N random tokens, repeated twice")
    p.add_argument(
        "--batch",
        type=count_arg(1),
        help=f"random probe sequences (default {DEFAULT_BATCH}; not with --prompt or --tokens)",
    )
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the probe and random draws")


def check_inputs(args: argparse.Namespace) -> Any:
    """Input options checked before any model loads; returns ``--tokens`` read (or None).

    Raises:
        InterpError: for an empty prompt, ``--batch`` beside an input it cannot
            change, or a bad token file.
    """
    check_prompt(getattr(args, "prompt", None), "prompt")
    if args.batch is not None and (args.prompt is not None or args.tokens):
        given = "--prompt" if args.prompt is not None else "--tokens"
        raise InterpError(
            f"--batch sets how many random probe sequences to draw; {given} gives its own "
            "sequences, so drop --batch (or use --repeated N --batch B)"
        )
    return tokens_from_file(args.tokens) if args.tokens else None


def tokens_from_file(path: str) -> Any:
    """``[batch, pos]`` ids from a .npy integer array or a .txt file of id lines.

    Raises:
        InterpError: for a missing file, float / bool / object arrays, a wrong
            rank, an empty array, non-integer text, or lines of different lengths.
    """
    import numpy as np
    import torch

    p = Path(path)
    if not p.is_file():
        raise InterpError(f"--tokens file {path!r} not found")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except ValueError as exc:
            if "allow_pickle" in str(exc) or "object" in str(exc).lower():
                raise InterpError(
                    f"{path!r} holds Python objects, not token ids; save an integer array "
                    "(np.save(path, ids.astype(np.int64)))"
                ) from None
            raise InterpError(f"cannot read {path!r} as a .npy array: {exc}") from None
        except (OSError, EOFError) as exc:
            raise InterpError(f"cannot read {path!r} as a .npy array: {exc}") from None
        if arr.dtype.kind == "b":
            raise InterpError(f"{path!r} holds booleans, not token ids")
        if arr.dtype.kind not in "iu":
            raise InterpError(
                f"{path!r} holds {arr.dtype} values, not integer token ids; convert them "
                "explicitly (ids would otherwise be silently truncated)"
            )
        if arr.ndim not in (1, 2):
            raise InterpError(
                f"{path!r} has shape {arr.shape}; token ids are [batch, pos] or [pos]"
            )
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > LARGEST_ID:
            raise InterpError(
                f"{path!r} holds the id {int(arr.max())}, beyond any vocabulary (and int64)"
            )
        if arr.size == 0:
            raise InterpError(
                f"{path!r} holds no token ids (shape {arr.shape}); save at least one sequence"
            )
        return torch.as_tensor(arr.astype(np.int64)).reshape(-1, arr.shape[-1])
    rows = [line.split() for line in p.read_text().splitlines() if line.strip()]
    if not rows:
        raise InterpError(f"{path!r} holds no token ids")
    if len({len(r) for r in rows}) > 1:
        raise InterpError(f"sequences in {path!r} have different lengths; pad or split them")
    bad = [x for r in rows for x in r if not (x.isascii() and x.isdigit()) or int(x) > LARGEST_ID]
    if bad:
        raise InterpError(
            f"{path!r} must hold integer token ids separated by spaces (digits only); "
            f"{bad[0]!r} is not one"
        )
    return torch.tensor([[int(x) for x in r] for r in rows])


def inputs(model: Any, args: argparse.Namespace, given: Any) -> tuple[Any, Any]:
    """``(tokens, loss_mask)``: ``given`` (``--tokens``) or the prompt or random probes;
    the repeated probes' mask selects the repeated half. The probes' memory is
    checked against the machine before they are drawn.

    Raises:
        InterpError: for probes that cannot fit in memory.
    """
    from interp.analysis.heads.scores import probe_tokens
    from interp.analysis.senses.words import ordinary_word_ids
    from interp.datasets import repeated_random_tokens
    from interp.memory import check_memory
    from interp.protocol import bos_token_id

    if given is not None:
        return given, None
    if args.prompt is not None:
        return encode(model, args.prompt), None
    batch = DEFAULT_BATCH if args.batch is None else args.batch
    if args.repeated is None:
        tokens = probe_tokens(model, n=batch, seed=args.seed)  # checks its memory first
        half = (tokens.shape[1] - 1) // 2
    else:
        check_memory(model, batch, 1 + 2 * args.repeated, what="--batch probes of")
        ids = ordinary_word_ids(model) if getattr(model, "tokenizer", None) is not None else None
        data = repeated_random_tokens(
            batch,
            args.repeated,
            d_vocab=int(model.cfg.d_vocab),
            bos=bos_token_id(model),
            seed=args.seed,
            token_ids=ids,
        )
        tokens, half = data.tokens, args.repeated
    mask = tokens.new_zeros(tokens.shape, dtype=bool)
    mask[:, half + 1 : -1] = True  # predicting the repeated half's predictable tokens
    return tokens, mask


def print_top(df: Any, column: str, top: int) -> None:
    """The ``top`` rows by ``|column|``."""
    if top:
        show = df.reindex(df[column].abs().sort_values(ascending=False).index).head(top)
        print(show.to_string(index=False, float_format=lambda v: f"{v:.4f}"))

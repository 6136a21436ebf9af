"""Argument types and input readers shared by every ``interp`` command (no torch at import).

Every check here runs before a model loads: a bad option is one line on
stderr and exit 2. Readers that need the model (or only its tokenizer) take
it as an argument and say so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from interp.errors import InterpError

DEFAULT_BATCH = 16
DEVICE_HELP = "device for the model: cpu (default), cuda, cuda:1, mps"
DTYPE_HELP = "model precision: float32 (default), bfloat16, float16, float64"


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
    """An integer option of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
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
    """``--heads L1H4,L0H7`` as labels, duplicates dropped with one warning line.

    Raises:
        InterpError: for an empty label.
    """
    if text is None:
        return None
    labels = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in labels):
        raise InterpError(
            f"--heads {text!r} holds an empty label; give labels like L1H4,L0H7 or drop the option"
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
        InterpError: for anything but comma-separated integers.
    """
    if text is None:
        return None
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise InterpError(
            f"{option} must be comma-separated integers (negative from the end), got {text!r}"
        ) from None


def pair_arg(text: str, option: str = "--logit-diff") -> tuple[str, str]:
    """``ANSWER,WRONG``: ids, or tokens kept as typed (" Mary" is not "Mary").

    Raises:
        InterpError: for anything but two non-empty parts, or the same token twice.
    """
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise InterpError(f"{option} must be ANSWER,WRONG, got {text!r}")
    same = [int(p) for p in parts] if all(p.strip().isdigit() for p in parts) else parts
    if same[0] == same[1]:
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


# ------------------------------------------------------------ tokenizer-only checks
def tokenizer_of(model_name: str) -> Any:
    """The tokenizer of a model name, loaded without its weights (``None`` if it has none).

    Raises:
        InterpError: as :func:`interp.models.loader.load_tokenizer`.
    """
    from interp.models.loader import load_tokenizer

    return load_tokenizer(model_name)


def token_id(tokenizer: Any, text: str) -> int:
    """A ``--logit-diff`` part as one token id: digits are ids, anything else is encoded.

    Raises:
        InterpError: for text without a tokenizer, or text that is not one token
            (the message lists the pieces).
    """
    if text.strip().lstrip("-").isdigit():
        return int(text)
    if tokenizer is None:
        raise InterpError(f"{text!r} is not a token id, and this model has no tokenizer")
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise InterpError(
            f"{text!r} is {len(ids)} tokens for this tokenizer ({pieces}); give one token "
            "(or its id)"
        )
    return int(ids[0])


def encode(model_or_tokenizer: Any, text: str) -> Any:
    """``[1, pos]`` ids of a prompt: through the tokenizer (with its BOS), or ids typed
    as numbers for models without one.

    Raises:
        InterpError: for an empty prompt, or words for a model without a tokenizer.
    """
    import torch

    check_prompt(text, "prompt")
    to_tokens = getattr(model_or_tokenizer, "to_tokens", None)
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    if to_tokens is not None and getattr(model_or_tokenizer, "tokenizer", None) is not None:
        return to_tokens(text)
    if tok is not None and hasattr(tok, "encode") and not hasattr(tok, "cfg"):
        from interp.models.loader import prompt_ids

        return prompt_ids(tok, text)
    try:
        return torch.tensor([[int(x) for x in text.split()]])
    except ValueError:
        raise InterpError(
            "this model has no tokenizer: give the prompt as token ids separated by spaces"
        ) from None


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
    try:
        return torch.tensor([[int(x) for x in r] for r in rows])
    except ValueError:
        raise InterpError(f"{path!r} must hold integer token ids separated by spaces") from None


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

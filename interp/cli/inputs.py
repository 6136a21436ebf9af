"""What every ``interp`` command reads: prompts, token files, answer tokens, the probe batch.

Readers that need the model (or only its tokenizer) take it as an argument and
say so; everything else is checked before a model loads.

Example:
    >>> encode(None, "0 5 6").tolist()
    [[0, 5, 6]]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from interp.cli.args import (
    DEFAULT_BATCH,
    LARGEST_ID,
    add_model,
    check_prompt,
    count_arg,
    is_token_id,
    seed_arg,
)
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, bos_token_id, model_device


def tokenizer_of(model_name: str) -> Any:
    """The tokenizer of a model name, loaded without its weights (``None`` if it has none).

    Raises:
        InterpError: as :func:`interp.models.loader.load_tokenizer`.
    """
    from interp.models.loader import load_tokenizer

    return load_tokenizer(model_name)


def token_id(tokenizer: Any, text: str, option: str = "--logit-diff") -> int:
    """A typed token as one id, by the one rule the API follows too
    (:func:`interp.core.checks.token_id`): digits only (spaces around them ignored) is an id,
    anything else is text that must encode to exactly one token (leading spaces count).

    Raises:
        InterpError: naming ``option``, for digits outside 0-9 or beyond any vocabulary,
            text without a tokenizer, or text that is not one token (the message lists
            the pieces).
    """
    from interp.core.checks import token_id as api_token_id

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


def inputs(model: HookedModel, args: argparse.Namespace, given: Any) -> tuple[Any, Any]:
    """``(tokens, loss_mask)``: ``given`` (``--tokens``) or the prompt or random probes;
    the repeated probes' mask selects the repeated half. The probes' ids are checked
    against the machine's memory before they are drawn (the analyses run them in chunks).

    Raises:
        InterpError: for probes whose ids cannot fit in memory.
    """
    from interp.analysis.heads.scores import probe_tokens
    from interp.analysis.senses.words import ordinary_word_ids
    from interp.core.memory import check_ids
    from interp.datasets import repeated_random_tokens

    if given is not None:
        return given, None
    if args.prompt is not None:
        return encode(model, args.prompt), None
    batch = DEFAULT_BATCH if args.batch is None else args.batch
    if args.repeated is None:
        tokens = probe_tokens(model, n=batch, seed=args.seed)  # checks its memory first
        half = (tokens.shape[1] - 1) // 2
    else:
        check_ids(model_device(model), batch, 1 + 2 * args.repeated, what="--batch probes",
                  fix="use fewer or shorter probes (a smaller --batch or --repeated)")  # fmt: skip
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

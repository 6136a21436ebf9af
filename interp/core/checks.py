"""The input checks every analysis runs before its first forward pass.

A bad call fails at once with an :class:`~interp.core.errors.InterpError` that says
what is wrong and how to fix it, never with a traceback from inside torch or a
silently wrong number. These checks need at most the model's config and
device; nothing here runs the model.

Vocabulary (the same meaning in every function):

* ``tokens``: ``[batch, pos]`` integer ids (a ``[pos]`` tensor is one sequence).
* ``heads``: an iterable of ``(layer, head)`` pairs or ``"L1H4"`` labels.
* ``positions``: where an intervention applies: ints (negative counts from
  the end) or a ``[pos]`` bool mask; ``None`` means every position.
* ``loss_mask``: ``[batch, pos]`` bool (``[pos]`` for one sequence), which
  positions count in a loss or score.

Heads are checked in :mod:`interp.core.head_checks`; the scalar validators (integers,
booleans, numbers, seeds, positions) live below this module, in :mod:`interp.core.validate`,
and are re-exported here.

Example:
    >>> position_mask(6, [0, -1]).tolist()
    [True, False, False, False, False, True]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from interp.core.errors import InterpError
from interp.core.memory import check_forward, check_ids
from interp.core.protocol import HookedModel, model_device, model_n_ctx
from interp.core.validate import (  # noqa: F401 - the scalar validators, re-exported
    check_bool,
    check_finite,
    check_int,
    check_seed,
    position_index,
    position_mask,
    warn_duplicates,
)

if TYPE_CHECKING:  # pragma: no cover - typing only; torch loads lazily
    import torch


def check_tokens(
    model: HookedModel,
    tokens: Any,
    *,
    min_len: int = 1,
    name: str = "tokens",
    chunked: bool = False,
) -> torch.Tensor:
    """Validate ``tokens`` for ``model`` and return a ``[batch, pos]`` long tensor.

    ``chunked``: the caller runs the prompts in chunks it plans under the memory budget
    (:func:`interp.engine.chunks.plan`, which refuses a chunk that cannot fit), so only the
    ids themselves must fit (:func:`interp.core.memory.check_ids`); otherwise the whole batch's
    forward pass must (:func:`interp.core.memory.check_forward`).

    Raises:
        InterpError: for a non-tensor, tokens on the meta device, wrong rank or
            dtype, an empty batch, a sequence shorter than ``min_len`` or longer
            than ``n_ctx``, ids too many to hold, a batch whose forward pass cannot fit
            in memory (unless ``chunked``), or ids outside the vocabulary.
    """
    import torch

    if not isinstance(tokens, torch.Tensor):
        raise InterpError(
            f"{name} must be a [batch, pos] tensor of ids, got {type(tokens).__name__}; "
            "use model.to_tokens(...) for text or words"
        )
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise InterpError(f"{name} must be integer ids, got dtype {tokens.dtype}")
    if tokens.device.type == "meta":
        raise InterpError(
            f"{name} are on the meta device, which holds shapes but no values; create them on "
            "a real device (e.g. torch.tensor(ids) or model.to_tokens(text))"
        )
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2:
        raise InterpError(f"{name} must be [batch, pos], got shape {tuple(tokens.shape)}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise InterpError(
            f"empty batch: {name} have shape {tuple(tokens.shape)}; pass at least one token"
        )
    if tokens.shape[1] < min_len:
        raise InterpError(f"sequences need at least {min_len} tokens, got {tokens.shape[1]}")
    n_ctx = model_n_ctx(model)
    if n_ctx is not None and tokens.shape[1] > n_ctx:
        raise InterpError(
            f"sequence length {tokens.shape[1]} exceeds the model's context n_ctx={n_ctx}; "
            "shorten or split the input"
        )
    batch, pos = tokens.shape
    device = model_device(model)  # looked up once: the ids and the pass must fit there
    check_ids(device, batch, pos, what=name)
    if not chunked:
        check_forward(device, model, batch, pos, what=f"{name} of shape")
    d_vocab = getattr(model.cfg, "d_vocab", None)
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or (d_vocab is not None and hi >= d_vocab):
        raise InterpError(
            f"token id {lo if lo < 0 else hi} is outside the vocabulary [0, {d_vocab}); "
            "check the tokenizer or d_vocab"
        )
    return tokens.long().to(device)


def check_token_pair(
    model: HookedModel, clean: Any, corrupted: Any, *, chunked: bool = False, min_len: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean and corrupted tokens, checked and of one shape (compared position by position);
    ``chunked`` and ``min_len`` as :func:`check_tokens`.

    Raises:
        InterpError: for bad tokens, shapes that differ, or corrupted tokens equal to
            the clean ones (every activation is the same in both runs: nothing to patch).
    """
    clean, checked = check_prompts(
        model, clean, corrupted, pair=True, chunked=chunked, min_len=min_len
    )
    return clean, cast("torch.Tensor", checked)


def check_prompts(
    model: HookedModel,
    tokens: Any,
    corrupted: Any = None,
    *,
    pair: bool,
    chunked: bool = False,
    min_len: int = 1,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prompts of an analysis, checked: for a patch (``pair``) the clean and corrupted
    tokens, each as :func:`check_tokens` checks it (``"clean tokens"``, then ``"corrupted
    tokens"``), of one shape and not equal (:func:`check_token_pair`); else ``tokens`` alone
    (``"tokens"``).

    Args:
        model: The hooked model.
        tokens: The (clean) prompts.
        corrupted: The corrupted prompts of a patch (read only with ``pair``).
        pair: Whether the prompts are a patch's pair.
        chunked: As :func:`check_tokens`.
        min_len: As :func:`check_tokens`.

    Returns:
        ``(tokens, corrupted)``; ``corrupted`` is None unless ``pair``.

    Raises:
        InterpError: as :func:`check_tokens` and :func:`check_token_pair`.
    """
    import torch

    given = (
        [(tokens, "clean tokens"), (corrupted, "corrupted tokens")]
        if pair
        else [(tokens, "tokens")]
    )
    checked = [
        check_tokens(model, t, name=name, chunked=chunked, min_len=min_len) for t, name in given
    ]
    if not pair:
        return checked[0], None
    clean, corrupted = checked
    if clean.shape != corrupted.shape:
        raise InterpError(
            f"clean tokens {tuple(clean.shape)} and corrupted tokens "
            f"{tuple(corrupted.shape)} must have the same shape (same length prompts)"
        )
    if torch.equal(clean, corrupted):
        raise InterpError(
            "corrupted tokens are the clean tokens: every activation is the same in both runs, "
            "so there is nothing to patch; pass prompts that change the answer"
        )
    return clean, corrupted


def check_mask(
    mask: Any, tokens: torch.Tensor, name: str = "loss_mask", *, drop_last: bool = False
) -> torch.Tensor:
    """``mask`` as a ``[batch, pos]`` bool tensor on the tokens' device.

    ``drop_last`` is for loss masks: the last position predicts nothing, so a
    mask that selects only it selects nothing.

    Raises:
        InterpError: for a non-tensor, a non-bool dtype, a shape other than the
            tokens', or a mask that selects nothing.
    """
    import torch

    if not isinstance(mask, torch.Tensor):
        raise InterpError(f"{name} must be a [batch, pos] bool tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise InterpError(f"{name} must be a bool tensor, got dtype {mask.dtype}")
    if mask.ndim == 1 and tokens.shape[0] == 1:
        mask = mask[None]
    if tuple(mask.shape) != tuple(tokens.shape):
        raise InterpError(
            f"{name} has shape {tuple(mask.shape)} but tokens are {tuple(tokens.shape)}"
        )
    selected = mask[:, :-1] if drop_last else mask
    if not bool(selected.any()):
        raise InterpError(
            f"{name} selects no position" + (" that predicts a next token" if drop_last else "")
        )
    return mask.to(tokens.device)


def token_id(value: Any, tokenizer: Any, *, name: str = "token") -> int:
    """One token id, by the one rule of the API and the CLI: an int, or a string of ASCII
    digits (spaces around them ignored), is a token id; any other string is text that must be
    exactly one token of ``tokenizer`` (leading spaces count: ``" Mary"`` is not ``"Mary"``).

    Example:
        >>> token_id(7, None), token_id("7", None), token_id(" 12 ", None)
        (7, 7, 12)

    Raises:
        InterpError: for a negative or non-integer id, text without a tokenizer, or text
            that is not one token (its pieces are named).
    """
    if isinstance(value, str):
        digits = value.strip()
        if digits.isascii() and digits.isdigit():
            return int(digits)
        if tokenizer is None:
            raise InterpError(
                f"{name} {value!r} is text (not a token id), and this model has no tokenizer; "
                "give its id"
            )
        ids = tokenizer.encode(value, add_special_tokens=False)
        if len(ids) != 1:
            pieces = [tokenizer.decode([i]) for i in ids]
            raise InterpError(
                f"{name} {value!r} is {len(ids)} tokens for this tokenizer {pieces}; give a string "
                "that is one token (a leading space often matters, e.g. ' Mary') or its id"
            )
        return int(ids[0])
    return check_int(value, name, minimum=0)


def check_not_padding(
    model: HookedModel, tokens: torch.Tensor, read: Sequence[int], name: str, *, first: int = 0
) -> None:
    """Refuse reading a position that is right padding: a run of the tokenizer's pad token
    at the end of a sequence (no attention mask is passed to the model, so what it
    predicts there is the padding's, not the prompt's). When the pad token is also the
    end-of-text token, one such token at the end may be content: that is warned about,
    two or more are refused.

    ``first`` is the index of ``tokens``' first sequence in the caller's batch (for the
    message).

    Raises:
        InterpError: naming the sequence, the position and the fix.
    """
    tok = getattr(model, "tokenizer", None)
    pad = getattr(tok, "pad_token_id", None) if tok is not None else None
    if pad is None:
        return
    shared = pad in (getattr(tok, "eos_token_id", None), getattr(tok, "bos_token_id", None))
    n = tokens.shape[1]
    is_pad = (tokens == int(pad)).cpu()
    for row in range(tokens.shape[0]):
        run = 0
        while run < n and bool(is_pad[row, n - 1 - run]):
            run += 1
        hit = [p % n for p in read if p % n >= n - run]
        if not 0 < run < n or not hit:
            continue
        message = (
            f"sequence {first + row} is right-padded: {name} reads position {hit[0]}, which "
            f"holds the pad token ({pad}); pad on the left (tokenizer.padding_side = 'left') or "
            "give prompts of one length"
        )
        if shared and run == 1:
            warnings.warn(message + " (it is also the end-of-text token: ignore this if it is "
                          "the prompt's own)", UserWarning, stacklevel=3)  # fmt: skip
            continue
        raise InterpError(message)

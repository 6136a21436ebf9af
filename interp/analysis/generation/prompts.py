"""What a generation continues: prompts as one left-padded batch of token ids.

A ``prompt`` is text (a string, through the model's tokenizer, which adds its
beginning-of-sequence token as ``model.to_tokens`` does), a list of texts, a
``[batch, pos]`` (or ``[pos]``) tensor of ids, or a list of id sequences of any
lengths. Prompts of different lengths are padded on the left, as Hugging Face's
``generate`` wants them, so every prompt's last token is in the same column and
the new tokens are appended to every row at once; the mask says which columns
are real (:class:`Prompts`). No query attends to padding, and a token's position
counts only the real tokens before it, so a padded prompt continues exactly as it
would alone (to float rounding).

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> p = prompts_of(load_model("induction-2l"), [[0, 5, 6], [0, 7]])
    >>> p.tokens.tolist(), p.mask.tolist()
    ([[0, 5, 6], [0, 0, 7]], [[True, True, True], [False, True, True]])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, model_device

# What ``generate`` continues (module docstring).
Prompt = str | Sequence[str] | torch.Tensor | Sequence[Sequence[int]]


@dataclasses.dataclass(frozen=True)
class Prompts:
    """A left-padded batch: ``tokens`` ``[batch, pos]``, ``mask`` ``[batch, pos]`` (True: real)."""

    tokens: torch.Tensor
    mask: torch.Tensor

    @property
    def batch(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        """Columns (the longest prompt's tokens)."""
        return int(self.tokens.shape[1])

    @property
    def pads(self) -> torch.Tensor:
        """``[batch]`` padding columns before each prompt."""
        return (~self.mask).sum(-1)

    @property
    def padded(self) -> bool:
        return not bool(self.mask.all())

    def rows(self, rows: slice) -> Prompts:
        """The prompts ``rows`` (a chunk), in the same columns."""
        return Prompts(self.tokens[rows], self.mask[rows])


def pad_id(model: HookedModel) -> int:
    """The id that fills padding and the places after a prompt's stop token: the tokenizer's
    pad token, else its end-of-sequence token (Hugging Face's rule), else 0."""
    tok = getattr(model, "tokenizer", None)
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, attr, None) if tok is not None else None
        if isinstance(value, int):
            return value
    return 0


def prompts_of(model: HookedModel, prompt: Prompt, *, name: str = "prompt") -> Prompts:
    """``prompt`` (module docstring) as a left-padded batch on the model's device.

    Raises:
        InterpError: for an empty prompt or batch, text for a model without a tokenizer,
            ids that are not integers in the vocabulary, or a prompt longer than the
            model's context.
    """
    if isinstance(prompt, str):
        prompt = [prompt]
    if isinstance(prompt, torch.Tensor):
        tokens = check_tokens(model, prompt, name=name, chunked=True)
        return Prompts(tokens, torch.ones_like(tokens, dtype=torch.bool))
    if not isinstance(prompt, Sequence) or isinstance(prompt, bytes):
        raise InterpError(
            f"{name} must be text, a list of texts, a [batch, pos] tensor of ids or a list of "
            f"id lists, got {type(prompt).__name__}"
        )
    if len(prompt) == 0:
        raise InterpError(f"empty {name} batch: pass at least one prompt")
    rows = [_ids(model, p, name) for p in prompt]
    width = max(len(r) for r in rows)
    pad = pad_id(model)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            tokens[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = True
    tokens = check_tokens(model, tokens, name=name, chunked=True)
    return Prompts(tokens, mask.to(model_device(model)))


def _ids(model: HookedModel, item: Any, name: str) -> list[int]:
    if isinstance(item, str):
        if not item.strip():
            raise InterpError(f"empty {name}: give some text")
        if getattr(model, "tokenizer", None) is None and getattr(model.cfg, "vocab", None) is None:
            raise InterpError(
                f"this model has no tokenizer, so a text {name} cannot be read; pass token ids "
                "(a [batch, pos] tensor or lists of ints)"
            )
        return [int(t) for t in model.to_tokens(item).reshape(-1).tolist()]
    if isinstance(item, torch.Tensor):
        if item.ndim != 1:
            raise InterpError(
                f"each {name} in a list must be one sequence, got {tuple(item.shape)}"
            )
        item = item.tolist()
    if not isinstance(item, Sequence) or isinstance(item, bytes):
        raise InterpError(f"each {name} must be text or a sequence of token ids, got {item!r}")
    if len(item) == 0:
        raise InterpError(f"empty {name}: a prompt needs at least one token")
    return [check_int(t, f"each {name} token id") for t in item]

"""Rows and copies of a pass: the batch a pass carries and the logit rows it unembeds.

A pass that carries ``k`` copies of its prompts repeats its input along the batch
(:func:`repeat_copies`); a pass that unembeds only the positions a metric reads returns those
rows, put back at their places (:func:`scatter_rows`, :func:`kept_rows`); a layer of a model
split over devices computes where its weights are (:func:`module_device`). Every runtime kind
uses them (:mod:`interp.runtime.base`).

Example:
    >>> import torch
    >>> kept_rows([-1, 0, -1], 5)
    [0, 4]
    >>> repeat_copies(torch.zeros(2, 3), 2).shape
    torch.Size([4, 3])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["kept_rows", "module_device", "repeat_copies", "scatter_rows"]


def module_device(module: Any, fallback: Any = None) -> torch.device:
    """The device of ``module``'s first parameter (of ``fallback``'s, or the CPU, when it has
    none): where a layer of a model split over devices computes."""
    for m in (module, fallback):
        for p in m.parameters() if hasattr(m, "parameters") else ():
            return p.device
    return torch.device("cpu")


def repeat_copies(x: Any, k: int) -> Any:
    """``x`` (a tensor, or a tuple of them, as blocks return) repeated ``k`` times along the
    batch: the input of a pass that carries ``k`` copies; anything else is passed through."""
    if k == 1:
        return x
    if isinstance(x, torch.Tensor):
        return x.repeat(k, *([1] * (x.ndim - 1)))
    if isinstance(x, tuple):
        return tuple(repeat_copies(v, k) for v in x)
    return x


def kept_rows(rows: Sequence[int] | None, n: int) -> list[int] | None:
    """``rows`` (positions, negative from the end) as sorted distinct indices into ``n``."""
    return None if rows is None else sorted({int(r) % n for r in rows})


def scatter_rows(logits: torch.Tensor, rows: Sequence[int] | None, n: int) -> torch.Tensor:
    """Logits of only some positions (``logits_to_keep``) back at those positions of a
    ``[batch, n, d_vocab]`` tensor whose other rows are 0; full logits pass through.

    One row (a metric that reads one position, as most do) comes back as a view that repeats
    it at every position, so no ``[batch, n, d_vocab]`` tensor is made: the other rows are
    then that row's copy, not 0 (a metric that declares its rows reads no other)."""
    if rows is None or logits.shape[1] == n:
        return logits
    if logits.shape[1] == 1:
        return logits.expand(logits.shape[0], n, logits.shape[-1])
    keep = torch.tensor(kept_rows(rows, n), device=logits.device)
    full = logits.new_zeros(logits.shape[0], n, logits.shape[-1])
    full[:, keep] = logits
    return full

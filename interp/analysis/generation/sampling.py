"""Choosing the next token: greedy, or sampled with temperature, top-k and top-p, by seed.

At ``temperature=0`` the next token is the argmax of the logits (ties go to the
lowest id, as ``torch.argmax`` and Hugging Face's greedy search break them).
Otherwise the logits are divided by the temperature, cut to the ``top_k``
largest, then to the smallest set whose probability reaches ``top_p`` (Hugging
Face's order and rules: ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper``; the most likely token always stays), and a token is drawn
by inverting the cumulative distribution at a uniform number.

The uniform numbers are drawn before generation starts, one stream per prompt
(:func:`uniforms`: NumPy's generator seeded with ``(seed, prompt index)``), so a
prompt's tokens depend on the seed and the prompt alone: not on the batch it
shares, the chunks the batch is split into, or whether a key/value cache is
used. Deterministic by seed; not the same draws as Hugging Face's (which read
torch's global generator).

Example:
    >>> import torch
    >>> rule = check_sampling(0.0, None, None, d_vocab=3)
    >>> choose(torch.tensor([[0.1, 2.0, -1.0]]), rule, torch.tensor([0.5])).tolist()
    [1]
    >>> rule = check_sampling(1.0, 1, None, d_vocab=3)  # top_k=1 is greedy too
    >>> choose(torch.tensor([[0.1, 2.0, -1.0]]), rule, torch.tensor([0.99])).tolist()
    [1]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is chosen (module docstring); ``temperature == 0`` is greedy."""

    temperature: float
    top_k: int | None
    top_p: float | None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"temperature {self.temperature:g}"]
        parts += [f"top_k {self.top_k}"] if self.top_k is not None else []
        parts += [f"top_p {self.top_p:g}"] if self.top_p is not None else []
        return "sampled: " + ", ".join(parts)


def check_sampling(temperature: Any, top_k: Any, top_p: Any, *, d_vocab: int) -> Sampling:
    """The sampling rule, checked.

    Raises:
        InterpError: for a temperature that is negative, NaN, infinite or not a number, a
            ``top_k`` that is not an integer in ``[1, d_vocab]``, or a ``top_p`` outside
            ``(0, 1]``.
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise InterpError(f"temperature must be a number >= 0, got {temperature!r}")
    t = float(temperature)
    if not math.isfinite(t) or t < 0:
        raise InterpError(
            f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}"
        )
    k = None
    if top_k is not None:
        k = check_int(top_k, "top_k", minimum=1)
        if k > d_vocab:
            raise InterpError(f"top_k {k} is more than the vocabulary's {d_vocab} tokens")
    p = None
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise InterpError(f"top_p must be a number in (0, 1], got {top_p!r}")
        p = float(top_p)
        if not 0 < p <= 1:  # NaN fails too
            raise InterpError(
                f"top_p must be in (0, 1] (the probability mass kept; 1 keeps every token), "
                f"got {top_p!r}"
            )
    if t == 0 and (k is not None or p is not None):
        raise InterpError(
            "top_k and top_p shape sampling, but temperature=0 is greedy; pass a temperature "
            "> 0 to sample, or drop top_k / top_p"
        )
    return Sampling(t, k, p)


def uniforms(seed: int, rows: Sequence[int], n: int) -> torch.Tensor:
    """``[len(rows), n]`` float64 uniform numbers in [0, 1): prompt ``rows[i]``'s own stream."""
    out = [np.random.default_rng([int(seed), int(r)]).random(n) for r in rows]
    return torch.tensor(np.stack(out) if out else np.zeros((0, n)), dtype=torch.float64)


def choose(logits: torch.Tensor, rule: Sampling, u: torch.Tensor) -> torch.Tensor:
    """``[batch]`` next-token ids from ``logits`` ``[batch, d_vocab]`` by ``rule``, with the
    uniform numbers ``u`` ``[batch]`` (unused when greedy)."""
    if rule.greedy:
        return logits.argmax(-1)
    z = logits.double() / rule.temperature
    if rule.top_k is not None and rule.top_k < z.shape[-1]:
        kth = torch.topk(z, rule.top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if rule.top_p is not None and rule.top_p < 1:
        ordered, order = torch.sort(z, dim=-1)  # ascending, as Hugging Face's warper
        cum = ordered.softmax(-1).cumsum(-1)
        drop = cum <= 1 - rule.top_p
        drop[:, -1] = False  # the most likely token always stays
        z = z.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    cdf = z.softmax(-1).cumsum(-1)  # [batch, d_vocab]
    target = (u.to(cdf.device, torch.float64) * cdf[:, -1])[:, None]
    picked = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return picked.clamp(max=z.shape[-1] - 1)

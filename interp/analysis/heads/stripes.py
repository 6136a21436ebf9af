"""Stripes and conventions: which keys a head should attend to, and how that becomes a score.

A *stripe* is the set of keys each query should attend to for a head type,
defined by the tokens themselves: previous-token (key ``q - 1``),
duplicate-token (earlier keys holding the query's token), induction (keys whose
previous token is the query's token). A *convention* turns the attention on a
stripe into one number per head: ``"interp"``, ``"transformer_lens"``
(TransformerLens's ``detect_head``) or ``"arena"`` (ARENA's fixed diagonals);
:mod:`interp.analysis.heads.scores` documents them and runs them.

Example:
    >>> stripe_mask(torch.tensor([[0, 5, 6, 5, 6]]), "induction")[0].nonzero().tolist()
    [[3, 2], [4, 3]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from interp.core.checks import check_mask
from interp.core.errors import InterpError
from interp.core.shapes import Mask, Tokens

Stripe = Literal["induction", "previous_token", "duplicate_token"]
STRIPES: tuple[Stripe, ...] = ("induction", "previous_token", "duplicate_token")
Convention = Literal["interp", "transformer_lens", "arena"]
CONVENTIONS: tuple[str, ...] = ("interp", "transformer_lens", "arena")


def stripe_mask(
    tokens: Tokens, stripe: Stripe, *, exclude_bos: bool = True, causal: bool = True
) -> torch.Tensor:
    """``[batch, query_pos, key_pos]`` bool: the keys each query should attend to for ``stripe``.

    previous-token: key ``q - 1``; duplicate-token: keys ``k < q`` holding the query's token;
    induction: keys ``k <= q`` whose previous token is the query's token. ``causal=False``
    gives the bidirectional stripes (:mod:`interp.analysis.heads.scores`).

    Args:
        tokens: ``[batch, pos]`` integer ids: the stripes come from the ids alone.
        stripe: One of ``'induction'``, ``'previous_token'``, ``'duplicate_token'``.
        exclude_bos: Leave key 0 out of every stripe (default ``True``).
        causal: ``True`` (default) for the causal stripes, ``False`` for the bidirectional ones.

    Returns:
        ``[batch, query_pos, key_pos]`` bool: ``True`` where a query's stripe holds the key.

    Raises:
        InterpError: for an unknown stripe.
    """
    b, n = tokens.shape
    q = torch.arange(n, device=tokens.device)[:, None]
    k = torch.arange(n, device=tokens.device)[None, :]
    if stripe == "previous_token":
        mask = (k == q - 1)[None].expand(b, n, n).clone()
    elif stripe == "duplicate_token":
        allowed = (k < q) if causal else (k != q)
        mask = (tokens[:, :, None] == tokens[:, None, :]) & allowed[None]
    elif stripe == "induction":
        prev = torch.full_like(tokens, -1)
        prev[:, 1:] = tokens[:, :-1]  # prev[b, k] = token before key k
        allowed = (k <= q) if causal else (k != q + 1)
        mask = (tokens[:, :, None] == prev[:, None, :]) & allowed[None] & (k >= 1)[None]
    else:
        raise InterpError(f"unknown stripe {stripe!r}; choose one of {', '.join(STRIPES)}")
    if exclude_bos:
        mask[:, :, 0] = False
    return mask


Reducer = Callable[[torch.Tensor], torch.Tensor]  # pattern [batch, head, q, k] -> [head]


def interp_reducer(mask: torch.Tensor, valid: torch.Tensor) -> Reducer:
    w = valid.float()

    def reduce(pattern: torch.Tensor) -> torch.Tensor:
        mass = torch.einsum("bhqk,bqk->bhq", pattern.float(), mask.float())
        return (mass * w[:, None]).sum((0, 2)) / w.sum()

    return reduce


def tl_reducer(
    detection: torch.Tensor, exclude_bos: bool, exclude_current: bool, measure: str
) -> Reducer:
    D = detection.float()  # [batch, q, k], 0/1, lower triangular
    n = D.shape[-1]
    keep = torch.ones(n, n, device=D.device)
    if exclude_bos:
        keep[:, 0] = 0
    if exclude_current:
        keep.fill_diagonal_(0)

    def reduce(pattern: torch.Tensor) -> torch.Tensor:
        A = pattern.float()  # [batch, head, q, k]
        if measure == "mul":
            A = A * keep
            per_seq = (A * D[:, None]).sum((-2, -1)) / A.sum((-2, -1))  # [batch, head]
        else:
            diff = (A - D[:, None]).abs() * keep
            raw = diff.mean((-2, -1)).double() * n  # as TL: a float32 mean, then a Python float
            per_seq = 1 - torch.round(raw * 1000) / 1000  # TL rounds to 3 decimals
        return per_seq.mean(0)

    return reduce


def arena_reducer(stripe: Stripe, half: int) -> Reducer:
    offset = {"previous_token": -1, "induction": 1 - half, "duplicate_token": -half}[stripe]

    def reduce(pattern: torch.Tensor) -> torch.Tensor:
        diag = pattern.float().diagonal(offset=offset, dim1=-2, dim2=-1)  # [batch, head, n']
        return diag.mean((0, 2))

    return reduce


def arena_half(tokens: torch.Tensor) -> int:
    n = tokens.shape[1]
    half = (n - 1) // 2
    if (
        n != 1 + 2 * half
        or half < 2
        or not torch.equal(tokens[:, 1 : 1 + half], tokens[:, 1 + half :])
    ):
        raise InterpError(
            "convention='arena' scores the repeated probe: BOS, L tokens, the same L tokens "
            f"(length 2L + 1); these tokens (length {n}) are not that; use probe_tokens(model) "
            "or interp.datasets.repeated_random_tokens"
        )
    return half


def chunk_reducers(
    tokens: Tokens,
    rows: slice,
    stripes: Sequence[Any],
    convention: str,
    exclude_bos: bool | None,
    exclude_current_token: bool,
    error_measure: str,
    loss_mask: Mask | None,
    causal: bool,
) -> dict[str, tuple[Reducer, float]]:
    """The reducers of the prompts ``rows`` (a chunk of a batch whose options
    :func:`reducers_for` already checked), each with its weight in the mean over the whole
    batch: the query rows it counts (``"interp"``: a stripe's scores are a mean over rows),
    else its sequences. A stripe the chunk has no row of is left out."""
    part = tokens[rows]
    mask = None if loss_mask is None else check_mask(loss_mask, tokens, "loss_mask")[rows]
    out: dict[str, tuple[Reducer, float]] = {}
    for s in stripes:
        if convention == "interp":
            bos = True if exclude_bos is None else bool(exclude_bos)
            m = stripe_mask(part, s, exclude_bos=bos, causal=causal)
            v = m.any(-1) if mask is None else m.any(-1) & mask
            if v.any():
                out[s] = (interp_reducer(m, v), float(v.sum()))
        else:
            one = reducers_for(
                part, (s,), convention, exclude_bos, exclude_current_token, error_measure,
                None, causal,
            )  # fmt: skip
            out[s] = (one[s], float(part.shape[0]))
    return out


def reducers_for(
    tokens: Tokens,
    stripes: Sequence[Any],
    convention: str,
    exclude_bos: bool | None,
    exclude_current_token: bool,
    error_measure: str,
    loss_mask: Mask | None,
    causal: bool,
) -> dict[str, Reducer]:
    """One reducer per stripe (pattern ``[batch, head, q, k]`` -> ``[head]``), options checked."""
    if convention not in CONVENTIONS:
        raise InterpError(
            f"unknown convention {convention!r}; choose one of {', '.join(CONVENTIONS)}"
        )
    stripes = tuple(stripes)
    if not stripes or any(s not in STRIPES for s in stripes):
        raise InterpError(
            f"stripes must be a non-empty subset of {', '.join(STRIPES)}, got {stripes}"
        )
    if convention != "transformer_lens" and (exclude_current_token or error_measure != "mul"):
        raise InterpError(
            "exclude_current_token and error_measure belong to convention='transformer_lens'"
        )
    if error_measure not in ("mul", "abs"):
        raise InterpError(f"error_measure must be 'mul' or 'abs', got {error_measure!r}")
    reducers: dict[str, Reducer] = {}
    if convention == "interp":
        bos = True if exclude_bos is None else bool(exclude_bos)
        rows = None if loss_mask is None else check_mask(loss_mask, tokens, "loss_mask")
        for s in stripes:
            m = stripe_mask(tokens, s, exclude_bos=bos, causal=causal)
            v = m.any(-1) if rows is None else m.any(-1) & rows
            if not v.any():
                raise InterpError(
                    f"no query position has a {s} stripe in these tokens; "
                    "use repeated tokens (interp.datasets.repeated_tokens)"
                )
            reducers[s] = interp_reducer(m, v)
    elif convention == "transformer_lens":
        bos = bool(exclude_bos) if exclude_bos is not None else False
        for s in stripes:
            D = stripe_mask(tokens, s, exclude_bos=False, causal=True)
            reducers[s] = tl_reducer(D, bos, exclude_current_token, error_measure)
    else:
        if exclude_bos is not None:
            raise InterpError("convention='arena' has no exclude_bos (its diagonals are fixed)")
        half = arena_half(tokens)
        reducers = {s: arena_reducer(s, half) for s in stripes}
    return reducers

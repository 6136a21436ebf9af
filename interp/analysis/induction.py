"""Induction, previous-token and duplicate-token scores for every head.

A head's score is the attention it puts on a *stripe* of key positions
defined by the tokens themselves, averaged over the query positions that have
a non-empty stripe (Elhage et al. 2021; Olsson et al. 2022):

* **previous-token**: key ``q - 1``;
* **duplicate-token**: keys ``k < q`` holding the same token as ``q``;
* **induction**: keys ``k <= q`` whose *previous* token equals the token at
  ``q`` (the token that followed an earlier occurrence of the current one).

Precisely, with ``S(b, q)`` the stripe of query ``q`` in sequence ``b`` and
``V`` the set of ``(b, q)`` with ``S(b, q)`` non-empty (and inside
``query_mask`` when given), ``score = mean_{(b,q) in V} sum_{k in S(b,q)} A[b, q, k]``.
With ``exclude_bos=True`` (the default) key position 0 is removed from every
stripe, so attention parked on BOS never counts and a previous-token stripe
starts at query 2. Scores are in ``[0, 1]``; a perfect head scores 1.

For a **bidirectional** model (``cfg.attention_dir == "bidirectional"``,
e.g. BERT encoders) no causal assumption is made: duplicate-token keys are
every other position holding the same token (earlier or later), and
induction keys are every position ``k`` whose previous token equals the
query's token, except ``k = q + 1`` (whose previous token *is* the query:
that is the next-token stripe, not induction). ``causal=`` overrides the
model's setting.

Because stripes come from token ids, not from a tokenizer or strings, these
work on any hooked model and any tensor of ids. TransformerLens's
``detect_head`` with ``error_measure="mul"`` divides the same stripe mass by
*all* rows instead of the rows with a stripe; the tests relate the two exactly.

Example:
    >>> from interp.models import load_induction_model    # doctest: +SKIP
    >>> model = load_induction_model()                      # doctest: +SKIP
    >>> induction_scores(model).nlargest(1, "induction")    # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis._common import (
    bos_token_id,
    check_model,
    check_tokens,
    head_frame,
    is_causal,
    patterns,
)
from interp.errors import InterpError
from interp.hooks import hook_name

Stripe = Literal["induction", "previous_token", "duplicate_token"]
STRIPES: tuple[Stripe, ...] = ("induction", "previous_token", "duplicate_token")


def stripe_mask(
    tokens: torch.Tensor, kind: Stripe, *, exclude_bos: bool = True, causal: bool = True
) -> torch.Tensor:
    """``[batch, query_pos, key_pos]`` bool: the keys each query should attend to for ``kind``.

    ``causal=False`` gives the bidirectional stripes (module docstring).

    Raises:
        InterpError: for an unknown kind.
    """
    b, n = tokens.shape
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    if kind == "previous_token":
        mask = (k == q - 1)[None].expand(b, n, n).clone()
    elif kind == "duplicate_token":
        allowed = (k < q) if causal else (k != q)
        mask = (tokens[:, :, None] == tokens[:, None, :]) & allowed[None]
    elif kind == "induction":
        prev = torch.full_like(tokens, -1)
        prev[:, 1:] = tokens[:, :-1]  # prev[b, k] = token before key k
        allowed = (k <= q) if causal else (k != q + 1)
        mask = (tokens[:, :, None] == prev[:, None, :]) & allowed[None] & (k >= 1)[None]
    else:
        raise InterpError(f"unknown stripe {kind!r}; choose one of {', '.join(STRIPES)}")
    if exclude_bos:
        mask[:, :, 0] = False
    return mask


def _reduce(pattern: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    # pattern [batch, head, q, k]; mask [batch, q, k]; valid [batch, q] -> [head]
    mass = torch.einsum("bhqk,bqk->bhq", pattern.float(), mask.float())
    w = valid.float()
    return (mass * w[:, None]).sum((0, 2)) / w.sum()


def probe_tokens(
    model: Any, *, n: int = 16, half_len: int | None = None, seed: int = 0
) -> torch.Tensor:
    """The standard probe for ``model``: BOS then ``half_len`` random tokens repeated twice.

    ``half_len`` defaults to 50, or less if the context is shorter. The BOS id
    is the tokenizer's BOS (or CLS for encoders) when there is one, else 0.
    """
    from interp.datasets import repeated_random_tokens

    cfg = check_model(model)
    n_ctx = getattr(cfg, "n_ctx", None) or 101
    half_len = half_len or min(50, (n_ctx - 1) // 2)
    bos = bos_token_id(model)
    d_vocab = int(cfg.d_vocab)
    return repeated_random_tokens(n, half_len, d_vocab=d_vocab, bos=bos, seed=seed).tokens


def head_scores(
    model: Any,
    tokens: torch.Tensor | None = None,
    *,
    kinds: tuple[Stripe, ...] = STRIPES,
    exclude_bos: bool = True,
    query_mask: torch.Tensor | None = None,
    cache: Any = None,
    causal: bool | None = None,
) -> pd.DataFrame:
    """Several stripe scores from one forward pass: one row per head, one column per kind.

    Runs the model once with reducing hooks on ``hook_pattern`` only (no
    activations are kept), or reads patterns from ``cache``. ``causal``
    defaults to the model's ``cfg.attention_dir`` (bidirectional models get
    the stripes of the module docstring).

    Raises:
        InterpError: for a model without attention patterns, bad tokens, a
            ``query_mask`` of the wrong shape, or no query with a non-empty stripe.
    """
    cfg = check_model(model)
    tokens = probe_tokens(model) if tokens is None else check_tokens(model, tokens, min_len=2)
    if query_mask is not None and tuple(query_mask.shape) != tuple(tokens.shape):
        raise InterpError(
            f"query_mask has shape {tuple(query_mask.shape)} but tokens are {tuple(tokens.shape)}"
        )
    if causal is None:
        causal = is_causal(model)
    masks, valids = {}, {}
    for kind in kinds:
        m = stripe_mask(tokens, kind, exclude_bos=exclude_bos, causal=causal)
        v = m.any(-1)
        if query_mask is not None:
            v = v & query_mask.bool()
        if not v.any():
            raise InterpError(
                f"no query position has a {kind} stripe in these tokens; "
                "use repeated tokens (interp.datasets.repeated_tokens)"
            )
        masks[kind], valids[kind] = m, v
    out = {kind: torch.zeros(cfg.n_layers, cfg.n_heads) for kind in kinds}
    if cache is not None:
        for layer, p in enumerate(patterns(model, tokens, cache=cache)):
            for kind in kinds:
                out[kind][layer] = _reduce(p, masks[kind], valids[kind])
    else:
        seen: set[int] = set()

        def make_hook(layer: int) -> Callable:
            def hook(pattern: torch.Tensor, hook: Any) -> None:
                seen.add(layer)
                for kind in kinds:
                    out[kind][layer] = _reduce(pattern.detach(), masks[kind], valids[kind])

            return hook

        hooks = [(hook_name("pattern", l), make_hook(l)) for l in range(cfg.n_layers)]
        try:
            with torch.no_grad():
                model.run_with_hooks(tokens, fwd_hooks=hooks)
        except (KeyError, AttributeError) as exc:
            if "hook_pattern" in str(exc):
                raise InterpError("this model has no hook_pattern attention hooks") from exc
            raise
        if len(seen) != cfg.n_layers:
            raise InterpError(
                "this model did not produce attention patterns at every layer's hook_pattern"
            )
    return head_frame(out, cfg.n_layers, cfg.n_heads)


def induction_scores(model: Any, tokens: torch.Tensor | None = None, **kwargs: Any) -> pd.DataFrame:
    """Induction score per head (module docstring): ``layer, head, label, induction``."""
    return head_scores(model, tokens, kinds=("induction",), **kwargs)


def previous_token_scores(
    model: Any, tokens: torch.Tensor | None = None, **kwargs: Any
) -> pd.DataFrame:
    """Previous-token score per head: columns ``layer, head, label, previous_token``."""
    return head_scores(model, tokens, kinds=("previous_token",), **kwargs)


def duplicate_token_scores(
    model: Any, tokens: torch.Tensor | None = None, **kwargs: Any
) -> pd.DataFrame:
    """Duplicate-token score per head: columns ``layer, head, label, duplicate_token``."""
    return head_scores(model, tokens, kinds=("duplicate_token",), **kwargs)

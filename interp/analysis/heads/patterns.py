"""Attention patterns of chosen heads, from one forward pass or a cache.

The pattern of head ``h`` in layer ``l`` is ``blocks.{l}.attn.hook_pattern[:, h]``,
``[batch, query_pos, key_pos]``: row ``q`` is the distribution over the keys
that query ``q`` mixes (it sums to 1). This is what circuitsvis draws and what
the reports' attention widgets show; it says where a head looks, not what it writes.

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_induction_model()
    >>> tokens = repeated_random_tokens(2, 8, d_vocab=64, seed=0).tokens
    >>> attention_patterns(model, tokens, heads=["L1H1", "L0H1"]).shape
    torch.Size([2, 2, 17, 17])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from interp.core.checks import check_tokens
from interp.core.errors import InterpError
from interp.core.head_checks import parse_heads
from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel, check_model, eval_no_grad, hook_names
from interp.core.shapes import Patterns, Tokens
from interp.engine.cache import cache_of, check_cache, with_batch


def patterns(
    model: HookedModel,
    tokens: Tokens,
    *,
    cache: Any = None,
    layers: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """Attention patterns ``[batch, head, query_pos, key_pos]`` per layer (float32).

    Reads them from ``cache`` when given (checked against ``tokens``:
    :func:`interp.engine.cache.check_cache`), else runs the model once, caching
    only ``hook_pattern``.

    Raises:
        InterpError: if the model (or cache) has no attention patterns.
    """
    cfg = model.cfg
    layers = list(range(cfg.n_layers)) if layers is None else list(layers)
    names = [hook_name("pattern", l) for l in layers]
    missing = [n for n in names if n not in hook_names(model)]
    if missing:
        raise InterpError(f"no attention patterns at {missing[0]}: the model lacks hook_pattern")
    checked = check_cache(model, tokens, cache, needs=names)
    if checked is None:
        checked = cache_of(model, tokens, names)
    return [with_batch(checked[n], tokens).float() for n in names]


def attention_patterns(
    model: HookedModel, tokens: Tokens, *, heads: Any = None, cache: Any = None
) -> Patterns:
    """``[batch, head, query_pos, key_pos]`` patterns of ``heads`` (all by default), in that order.

    The pattern of head ``h`` in layer ``l`` is ``blocks.{l}.attn.hook_pattern[:, h]``: row
    ``q`` is the distribution over the keys that query ``q`` mixes (it sums to 1). One
    forward pass, caching only the layers asked for, or a read of ``cache``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning. The output keeps their order.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.

    Returns:
        ``[batch, head, query_pos, key_pos]`` float32 patterns, one ``head`` slot per head of
        ``heads``, in their order.

    Raises:
        InterpError: for bad tokens or heads, or a model (or cache) without
            ``hook_pattern``.
    """
    check_model(model)
    tokens = check_tokens(model, tokens)
    wanted = parse_heads(model, heads)
    layers = sorted({l for l, _ in wanted})
    with eval_no_grad(model):
        per_layer = dict(zip(layers, patterns(model, tokens, cache=cache, layers=layers)))
    return torch.stack([per_layer[l][:, h] for l, h in wanted], dim=1)

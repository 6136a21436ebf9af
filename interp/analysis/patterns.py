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

from typing import Any

import torch

from interp.analysis._common import patterns
from interp.protocol import check_model, check_tokens, eval_no_grad, parse_heads


def attention_patterns(
    model: Any, tokens: torch.Tensor, *, heads: Any = None, cache: Any = None
) -> torch.Tensor:
    """``[batch, head, query_pos, key_pos]`` patterns of ``heads`` (all by default), in that order.

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

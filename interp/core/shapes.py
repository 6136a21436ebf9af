"""Tensor shapes in the analyses' signatures (jaxtyping, as TransformerLens uses it).

The axis names are the shape vocabulary used everywhere: ``batch``, ``pos``,
``head``, ``query_pos``, ``key_pos``, ``d_model``, ``d_head``, ``d_vocab``.
They document; nothing is checked at run time (the analyses check their inputs
themselves, with messages that say how to fix the call).

Example:
    >>> Tokens.dim_str, Patterns.dim_str
    ('batch pos', 'batch head query_pos key_pos')
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int

Tokens = Int[torch.Tensor, "batch pos"]  # token ids ([pos] is one sequence)
Mask = Bool[torch.Tensor, "batch pos"]  # which positions count
Patterns = Float[torch.Tensor, "batch head query_pos key_pos"]  # attention patterns
PerToken = Float[torch.Tensor, "batch pos"]  # one number per position (e.g. a loss)

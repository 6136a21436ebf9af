"""A key/value cache for our attention-only models: what generation keeps between passes.

Generating a token needs every earlier position's keys and values in each layer,
and nothing else of them. :class:`KVCache` keeps them, one :class:`LayerKV` per
layer, as ``[batch, pos, head, d_head]`` tensors taken *after* ``hook_k`` and
``hook_v`` (so a hook that edits keys or values edits what later positions read),
beside the key mask (which positions are real tokens, not left padding).
:meth:`interp.models.attn_only.AttnOnlyTransformer.decode` fills and reads it.

Example:
    >>> import torch
    >>> kv = LayerKV()
    >>> k, v = kv.extend(torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4))
    >>> k, v = kv.extend(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4))
    >>> tuple(k.shape), kv.length
    ((1, 4, 2, 4), 4)
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class LayerKV:
    """One layer's cached keys and values, ``[batch, pos, head, d_head]`` (None: empty)."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[1])

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' keys and values; return every position's."""
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=1)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=1)
        return self.keys, self.values


@dataclasses.dataclass
class KVCache:
    """Every layer's :class:`LayerKV` and the key mask ``[batch, pos]`` (True: a real token)."""

    layers: list[LayerKV]
    mask: torch.Tensor

    @classmethod
    def empty(cls, n_layers: int, batch: int, device: torch.device | str = "cpu") -> KVCache:
        mask = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        return cls([LayerKV() for _ in range(n_layers)], mask)

    @property
    def length(self) -> int:
        """Positions held (the columns of the key mask)."""
        return int(self.mask.shape[1])

    def nbytes(self) -> int:
        """Bytes the cached keys and values hold."""
        return sum(
            t.numel() * t.element_size()
            for kv in self.layers
            for t in (kv.keys, kv.values)
            if t is not None
        )

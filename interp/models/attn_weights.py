"""The weights of :class:`interp.models.attn_only.AttnOnlyTransformer` in TransformerLens's
shapes, read from its modules: ``W_E [d_vocab, d_model]``, ``W_pos [n_ctx, d_model]``,
``W_Q/W_K/W_V [n_layers, n_heads, d_model, d_head]``, ``W_O [n_layers, n_heads, d_head,
d_model]``, ``W_U [d_model, d_vocab]``, their biases, and ``QK`` / ``OV`` as
``FactoredMatrix`` objects.
"""

from __future__ import annotations

from typing import Any

import torch

from interp.core.errors import InterpError


class StackedWeights:
    """The model's weights stacked over layers (module docstring); mixed into the model,
    whose ``embed``, ``pos_embed``, ``unembed`` and ``blocks`` they read."""

    embed: Any
    pos_embed: Any
    unembed: Any
    blocks: Any

    def _stack(self, name: str) -> torch.Tensor:
        return torch.stack([getattr(b.attn, name) for b in self.blocks])

    @property
    def W_E(self) -> torch.Tensor:  # [d_vocab, d_model]
        return self.embed.W_E

    @property
    def W_pos(self) -> torch.Tensor:  # [n_ctx, d_model]
        if self.pos_embed is None:
            raise InterpError("this model has no positional embedding (W_pos)")
        return self.pos_embed.W_pos

    @property
    def W_U(self) -> torch.Tensor:  # [d_model, d_vocab]
        if self.unembed is None:
            raise InterpError("this toy model has no unembedding (W_U)")
        return self.unembed.W_U

    @property
    def b_U(self) -> torch.Tensor:  # [d_vocab]
        if self.unembed is None:
            raise InterpError("this toy model has no unembedding (b_U)")
        return self.unembed.b_U

    @property
    def W_Q(self) -> torch.Tensor:  # [n_layers, n_heads, d_model, d_head]
        return self._stack("W_Q")

    @property
    def W_K(self) -> torch.Tensor:  # [n_layers, n_heads, d_model, d_head]
        return self._stack("W_K")

    @property
    def W_V(self) -> torch.Tensor:  # [n_layers, n_heads, d_model, d_head]
        return self._stack("W_V")

    @property
    def W_O(self) -> torch.Tensor:  # [n_layers, n_heads, d_head, d_model]
        return self._stack("W_O")

    @property
    def b_Q(self) -> torch.Tensor:  # [n_layers, n_heads, d_head]
        return self._stack("b_Q")

    @property
    def b_K(self) -> torch.Tensor:  # [n_layers, n_heads, d_head]
        return self._stack("b_K")

    @property
    def b_V(self) -> torch.Tensor:  # [n_layers, n_heads, d_head]
        return self._stack("b_V")

    @property
    def b_O(self) -> torch.Tensor:  # [n_layers, d_model]
        return torch.stack([b.attn.b_O for b in self.blocks])

    @property
    def QK(self):  # FactoredMatrix [n_layers, n_heads, d_model, d_model]
        from transformer_lens import FactoredMatrix

        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self):  # FactoredMatrix [n_layers, n_heads, d_model, d_model]
        from transformer_lens import FactoredMatrix

        return FactoredMatrix(self.W_V, self.W_O)

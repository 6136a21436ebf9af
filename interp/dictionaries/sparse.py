"""What a dictionary and a transcoder share: a sparse encoder and its checks.

Both encode an activation ``x`` (``[..., d_in]``) into ``d_sae`` feature activations: an
affine map (``W_enc [d_in, d_sae]``, ``b_enc``), then a nonlinearity: ``relu`` (sae-lens
``standard``), ``topk`` (the ``k`` largest pre-activations, after a relu) or ``jumprelu``
(``relu(pre) * (pre > threshold)``). A :class:`~interp.dictionaries.dictionary.Dictionary`
decodes back into ``x``'s width at the same hook; a
:class:`~interp.dictionaries.transcoder.Transcoder` decodes into another hook's. This base
holds the shapes, the nonlinearity and the input check; each subclass its own affine part
(a dictionary may subtract ``b_dec`` first) and decoder.

Example:
    >>> from interp.dictionaries import Dictionary, Transcoder
    >>> issubclass(Dictionary, SparseCoder), issubclass(Transcoder, SparseCoder)
    (True, True)
"""

from __future__ import annotations

import torch
from torch import nn

from interp.core.errors import InterpError

__all__ = ["SparseCoder"]


class SparseCoder(nn.Module):
    """A sparse encoder's shared parts (module docstring). Subclasses set ``W_enc``,
    ``b_enc``, ``architecture``, ``k``, ``threshold`` and ``hook_name``, and define
    :meth:`pre_activations`."""

    W_enc: torch.Tensor
    b_enc: torch.Tensor
    architecture: str
    k: int | None
    threshold: torch.Tensor | None
    hook_name: str
    kind = "sparse coder"  # how messages name it

    @property
    def d_in(self) -> int:
        """The width of the activation it reads."""
        return int(self.W_enc.shape[0])

    @property
    def d_sae(self) -> int:
        """The number of features."""
        return int(self.W_enc.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of its tensors."""
        return self.W_enc.dtype

    @property
    def device(self) -> torch.device:
        """The device of its tensors."""
        return self.W_enc.device

    def hooks_text(self) -> str:
        """The hook(s) it reads (and writes), for messages.

        Returns:
            The hook name, or ``'no hook'``.
        """
        return self.hook_name or "no hook"

    def _check_input(self, x: torch.Tensor, width: int, what: str) -> None:
        if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] != width:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise InterpError(
                f"{what} has shape {got}, but this {self.kind} ({self.hooks_text()}) needs "
                f"[..., {width}]: pass activations of its hook"
            )

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's affine part (the subclass's).

        Args:
            x: ``[..., d_in]`` activations.

        Returns:
            ``[..., d_sae]`` pre-activations.
        """
        raise NotImplementedError

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """The encoder's nonlinearity applied to pre-activations.

        Args:
            pre: ``[..., d_sae]`` pre-activations.

        Returns:
            ``[..., d_sae]`` feature activations (sparse: zero where a feature is off).
        """
        if self.architecture == "relu":
            return torch.relu(pre)
        if self.architecture == "jumprelu":
            return torch.relu(pre) * (pre > self.threshold)
        top = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations of ``x``: :meth:`activate` of :meth:`pre_activations`.

        Args:
            x: ``[..., d_in]`` activations of ``hook_name``.

        Returns:
            ``[..., d_sae]`` feature activations.

        Raises:
            InterpError: ``x`` whose last axis is not ``d_in``.
        """
        return self.activate(self.pre_activations(x))

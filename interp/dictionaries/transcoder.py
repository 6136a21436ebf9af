"""A transcoder: a sparse dictionary that reads one hook and writes another.

A transcoder (Dunefsky et al. 2024, "Transcoders find interpretable LLM feature circuits";
Ge et al. 2024) stands in for an MLP: its encoder reads the MLP's input ``x`` (e.g.
``blocks.L.ln2.hook_normalized`` or ``blocks.L.mlp.hook_in``) and its decoder writes the
MLP's output ``y`` (``blocks.L.hook_mlp_out``):

* ``pre = x @ W_enc + b_enc`` (``[..., d_sae]``; no ``b_dec`` is subtracted: it lives in
  the output's space);
* ``acts`` = the nonlinearity of :class:`~interp.dictionaries.Dictionary` (``relu``,
  ``topk`` or ``jumprelu``);
* ``y_hat = acts @ W_dec + b_dec (+ x @ W_skip.T for a skip transcoder)`` (``[..., d_out]``);
* what it misses is its error, ``y - y_hat``.

The tensors and their meaning follow sae-lens' ``Transcoder`` / ``SkipTranscoder`` /
``JumpReLUTranscoder`` (``W_skip [d_out, d_in]``), so a folder saved here loads there
(:mod:`interp.dictionaries.transcoder_files` reads and writes sae-lens folders and
circuit-tracer's per-layer files). A transcoder is not a :class:`Dictionary`: it cannot be
spliced at one hook, and every tool that takes a dictionary refuses it.

Example:
    >>> import torch
    >>> T = Transcoder.random(d_in=8, d_out=6, d_sae=32, architecture="topk", k=2,
    ...                       hook_name="blocks.0.ln2.hook_normalized",
    ...                       hook_name_out="blocks.0.hook_mlp_out")
    >>> x, y = torch.randn(3, 8), torch.randn(3, 6)
    >>> T(x).shape, int((T.encode(x) != 0).sum(-1).max())
    (torch.Size([3, 6]), 2)
    >>> bool(torch.allclose(T(x) + T.error(x, y), y, atol=1e-6))
    True
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from interp.core.errors import InterpError
from interp.core.validate import check_int, check_seed
from interp.dictionaries.dictionary import Dictionary, architecture_name
from interp.dictionaries.inputs import as_weight, check_finite_weight
from interp.dictionaries.sparse import SparseCoder


class Transcoder(SparseCoder):
    """A sparse dictionary from one hook (``hook_name``) to another (``hook_name_out``).

    Every tensor is a floating-point ``torch.Tensor`` or numpy array (converted), finite:
    a NaN or an infinity is refused here, naming the tensor. The other tensors take
    ``W_enc``'s dtype and device.

    Args:
        W_enc: ``[d_in, d_sae]`` encoder.
        b_enc: ``[d_sae]`` encoder bias.
        W_dec: ``[d_sae, d_out]`` decoder, one row per feature.
        b_dec: ``[d_out]`` decoder bias.
        architecture: ``'relu'`` (sae-lens ``'standard'``), ``'topk'`` or ``'jumprelu'``.
        hook_name: the hook it reads (the MLP's input).
        hook_name_out: the hook it writes (the MLP's output, ``blocks.L.hook_mlp_out``).
        k: how many features a ``topk`` transcoder keeps per position.
        threshold: ``[d_sae]`` thresholds of a ``jumprelu`` transcoder.
        W_skip: ``[d_out, d_in]`` skip connection (Paulo et al. 2025), or ``None``.
        metadata: what is known of how it was made, kept in ``cfg.json``'s ``metadata``.

    Raises:
        InterpError: a tensor that is not a tensor or numpy array, of a non-floating dtype,
            of the wrong shape or holding a NaN or an infinity (named, with how many); an
            unknown architecture; a bad ``k``; a ``jumprelu`` transcoder without thresholds;
            hook names that are not strings; ``metadata`` that is not a dict.
    """

    kind = "transcoder"

    def hooks_text(self) -> str:
        """The hooks it reads and writes, for messages.

        Returns:
            ``'<hook_name> -> <hook_name_out>'``.
        """
        return f"{self.hook_name or 'no hook'} -> {self.hook_name_out or 'no hook'}"

    def __init__(
        self,
        W_enc: torch.Tensor,
        b_enc: torch.Tensor,
        W_dec: torch.Tensor,
        b_dec: torch.Tensor,
        *,
        architecture: str = "relu",
        hook_name: str = "",
        hook_name_out: str = "",
        k: int | None = None,
        threshold: torch.Tensor | None = None,
        W_skip: torch.Tensor | None = None,
        metadata: dict | None = None,
    ) -> None:
        super().__init__()
        for key, name in (("hook_name", hook_name), ("hook_name_out", hook_name_out)):
            if not isinstance(name, str):
                raise InterpError(f"{key} must be a string, got {type(name).__name__}")
        W_dec = as_weight(W_dec, "W_dec")
        if W_dec.ndim != 2 or 0 in W_dec.shape:
            raise InterpError(
                f"W_dec has shape {tuple(W_dec.shape)}: a transcoder's decoder is "
                "[d_sae, d_out] (2 dimensions, each >= 1)"
            )
        d_out = int(W_dec.shape[1])
        # The encoder half is a Dictionary's (its checks and nonlinearity), decoding into
        # the input's width only for the check: the decoder is checked here, at d_out.
        W_enc = as_weight(W_enc, "W_enc")
        d_in, d_sae = (max(int(n), 1) for n in W_enc.shape) if W_enc.ndim == 2 else (1, 1)
        enc = Dictionary(
            W_enc, b_enc, torch.zeros(d_sae, d_in, dtype=W_enc.dtype),
            torch.zeros(d_in, dtype=W_enc.dtype),
            architecture=architecture, hook_name=hook_name, k=k, threshold=threshold,
            metadata=metadata,
        )  # fmt: skip
        want = {"W_dec": (enc.d_sae, d_out), "b_dec": (d_out,)}
        given = {"W_dec": W_dec, "b_dec": b_dec}
        if W_skip is not None:
            want["W_skip"], given["W_skip"] = (d_out, enc.d_in), W_skip
        for key, shape in want.items():
            t = given[key] = as_weight(given[key], key)
            if tuple(t.shape) != shape:
                raise InterpError(
                    f"{key} has shape {tuple(t.shape)}, but W_enc [d_in={enc.d_in}, "
                    f"d_sae={enc.d_sae}] and W_dec [.., d_out={d_out}] need {key} {list(shape)}: "
                    "the tensors come from different transcoders, or one is transposed"
                )
            check_finite_weight(t, key)
        self.architecture, self.k, self.metadata = enc.architecture, enc.k, enc.metadata
        self.hook_name, self.hook_name_out = hook_name, hook_name_out
        self.W_enc, self.b_enc, self.threshold = enc.W_enc, enc.b_enc, enc.threshold
        dtype = self.W_enc.dtype
        for key, t in given.items():
            cast = t.detach().clone().to(device=self.W_enc.device, dtype=dtype)
            check_finite_weight(
                cast,
                f"{key} (cast to W_enc's {dtype})",
                fix=f"its values do not fit in {dtype}; give every tensor one dtype",
            )
            setattr(self, key, nn.Parameter(cast))
        if W_skip is None:
            self.W_skip = None

    @classmethod
    def random(
        cls,
        *,
        d_in: int,
        d_out: int,
        d_sae: int,
        architecture: str = "relu",
        hook_name: str = "",
        hook_name_out: str = "",
        k: int | None = None,
        seed: int = 0,
        skip: bool = False,
    ) -> Transcoder:
        """A randomly initialised transcoder: unit-norm encoder columns and decoder rows.

        Args:
            d_in: the input hook's width.
            d_out: the output hook's width.
            d_sae: the number of features.
            architecture: ``'relu'``, ``'topk'`` or ``'jumprelu'``.
            hook_name: the hook it reads.
            hook_name_out: the hook it writes.
            k: features kept per position (``topk``).
            seed: every random draw; the same seed gives the same numbers.
            skip: give it a (small random) skip connection ``W_skip``.

        Returns:
            A float32 :class:`Transcoder` with zero biases (jumprelu thresholds 0).

        Raises:
            InterpError: a width that is not an integer >= 1, a bad seed, ``k`` or
                architecture.
        """
        d_in, d_out = check_int(d_in, "d_in", minimum=1), check_int(d_out, "d_out", minimum=1)
        d_sae = check_int(d_sae, "d_sae", minimum=1)
        g = torch.Generator().manual_seed(check_seed(seed))
        W_enc = torch.randn(d_in, d_sae, generator=g)
        W_dec = torch.randn(d_sae, d_out, generator=g)
        arch = architecture_name(architecture)
        return cls(
            W_enc / W_enc.norm(dim=0, keepdim=True),
            torch.zeros(d_sae),
            W_dec / W_dec.norm(dim=-1, keepdim=True),
            torch.zeros(d_out),
            architecture=arch,
            hook_name=hook_name,
            hook_name_out=hook_name_out,
            k=k,
            threshold=torch.zeros(d_sae) if arch == "jumprelu" else None,
            W_skip=0.1 * torch.randn(d_out, d_in, generator=g) if skip else None,
        )

    @property
    def d_out(self) -> int:
        """The width of the activation it writes."""
        return int(self.W_dec.shape[1])

    def tensors(self) -> dict[str, torch.Tensor]:
        """Its tensors by sae-lens name (``threshold`` and ``W_skip`` where it has them).

        Returns:
            ``{'W_enc': ..., 'b_enc': ..., 'W_dec': ..., 'b_dec': ...[, 'threshold'][,
            'W_skip']}``.
        """
        names = ["W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip"]
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's affine part: ``x @ W_enc + b_enc``.

        Args:
            x: ``[..., d_in]`` activations of ``hook_name``.

        Returns:
            ``[..., d_sae]`` pre-activations.

        Raises:
            InterpError: ``x`` whose last axis is not ``d_in``.
        """
        self._check_input(x, self.d_in, "x")
        return x.to(self.dtype) @ self.W_enc + self.b_enc

    def decode(self, acts: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """The output of feature activations: ``acts @ W_dec + b_dec (+ x @ W_skip.T)``.

        Args:
            acts: ``[..., d_sae]`` feature activations.
            x: ``[..., d_in]`` the input, needed by a skip transcoder only.

        Returns:
            ``[..., d_out]``.

        Raises:
            InterpError: ``acts`` whose last axis is not ``d_sae``; a skip transcoder
                without ``x``.
        """
        self._check_input(acts, self.d_sae, "acts")
        out = acts.to(self.dtype) @ self.W_dec + self.b_dec
        if self.W_skip is not None:
            if x is None:
                raise InterpError(
                    "this transcoder has a skip connection (W_skip): pass the input x to decode"
                )
            out = out + self.skip(x)
        return out

    def skip(self, x: torch.Tensor) -> torch.Tensor:
        """The skip connection's part of the output, ``x @ W_skip.T`` (zero without one).

        Args:
            x: ``[..., d_in]`` activations of ``hook_name``.

        Returns:
            ``[..., d_out]``.

        Raises:
            InterpError: ``x`` whose last axis is not ``d_in``.
        """
        self._check_input(x, self.d_in, "x")
        if self.W_skip is None:
            return torch.zeros(*x.shape[:-1], self.d_out, dtype=self.dtype, device=x.device)
        return x.to(self.dtype) @ self.W_skip.T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The predicted output ``decode(encode(x), x)``.

        Args:
            x: ``[..., d_in]`` activations of ``hook_name``.

        Returns:
            ``[..., d_out]``.
        """
        return self.decode(self.encode(x), x)

    def error(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """What the transcoder misses: ``y - forward(x)``.

        Args:
            x: ``[..., d_in]`` activations of ``hook_name``.
            y: ``[..., d_out]`` activations of ``hook_name_out`` at the same positions.

        Returns:
            ``[..., d_out]`` error, in the transcoder's dtype.

        Raises:
            InterpError: ``x`` or ``y`` of the wrong width.
        """
        self._check_input(y, self.d_out, "y")
        return y.to(self.dtype) - self(x)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the sae-lens layout (``cfg.json``, ``sae_weights.safetensors``) atomically.

        Args:
            path: the folder (created if missing; other files in it are kept).

        Returns:
            The folder.

        Raises:
            InterpError: a tensor changed to NaN / infinity since it was made; a destination
                that cannot be written.
        """
        from interp.dictionaries.transcoder_save import save_transcoder

        return save_transcoder(self, path)

    def extra_repr(self) -> str:
        """What ``repr`` shows inside ``Transcoder(...)``.

        Returns:
            The architecture, widths, ``k``, skip and the hook names.
        """
        k = f", k={self.k}" if self.k is not None else ""
        skip = ", skip" if self.W_skip is not None else ""
        return (
            f"{self.architecture}, d_in={self.d_in}, d_sae={self.d_sae}, d_out={self.d_out}"
            f"{k}{skip}, {self.hook_name!r} -> {self.hook_name_out!r}"
        )

"""A sparse dictionary (sparse autoencoder) at one hook of a model.

A dictionary rewrites an activation ``x`` (``[..., d_in]``) as a sparse sum of learned
directions, ``x ≈ decode(encode(x)) = acts @ W_dec + b_dec``, and what it misses is its
error, ``x - decode(encode(x))``. The encoder is affine, then a nonlinearity:

* ``pre = (x - b_dec * apply_b_dec_to_input) @ W_enc + b_enc`` (``[..., d_sae]``);
* ``relu`` (sae-lens ``standard``): ``acts = relu(pre)``;
* ``topk`` (Gao et al. 2024, "Scaling and evaluating sparse autoencoders"): the ``k``
  largest pre-activations kept (after a relu), every other one zero;
* ``jumprelu`` (Rajamanoharan et al. 2024, Gemma Scope):
  ``acts = relu(pre) * (pre > threshold)``.

The tensors and their meaning follow sae-lens, so a folder saved by one loads in the other
(``interp.dictionaries.files``).

Example:
    >>> import torch
    >>> D = Dictionary.random(d_in=8, d_sae=32, architecture="topk", k=2, hook_name="hook_x")
    >>> x = torch.randn(3, 8)
    >>> D.encode(x).shape, int((D.encode(x) != 0).sum(-1).max())
    (torch.Size([3, 32]), 2)
    >>> bool(torch.allclose(D.decode(D.encode(x)) + D.error(x), x, atol=1e-6))
    True
"""

from __future__ import annotations

import operator
import os
from pathlib import Path

import torch
from torch import nn

from interp.core.errors import InterpError
from interp.core.validate import check_bool, check_int, check_seed
from interp.dictionaries.inputs import as_weight, check_finite_weight
from interp.dictionaries.sae_lens import save_dictionary
from interp.dictionaries.sparse import SparseCoder

ARCHITECTURES = ("relu", "topk", "jumprelu")
# sae-lens' names for the same encoders.
ALIASES = {"standard": "relu", "relu": "relu", "topk": "topk", "jumprelu": "jumprelu"}


def architecture_name(name: str) -> str:
    """Our name for an encoder architecture (sae-lens' ``standard`` is ``relu``).

    Args:
        name: ``'relu'``, ``'standard'``, ``'topk'`` or ``'jumprelu'``.

    Returns:
        ``'relu'``, ``'topk'`` or ``'jumprelu'``.

    Raises:
        InterpError: an architecture no dictionary here implements.
    """
    if not isinstance(name, str) or name.lower() not in ALIASES:
        raise InterpError(
            f"architecture {name!r} is unknown: use one of {', '.join(ARCHITECTURES)} "
            "(sae-lens' 'standard' is 'relu'; gated dictionaries are not supported)"
        )
    return ALIASES[name.lower()]


def _is_int(k: object) -> bool:
    try:
        operator.index(k)
    except TypeError:
        return False
    return True


class Dictionary(SparseCoder):
    """A sparse dictionary at one hook: encoder, decoder, nonlinearity and hook name.

    Every tensor is a floating-point ``torch.Tensor`` or numpy array (converted), finite:
    a NaN or an infinity is refused here, not found later as NaN scores. The biases,
    decoder and thresholds take ``W_enc``'s dtype and device.

    Args:
        W_enc: ``[d_in, d_sae]`` encoder.
        b_enc: ``[d_sae]`` encoder bias.
        W_dec: ``[d_sae, d_in]`` decoder, one row per feature.
        b_dec: ``[d_in]`` decoder bias.
        architecture: ``'relu'`` (sae-lens ``'standard'``), ``'topk'`` or ``'jumprelu'``.
        hook_name: the TransformerLens hook it reads and rewrites, e.g.
            ``'blocks.1.hook_resid_pre'``.
        k: how many features a ``topk`` dictionary keeps per position.
        threshold: ``[d_sae]`` thresholds of a ``jumprelu`` dictionary.
        apply_b_dec_to_input: subtract ``b_dec`` from ``x`` before encoding (sae-lens).
        metadata: what is known of how it was made (model name, corpus, training
            figures), kept in ``cfg.json``'s ``metadata`` by :meth:`save`.

    Raises:
        InterpError: a tensor that is not a tensor or numpy array, of an integer, bool or
            complex dtype, of the wrong shape, or holding a NaN or an infinite value (named,
            with how many); an unknown architecture; a ``topk`` dictionary without an
            integer ``k`` in ``1..d_sae``; a ``jumprelu`` one without thresholds; a
            ``hook_name`` that is not a string, ``apply_b_dec_to_input`` that is not a bool
            or ``metadata`` that is not a dict.
    """

    kind = "dictionary"

    def __init__(
        self,
        W_enc: torch.Tensor,
        b_enc: torch.Tensor,
        W_dec: torch.Tensor,
        b_dec: torch.Tensor,
        *,
        architecture: str = "relu",
        hook_name: str = "",
        k: int | None = None,
        threshold: torch.Tensor | None = None,
        apply_b_dec_to_input: bool = False,
        metadata: dict | None = None,
    ) -> None:
        super().__init__()
        if metadata is not None and not isinstance(metadata, dict):
            raise InterpError(
                f"metadata must be a dict (saved in cfg.json), got {type(metadata).__name__}"
            )
        self.metadata = dict(metadata or {})
        self.architecture = architecture_name(architecture)
        W_enc = as_weight(W_enc, "W_enc")
        if W_enc.ndim != 2:
            raise InterpError(
                f"W_enc has shape {tuple(W_enc.shape)}: it must be [d_in, d_sae] (2 dimensions)"
            )
        d_in, d_sae = W_enc.shape
        if d_in == 0 or d_sae == 0:
            raise InterpError(f"W_enc has shape {tuple(W_enc.shape)}: d_in and d_sae must be >= 1")
        want = {"b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        given = {"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec}
        if self.architecture == "jumprelu":
            if threshold is None:
                raise InterpError(
                    "a jumprelu dictionary needs 'threshold' [d_sae]: pass it (sae-lens folders "
                    "and Gemma Scope npz files carry it)"
                )
            want["threshold"], given["threshold"] = (d_sae,), threshold
        for key, shape in want.items():
            t = given[key] = as_weight(given[key], key)
            if tuple(t.shape) != shape:
                raise InterpError(
                    f"{key} has shape {tuple(t.shape)}, but W_enc [d_in={d_in}, d_sae={d_sae}] "
                    f"needs {key} {list(shape)}: the tensors come from different dictionaries, "
                    "or one is transposed"
                )
        for key, t in given.items():
            check_finite_weight(t, key)
        if self.architecture == "topk":
            if isinstance(k, bool) or not _is_int(k):
                raise InterpError(
                    f"a topk dictionary needs an integer k in 1..d_sae={d_sae}, got {k!r}: pass "
                    "k (cfg.json key 'k')"
                )
            k = int(k)
            if not 1 <= k <= d_sae:
                raise InterpError(
                    f"a topk dictionary needs an integer k in 1..d_sae={d_sae}, got {k}: pass "
                    "k (cfg.json key 'k')"
                )
        else:
            k = None
        if not isinstance(hook_name, str):
            raise InterpError(f"hook_name must be a string, got {type(hook_name).__name__}")
        self.hook_name = hook_name
        self.k = k
        self.apply_b_dec_to_input = check_bool(apply_b_dec_to_input, "apply_b_dec_to_input")
        dtype = W_enc.dtype
        for key, t in given.items():
            cast = t.detach().clone().to(device=W_enc.device, dtype=dtype)
            if t.dtype != dtype:
                check_finite_weight(
                    cast,
                    f"{key} (cast from {t.dtype} to W_enc's {dtype})",
                    fix=f"its values do not fit in {dtype}; give every tensor one dtype",
                )
            setattr(self, key, nn.Parameter(cast))
        if self.architecture != "jumprelu":
            self.threshold = None

    @classmethod
    def random(
        cls,
        *,
        d_in: int,
        d_sae: int,
        architecture: str = "relu",
        hook_name: str = "",
        k: int | None = None,
        seed: int = 0,
        apply_b_dec_to_input: bool = False,
    ) -> Dictionary:
        """A randomly initialised dictionary: unit-norm decoder rows, encoder = decoder.T.

        Args:
            d_in: the hook's width.
            d_sae: the number of features.
            architecture: ``'relu'``, ``'topk'`` or ``'jumprelu'``.
            hook_name: the hook it sits at.
            k: features kept per position (``topk``).
            seed: every random draw; the same seed gives the same numbers.
            apply_b_dec_to_input: subtract ``b_dec`` before encoding.

        Returns:
            A float32 :class:`Dictionary` with zero biases (jumprelu thresholds 0).

        Raises:
            InterpError: a width that is not an integer >= 1, a seed that is not an integer
                >= 0, or a bad ``k`` / architecture.
        """
        d_in, d_sae = check_int(d_in, "d_in", minimum=1), check_int(d_sae, "d_sae", minimum=1)
        g = torch.Generator().manual_seed(check_seed(seed))
        W_dec = torch.randn(d_sae, d_in, generator=g)
        W_dec = W_dec / W_dec.norm(dim=-1, keepdim=True)
        arch = architecture_name(architecture)
        return cls(
            W_dec.T.clone(),
            torch.zeros(d_sae),
            W_dec,
            torch.zeros(d_in),
            architecture=arch,
            hook_name=hook_name,
            k=k,
            threshold=torch.zeros(d_sae) if arch == "jumprelu" else None,
            apply_b_dec_to_input=apply_b_dec_to_input,
        )

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's affine part, before its nonlinearity.

        Args:
            x: ``[..., d_in]`` activations of the hook.

        Returns:
            ``[..., d_sae]``: ``(x - b_dec * apply_b_dec_to_input) @ W_enc + b_enc``.

        Raises:
            InterpError: ``x`` whose last axis is not ``d_in``.
        """
        self._check_input(x, self.d_in, "x")
        x = x.to(self.dtype)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        """The reconstruction of feature activations.

        Args:
            acts: ``[..., d_sae]`` feature activations.

        Returns:
            ``[..., d_in]``: ``acts @ W_dec + b_dec``.

        Raises:
            InterpError: ``acts`` whose last axis is not ``d_sae``.
        """
        self._check_input(acts, self.d_sae, "acts")
        return acts.to(self.dtype) @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction ``decode(encode(x))``.

        Args:
            x: ``[..., d_in]`` activations of the hook.

        Returns:
            ``[..., d_in]`` reconstruction.
        """
        return self.decode(self.encode(x))

    def error(self, x: torch.Tensor) -> torch.Tensor:
        """What the dictionary misses: ``x - decode(encode(x))``.

        Args:
            x: ``[..., d_in]`` activations of the hook.

        Returns:
            ``[..., d_in]`` error, in the dictionary's dtype.

        Raises:
            InterpError: ``x`` whose last axis is not ``d_in``.
        """
        return x.to(self.dtype) - self.decode(self.encode(x))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the sae-lens layout (``cfg.json``, ``sae_weights.safetensors``) atomically.

        Args:
            path: the folder (created if missing; other files in it are kept).

        Returns:
            The folder.

        Raises:
            InterpError: a destination that cannot be written.
        """
        return save_dictionary(self, path)

    def extra_repr(self) -> str:
        """What ``repr`` shows inside ``Dictionary(...)``.

        Returns:
            The architecture, ``d_in``, ``d_sae``, ``k`` (topk) and the hook name.
        """
        k = f", k={self.k}" if self.k is not None else ""
        return (
            f"{self.architecture}, d_in={self.d_in}, d_sae={self.d_sae}{k}, "
            f"hook_name={self.hook_name!r}"
        )

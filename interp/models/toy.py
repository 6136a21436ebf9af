"""The article's toy attention heads: a numpy reference and hooked torch versions.

Three objects live here:

* :func:`attention` is the article's reference head in numpy, kept exactly as
  written there (row-max-subtracted softmax, ``-inf`` causal mask) so every
  other implementation can be checked against it.
* :func:`toy_model` builds a hooked :class:`AttnOnlyTransformer` from given
  matrices, so hand-set heads (identity or swap projections, with or without an
  output projection and residual) run through TransformerLens hooks.
* :class:`OneHeadSense` (defined in :mod:`interp.models.sense_model`, exported here) is
  the article's trainable one-head sense classifier:
  embedding, one head, a linear classifier reading the mixture at the final
  position. Its parameters are created in the article's order, so
  ``torch.manual_seed(0)`` reproduces the article's run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from interp.core.errors import InterpError
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer
from interp.models.sense_model import OneHeadSense

__all__ = ["OneHeadSense", "attention", "softmax", "toy_model"]


def _as_matrix(name: str, M: Any) -> np.ndarray:
    arr = np.asarray(M, dtype=float)
    if arr.ndim != 2:
        raise InterpError(f"{name} must be a 2-D matrix, got shape {arr.shape}")
    if arr.size == 0:
        raise InterpError(f"{name} is empty (shape {arr.shape})")
    if not np.isfinite(arr).all():
        raise InterpError(f"{name} contains NaN or infinite entries")
    return arr


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax, subtracting each row's max first for numerical stability."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(
    X: Any,
    Wq: Any,
    Wk: Any,
    Wv: Any,
    causal: bool = False,
    *,
    mask_value: float = -np.inf,
) -> tuple[np.ndarray, np.ndarray]:
    """The article's single attention head: ``A = softmax(Q K^T / sqrt(d_k))``, ``H = A V``.

    Rows are tokens (row-vector convention): ``Q = X @ Wq``, ``K = X @ Wk``, ``V = X @ Wv``.
    Kept exactly as the article writes it (row-max-subtracted softmax), so every other
    implementation can be checked against it.

    Args:
        X: ``[n, d_in]`` input rows, one per token.
        Wq: ``[d_in, d_k]`` query projection.
        Wk: ``[d_in, d_k]`` key projection.
        Wv: ``[d_in, d_v]`` value projection.
        causal: Mask the scores above the diagonal (a row sees itself and earlier rows;
            default ``False``).
        mask_value: What masked scores are replaced by before the softmax; the default
            ``-inf`` gives them exactly zero weight (pass 0 to see why zero is the wrong
            mask value).

    Returns:
        ``(A, H)``: weights ``[n, n]`` (one distribution per receiving row) and
        mixtures ``[n, d_v]``.

    Example:
        >>> X = np.array([[0., 0.], [0., 1.], [1., 0.]])
        >>> A, H = attention(X, np.eye(2), np.eye(2), np.eye(2))
        >>> A[-1].round(4)
        array([0.2483, 0.2483, 0.5035])

    Raises:
        InterpError: for non-2-D, empty or non-finite inputs, or shapes that do
            not chain (``X`` width vs ``Wq`` rows, ``Wq`` vs ``Wk`` widths).
    """
    X = _as_matrix("X", X)
    Wq, Wk, Wv = (_as_matrix(n, W) for n, W in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv)))
    for name, W in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv)):
        if W.shape[0] != X.shape[1]:
            raise InterpError(
                f"shape mismatch: X is {X.shape} but {name} is {W.shape}; "
                f"{name} needs {X.shape[1]} rows (one per input coordinate)"
            )
    if Wq.shape[1] != Wk.shape[1]:
        raise InterpError(
            f"shape mismatch: Wq is {Wq.shape} and Wk is {Wk.shape}; queries and keys "
            "must have the same width for their dot products to exist"
        )
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    scores = Q @ K.T / np.sqrt(K.shape[-1])  # [query_pos, key_pos]
    if causal:
        future = np.triu(np.ones(scores.shape, dtype=bool), k=1)
        scores = np.where(future, mask_value, scores)
    A = softmax(scores)
    return A, A @ V


def _per_head(name: str, W: Any, dtype: torch.dtype) -> torch.Tensor:
    """Return ``W`` as ``[n_layers, n_heads, rows, cols]``."""
    t = torch.as_tensor(np.asarray(W, dtype=float), dtype=dtype)
    if t.ndim == 2:
        t = t[None, None]
    elif t.ndim == 3:
        t = t[None]
    if t.ndim != 4:
        raise InterpError(
            f"{name} must be [rows, cols], [n_heads, rows, cols] or "
            f"[n_layers, n_heads, rows, cols]; got shape {tuple(t.shape)}"
        )
    if t.numel() == 0 or not torch.isfinite(t).all():
        raise InterpError(f"{name} is empty or contains NaN/infinite entries")
    return t


def toy_model(
    W_E: Any,
    W_Q: Any,
    W_K: Any,
    W_V: Any,
    W_O: Any | None = None,
    *,
    vocab: Sequence[str] | None = None,
    causal: bool = False,
    residual: bool = False,
    dtype: torch.dtype = torch.float64,
) -> AttnOnlyTransformer:
    """A hooked attention-only model with hand-set weights (no positions, no LayerNorm).

    Hand-set heads (identity or swap projections, with or without an output projection and
    residual) run through TransformerLens hooks. The model output is the final residual
    stream (there is no unembedding).

    Args:
        W_E: ``[d_vocab, d_model]`` embedding, one row per token.
        W_Q: ``[d_model, d_head]`` for one head (or ``[n_heads, d_model, d_head]``, or
            ``[n_layers, n_heads, d_model, d_head]``).
        W_K: The key projection, the same shape as ``W_Q``.
        W_V: The value projection, the same shape as ``W_Q``.
        W_O: ``[d_head, d_model]`` per head, in the same leading shape; ``None`` means no
            output projection: the head's mixture is the update (requires ``n_heads *
            d_head == d_model``).
        vocab: A word per token id, so ``model.to_tokens("a b c")`` works; ``None``: ids only.
        causal: Causal attention (default ``False``: bidirectional, as in the article).
        residual: Add each block's update to its input (default ``False``: each block outputs
            the update alone, as in the article's first experiments).
        dtype: The weights' precision (default ``torch.float64``).

    Returns:
        The :class:`~interp.models.attn_only.AttnOnlyTransformer`, in eval mode, gradients
        off.

    Example:
        >>> emb = np.eye(3)
        >>> m = toy_model(emb, np.eye(3), np.eye(3), np.eye(3), vocab=["a", "b", "c"])
        >>> m(m.to_tokens("a b c")).shape
        torch.Size([1, 3, 3])

    Raises:
        InterpError: when the matrices' shapes do not fit together (both shapes
            are named), are empty, or contain non-finite entries.
    """
    E = torch.as_tensor(_as_matrix("W_E", W_E), dtype=dtype)
    Q, K, V = (_per_head(n, W, dtype) for n, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)))
    d_vocab, d_model = E.shape
    if Q.shape != K.shape or Q.shape != V.shape:
        raise InterpError(
            f"W_Q {tuple(Q.shape)}, W_K {tuple(K.shape)} and W_V {tuple(V.shape)} must have "
            "the same shape in this toy (one d_head for queries, keys and values)"
        )
    n_layers, n_heads, rows, d_head = Q.shape
    if rows != d_model:
        raise InterpError(
            f"shape mismatch: W_E is {tuple(E.shape)} (d_model={d_model}) but W_Q is "
            f"{tuple(Q.shape)} with {rows} input rows; they must match"
        )
    O = None if W_O is None else _per_head("W_O", W_O, dtype)
    if O is not None and O.shape != (n_layers, n_heads, d_head, d_model):
        raise InterpError(
            f"W_O has shape {tuple(O.shape)}; expected {(n_layers, n_heads, d_head, d_model)} "
            "([n_layers, n_heads, d_head, d_model])"
        )
    cfg = AttnOnlyConfig(
        n_layers=n_layers,
        n_heads=n_heads,
        d_model=d_model,
        d_head=d_head,
        d_vocab=d_vocab,
        n_ctx=None,
        normalization_type=None,
        positional_embedding_type="none",
        attention_dir="causal" if causal else "bidirectional",
        use_residual=residual,
        use_W_O=O is not None,
        use_unembed=False,
        vocab=tuple(vocab) if vocab is not None else None,
        model_name="toy",
        dtype=dtype,
    )
    model = AttnOnlyTransformer(cfg).to(dtype)
    with torch.no_grad():
        model.embed.W_E.copy_(E)
        for layer, block in enumerate(model.blocks):
            block.attn.W_Q.copy_(Q[layer])
            block.attn.W_K.copy_(K[layer])
            block.attn.W_V.copy_(V[layer])
            if O is not None:
                block.attn.W_O.copy_(O[layer])
    model.requires_grad_(False)
    return model.eval()

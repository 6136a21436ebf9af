"""The four fundamental subspaces of a matrix: what a linear map reads and ignores.

Our code uses the row-vector convention: a query is ``q = x @ W_Q`` with
``W_Q`` of shape ``[d_in, d_out]``. The article's linear-algebra notation uses
column vectors, ``q^T = M x^T`` with ``M = W_Q^T``. :func:`subspaces` takes the
matrix in *column-vector* form ``M [d_out, d_in]`` (pass ``W.T`` for a row-vector
weight, or use ``convention="row"``), and reports, from one SVD:

* ``row_space`` ``[rank, d_in]``: the input directions the map reads;
* ``null_space`` ``[d_in - rank, d_in]``: input directions that contribute zero
  (adding one to an input leaves the output unchanged);
* ``column_space`` ``[rank, d_out]``: the outputs the map can reach;
* ``left_null_space`` ``[d_out - rank, d_out]``: output directions it never produces.

Bases are stored as orthonormal *rows*. Rank plus nullity equals ``d_in``
by construction. The rank tolerance defaults to NumPy's ``matrix_rank`` rule:
``sigma_max * max(d_out, d_in) * eps(dtype)``.

Example:
    >>> s = subspaces([[1, 0, 1], [0, 1, 1]])
    >>> s.rank, s.nullity
    (2, 1)
    >>> (s.null_space / s.null_space[0, 0]).round(6)  # the direction (1, 1, -1)
    array([[ 1.,  1., -1.]])
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import numpy as np

from interp.core.errors import InterpError
from interp.core.head_checks import check_layer_head
from interp.core.protocol import HookedModel


@dataclasses.dataclass(frozen=True)
class Subspaces:
    """Orthonormal bases (as rows) of the four fundamental subspaces of ``M [d_out, d_in]``.

    Built from a *thin* SVD ``M = U diag(S) Vh`` (``U [d_out, k]``, ``Vh [k, d_in]``,
    ``k = min(d_out, d_in)``): the row and column spaces are slices of it. The
    two complements can be much larger than the matrix (the null space of a
    ``128 x 12,288`` query map is 12,160 vectors of 12,288 numbers), so
    ``null_space`` and ``left_null_space`` are computed on first access and
    kept; ``nullity`` never needs them. Made by :func:`subspaces`,
    :func:`factored_subspaces` and :func:`head_subspaces`.

    Attributes:
        rank: How many singular values are above ``tol``.
        singular_values: ``[min(d_out, d_in)]``, descending.
        tol: The rank tolerance used.
        U: ``[d_out, k]`` left singular vectors (thin).
        Vh: ``[k, d_in]`` right singular vectors (thin).
        row_space: ``[rank, d_in]``: the input directions the map reads.
        null_space: ``[d_in - rank, d_in]``: input directions that contribute zero.
        column_space: ``[rank, d_out]``: the outputs the map can reach.
        left_null_space: ``[d_out - rank, d_out]``: output directions it never produces.
        nullity: ``d_in - rank``.
        shape: ``(d_out, d_in)`` of the analysed column-vector matrix.
    """

    rank: int
    singular_values: np.ndarray  # [min(d_out, d_in)], descending
    tol: float
    U: np.ndarray  # [d_out, k] left singular vectors (thin)
    Vh: np.ndarray  # [k, d_in] right singular vectors (thin)

    @property
    def row_space(self) -> np.ndarray:  # [rank, d_in]
        return self.Vh[: self.rank]

    @property
    def column_space(self) -> np.ndarray:  # [rank, d_out]
        return self.U[:, : self.rank].T

    @functools.cached_property
    def null_space(self) -> np.ndarray:  # [d_in - rank, d_in]
        """Input directions the map sends to zero (computed on first access)."""
        return np.concatenate([self.Vh[self.rank :], _complement(self.Vh, self.Vh.shape[1])])

    @functools.cached_property
    def left_null_space(self) -> np.ndarray:  # [d_out - rank, d_out]
        """Output directions the map never produces (computed on first access)."""
        return np.concatenate([self.U[:, self.rank :].T, _complement(self.U.T, self.U.shape[0])])

    @property
    def nullity(self) -> int:
        return int(self.Vh.shape[1] - self.rank)

    @property
    def shape(self) -> tuple[int, int]:
        """``(d_out, d_in)`` of the analysed column-vector matrix."""
        return int(self.U.shape[0]), int(self.Vh.shape[1])


def _to_numpy(W: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(W, torch.Tensor):
            W = W.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    arr = np.asarray(W)
    if arr.dtype.kind not in "fiub":
        raise InterpError(f"matrix must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.float64) if arr.dtype.kind in "iub" else arr


def subspaces(
    W: Any, *, tol: float | None = None, convention: Literal["column", "row"] = "column"
) -> Subspaces:
    """Rank and orthonormal bases of the row, null, column and left-null spaces of ``W``.

    From one SVD; rank plus nullity equals ``d_in`` by construction (module docstring).

    Args:
        W: A 2-D numpy array or torch tensor. With ``convention="column"``
            (default, the article's notation) ``W`` is ``M [d_out, d_in]`` acting as
            ``y = M x``. With ``convention="row"`` it is a weight ``[d_in, d_out]``
            acting as ``y = x @ W`` (our code's convention) and is transposed first.
        tol: Singular values at or below this count as zero. ``None``:
            ``sigma_max * max(shape) * eps(dtype)``, NumPy's ``matrix_rank`` rule.
        convention: How ``W`` maps: ``'column'`` (default: ``y = M x``) or ``'row'``
            (``y = x @ W``). Not the glossary's ``convention`` (a stripe's score).

    Returns:
        A :class:`Subspaces` of the column-vector matrix.

    Raises:
        InterpError: for non-2-D, empty or non-finite input, a negative ``tol``, or a
            ``convention`` other than ``'column'`` or ``'row'``.
    """
    M = _to_numpy(W)
    if M.ndim != 2:
        raise InterpError(f"subspaces needs a 2-D matrix, got shape {M.shape}")
    if M.size == 0:
        raise InterpError(f"subspaces needs a non-empty matrix, got shape {M.shape}")
    if not np.isfinite(M).all():
        raise InterpError("matrix contains NaN or infinite entries")
    if convention == "row":
        M = M.T
    elif convention != "column":
        raise InterpError(f"convention must be 'column' or 'row', got {convention!r}")
    d_out, d_in = M.shape
    # Thin SVD: the complements (null spaces) are built only if read (Subspaces).
    U, S, Vh = np.linalg.svd(M, full_matrices=False)
    if tol is None:
        smax = float(S[0]) if S.size else 0.0
        tol = smax * max(d_out, d_in) * float(np.finfo(M.dtype).eps)
    elif tol < 0:
        raise InterpError(f"tol must be non-negative, got {tol}")
    rank = int((S > tol).sum())
    return Subspaces(rank=rank, singular_values=S, tol=float(tol), U=U, Vh=Vh)


def null_space_dimension(W: Any, *, convention: Literal["column", "row"] = "column") -> int:
    """``d_in - rank`` for a matrix too large to want its full null-space basis.

    Uses singular values only (no ``d_in x d_in`` basis), so a ``12,288 x 128``
    query map takes well under a second. The rank tolerance is :func:`subspaces`'s default.

    Args:
        W: A 2-D numpy array or torch tensor, in the form ``convention`` says.
        convention: How ``W`` maps: ``'column'`` (default: ``M [d_out, d_in]``, ``y = M
            x``) or ``'row'`` (a weight ``[d_in, d_out]``, ``y = x @ W``).

    Returns:
        The nullity: how many input directions the map sends to zero.

    Raises:
        InterpError: as :func:`subspaces`.
    """
    M = _to_numpy(W)
    if M.ndim != 2 or M.size == 0:
        raise InterpError(f"need a non-empty 2-D matrix, got shape {M.shape}")
    if not np.isfinite(M).all():
        raise InterpError("matrix contains NaN or infinite entries")
    if convention not in ("column", "row"):
        raise InterpError(f"convention must be 'column' or 'row', got {convention!r}")
    if convention == "row":
        M = M.T
    S = np.linalg.svd(M, compute_uv=False)
    tol = float(S[0]) * max(M.shape) * float(np.finfo(M.dtype).eps)
    return int(M.shape[1] - (S > tol).sum())


def _complement(basis: np.ndarray, dim: int) -> np.ndarray:
    """Orthonormal rows spanning the orthogonal complement of ``basis`` (orthonormal rows)."""
    if basis.shape[0] == 0:
        return np.eye(dim)
    if basis.shape[0] >= dim:
        return np.zeros((0, dim), dtype=basis.dtype)
    q, _ = np.linalg.qr(basis.T, mode="complete")  # [dim, dim]; first columns span basis
    return q[:, basis.shape[0] :].T


def factored_subspaces(A: Any, B: Any, *, tol: float | None = None) -> Subspaces:
    """:func:`subspaces` of ``M = A @ B`` (column convention) from its factors.

    ``A [d_out, r]`` and ``B [r, d_in]`` with small ``r``: the SVD is taken of
    the ``r x r`` core after QR of each factor, so ``M`` itself is never formed;
    only the null-space bases (which are ``d - rank`` vectors long) are.

    Args:
        A: The left factor, ``[d_out, r]`` (numpy array or torch tensor).
        B: The right factor, ``[r, d_in]``.
        tol: Singular values at or below this count as zero. ``None``:
            ``sigma_max * max(d_out, d_in) * eps(dtype)``.

    Returns:
        A :class:`Subspaces` of ``A @ B``.

    Raises:
        InterpError: for factors that are not 2-D, do not chain, or are not finite.
    """
    A, B = _to_numpy(A), _to_numpy(B)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise InterpError(f"factors must chain as [d_out, r] @ [r, d_in], got {A.shape}, {B.shape}")
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        raise InterpError("factors contain NaN or infinite entries")
    d_out, d_in = A.shape[0], B.shape[1]
    qa, ra = np.linalg.qr(A)  # A = qa ra
    qb, rb = np.linalg.qr(B.T)  # B = rb^T qb^T
    u, S, vh = np.linalg.svd(ra @ rb.T)
    U, Vh = qa @ u, vh @ qb.T  # M = U diag(S) Vh
    if tol is None:
        smax = float(S[0]) if S.size else 0.0
        tol = smax * max(d_out, d_in) * float(np.finfo(U.dtype).eps)
    rank = int((S > tol).sum())
    return Subspaces(rank=rank, singular_values=S, tol=float(tol), U=U, Vh=Vh)


COMPONENTS = ("Q", "K", "V", "O", "QK", "OV")


def head_subspaces(model: HookedModel, *, layer: int, head: int, component: str = "Q") -> Subspaces:
    """Subspaces of one head's map, in residual-stream coordinates (column convention).

    ``component`` selects the map ``M`` (input on the right, ``y = M x``):

    * ``Q``, ``K``, ``V``: ``W^T [d_head, d_model]``; the null space holds the
      residual directions this head's queries / keys / values ignore.
    * ``O``: ``W_O^T [d_model, d_head]``; the column space holds the residual
      directions the head can write, the left null space those it never writes.
    * ``QK``: ``W_K W_Q^T [d_model, d_model]``, taking a query-side residual to
      the key-side direction it matches: the null space holds query directions
      that change no score, the column space the key directions that can be matched.
    * ``OV``: ``W_O^T W_V^T [d_model, d_model]``: source residual to written residual.

    For QK and OV the factors are used directly (:func:`factored_subspaces`).
    On models with LayerNorm these are maps of the *normalised* input
    (``blocks.{l}.ln1.hook_normalized``), which is what the head reads.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        layer: A block index: the head's layer.
        head: A head index within ``layer``.
        component: A named part of the model: the head's map, ``'Q'`` (default), ``'K'``,
            ``'V'``, ``'O'``, ``'QK'`` or ``'OV'``.

    Returns:
        A :class:`Subspaces` of the map.

    Example:
        >>> from interp.models import load_induction_model
        >>> s = head_subspaces(load_induction_model(), layer=1, head=1, component="Q")
        >>> s.rank, s.nullity  # d_head = 32 read directions of d_model = 128
        (32, 96)

    Raises:
        InterpError: for a layer or head out of range, or an unknown ``component``.
    """
    from interp.runtime import head_weight

    layer, head = check_layer_head(model, layer, head)
    if component not in COMPONENTS:
        raise InterpError(f"component must be one of {', '.join(COMPONENTS)}, got {component!r}")

    def w(name: str) -> np.ndarray:
        return _to_numpy(head_weight(model, name)[layer, head].double())

    if component in ("Q", "K", "V"):
        return subspaces(w(f"W_{component}").T)
    if component == "O":
        return subspaces(w("W_O").T)
    if component == "QK":
        return factored_subspaces(w("W_K"), w("W_Q").T)
    return factored_subspaces(w("W_O").T, w("W_V").T)

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
from typing import Any, Literal

import numpy as np

from interp.errors import InterpError


@dataclasses.dataclass(frozen=True)
class Subspaces:
    """Orthonormal bases (as rows) of the four fundamental subspaces of ``M [d_out, d_in]``."""

    rank: int
    singular_values: np.ndarray  # [min(d_out, d_in)], descending
    tol: float
    row_space: np.ndarray  # [rank, d_in]
    null_space: np.ndarray  # [d_in - rank, d_in]
    column_space: np.ndarray  # [rank, d_out]
    left_null_space: np.ndarray  # [d_out - rank, d_out]

    @property
    def nullity(self) -> int:
        return int(self.null_space.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """``(d_out, d_in)`` of the analysed column-vector matrix."""
        return int(self.column_space.shape[1]), int(self.row_space.shape[1])


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

    Args:
        W: a 2-D numpy array or torch tensor. With ``convention="column"``
            (default, the article's notation) ``W`` is ``M [d_out, d_in]`` acting as
            ``y = M x``. With ``convention="row"`` it is a weight ``[d_in, d_out]``
            acting as ``y = x @ W`` (our code's convention) and is transposed first.
        tol: singular values at or below this count as zero. Default:
            ``sigma_max * max(shape) * eps(dtype)``.

    Raises:
        InterpError: for non-2-D, empty or non-finite input, or a negative ``tol``.
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
    # full_matrices=True gives complete bases for the null spaces in one factorisation.
    U, S, Vh = np.linalg.svd(M, full_matrices=True)
    if tol is None:
        smax = float(S[0]) if S.size else 0.0
        tol = smax * max(d_out, d_in) * float(np.finfo(M.dtype).eps)
    elif tol < 0:
        raise InterpError(f"tol must be non-negative, got {tol}")
    rank = int((S > tol).sum())
    return Subspaces(
        rank=rank,
        singular_values=S,
        tol=float(tol),
        row_space=Vh[:rank],
        null_space=Vh[rank:],
        column_space=U[:, :rank].T,
        left_null_space=U[:, rank:].T,
    )


def null_space_dimension(W: Any, *, convention: Literal["column", "row"] = "column") -> int:
    """``d_in - rank`` for a matrix too large to want its full null-space basis.

    Uses singular values only (no ``d_in x d_in`` basis), so a ``12,288 x 128``
    query map takes well under a second.

    Raises:
        InterpError: as :func:`subspaces`.
    """
    M = _to_numpy(W)
    if M.ndim != 2 or M.size == 0:
        raise InterpError(f"need a non-empty 2-D matrix, got shape {M.shape}")
    if not np.isfinite(M).all():
        raise InterpError("matrix contains NaN or infinite entries")
    if convention == "row":
        M = M.T
    S = np.linalg.svd(M, compute_uv=False)
    tol = float(S[0]) * max(M.shape) * float(np.finfo(M.dtype).eps)
    return int(M.shape[1] - (S > tol).sum())

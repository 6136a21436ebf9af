"""Fundamental subspaces: property-based on random matrices, and the article's examples."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp import InterpError
from interp.analysis.heads.subspace import factored_subspaces, null_space_dimension, subspaces


def random_matrix(d_out, d_in, rank, eps, seed):
    rng = np.random.default_rng(seed)
    rank = min(rank, d_out, d_in)
    M = rng.standard_normal((d_out, rank)) @ rng.standard_normal((rank, d_in))
    return M + eps * rng.standard_normal((d_out, d_in)), rank


def orthonormal(B):
    # float64 SVD bases, entries of order 1 at most: 1e-9 is about 1e7 ulps of that scale
    return np.allclose(B @ B.T, np.eye(B.shape[0]), atol=1e-9)


@settings(max_examples=150, deadline=None)
@given(
    d_out=st.integers(1, 12),
    d_in=st.integers(1, 12),
    rank=st.integers(0, 12),
    seed=st.integers(0, 10_000),
    torch_input=st.booleans(),
)
def test_exactly_low_rank_matrices(d_out, d_in, rank, seed, torch_input):
    M, r = random_matrix(d_out, d_in, rank, 0.0, seed)
    s = subspaces(torch.tensor(M) if torch_input else M)
    assert s.rank == r
    assert s.rank + s.nullity == d_in
    assert s.column_space.shape[0] + s.left_null_space.shape[0] == d_out
    for B in (s.row_space, s.null_space, s.column_space, s.left_null_space):
        assert orthonormal(B)
    scale = max(1.0, np.abs(M).max())
    # np.abs(...).max(initial=0) handles empty null spaces (full-rank inputs)
    assert np.abs(M @ s.null_space.T).max(initial=0) <= 1e-9 * scale * d_in
    assert np.abs(s.left_null_space @ M).max(initial=0) <= 1e-9 * scale * d_out
    # row space and null space together span the input space
    full = np.concatenate([s.row_space, s.null_space])
    assert orthonormal(full) and full.shape == (d_in, d_in)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 10_000), exponent=st.integers(6, 9))
def test_nearly_rank_deficient(n, seed, exponent):
    """A perturbation far below the tolerance is rank-deficient; far above it, full rank."""
    M, r = random_matrix(n, n, n - 1, 0.0, seed)
    tiny = M + 10.0 ** -(exponent + 11) * np.random.default_rng(seed).standard_normal((n, n))
    assert subspaces(tiny).rank == n - 1
    # far above: 10^-exponent along M's own null directions (left u, right v), so the
    # smallest singular value is exactly that; + eps * I moves it by eps * |u . v|, which can
    # be 1e-3 of eps (n=7, seed=456: 6.8e-10 against a tolerance of 1e-9), on every CPU
    U, _, Vt = np.linalg.svd(M)
    big = M + 10.0**-exponent * np.outer(U[:, -1], Vt[-1])
    s = subspaces(big, tol=10.0 ** -(exponent + 3))
    assert s.rank == n and s.nullity == 0 and s.null_space.shape == (0, n)


@settings(max_examples=40, deadline=None)
@given(d=st.integers(2, 16), r=st.integers(1, 6), seed=st.integers(0, 1000))
def test_factored_matches_dense(d, r, seed):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((d, r)), rng.standard_normal((r, d))
    f, s = factored_subspaces(A, B), subspaces(A @ B)
    assert f.rank == s.rank == min(r, d)
    np.testing.assert_allclose(f.singular_values[: f.rank], s.singular_values[: s.rank], rtol=1e-8)
    assert np.abs((A @ B) @ f.null_space.T).max(initial=0) < 1e-8 * np.abs(A @ B).max() * d


def test_row_convention_is_the_transpose():
    W = np.random.default_rng(0).standard_normal((6, 2))  # x @ W, d_in = 6
    s = subspaces(W, convention="row")
    assert s.shape == (2, 6) and s.nullity == 4
    assert np.abs(s.null_space @ W).max() < 1e-12  # float64, entries of order 1: ~1e4 ulps


def test_article_example():
    s = subspaces([[1, 0, 1], [0, 1, 1]])
    n = s.null_space[0] / s.null_space[0, 0]
    np.testing.assert_allclose(n, [1, 1, -1])
    M, e = np.array([[1, 0, 1], [0, 1, 1.0]]), np.array([1, 2, 3.0])
    np.testing.assert_allclose(M @ (e + n), M @ e)
    np.testing.assert_allclose(M @ e, [4, 5])


def test_query_map_12288_by_128():
    """The article's count, against numpy's own rank (and on a rank-deficient matrix)."""
    W = np.random.default_rng(0).standard_normal((12_288, 128)).astype(np.float32)
    assert null_space_dimension(W, convention="row") == 12_288 - np.linalg.matrix_rank(W) == 12_160
    W[:, 100:] = W[:, :28] @ np.random.default_rng(1).standard_normal((28, 28))  # rank 100
    assert null_space_dimension(W, convention="row") == 12_288 - np.linalg.matrix_rank(W) == 12_188


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.ones(3), "2-D"),
        (np.ones((2, 2, 2)), "2-D"),
        (np.zeros((0, 3)), "non-empty"),
        (np.array([[np.nan, 1.0]]), "NaN"),
        (np.array([[np.inf, 1.0]]), "NaN or infinite"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(InterpError, match=match):
        subspaces(bad)


def test_full_rank_square_has_no_null_space():
    s = subspaces(np.eye(4))
    assert s.nullity == 0 and s.null_space.shape == (0, 4)

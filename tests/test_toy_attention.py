"""The numpy reference head and the hooked toy model built from matrices."""

import numpy as np
import pytest
import torch

from interp import InterpError
from interp.models.toy import attention, softmax, toy_model


def test_softmax_is_shift_invariant_and_stable():
    z = np.array([[1000.0, 999.0, 998.0]])
    np.testing.assert_allclose(softmax(z), softmax(z - 1000.0))
    assert np.isfinite(softmax(z)).all()


def test_reference_head_rows_are_distributions():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 4))
    A, H = attention(X, *(rng.standard_normal((4, 3)) for _ in range(3)))
    np.testing.assert_allclose(A.sum(-1), 1.0)
    assert H.shape == (5, 3)


def test_causal_mask_zeroes_future_and_keeps_self():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((6, 4))
    A, _ = attention(X, np.eye(4), np.eye(4), np.eye(4), causal=True)
    assert np.all(A[np.triu_indices(6, 1)] == 0.0)
    assert np.all(np.diag(A) > 0)
    assert A[0, 0] == 1.0


@pytest.mark.parametrize(
    "args, match",
    [
        (
            (np.ones((3, 4)), np.ones((3, 2)), np.ones((4, 2)), np.ones((4, 2))),
            r"X is \(3, 4\).*Wq is \(3, 2\)",
        ),
        (
            (np.ones((3, 4)), np.ones((4, 2)), np.ones((4, 3)), np.ones((4, 2))),
            r"Wq is \(4, 2\) and Wk is \(4, 3\)",
        ),
        ((np.ones(4), np.eye(4), np.eye(4), np.eye(4)), "2-D"),
        ((np.zeros((0, 4)), np.eye(4), np.eye(4), np.eye(4)), "empty"),
        ((np.full((2, 4), np.nan), np.eye(4), np.eye(4), np.eye(4)), "NaN"),
    ],
)
def test_reference_head_bad_input(args, match):
    with pytest.raises(InterpError, match=match):
        attention(*args)


def test_toy_model_matches_reference_and_hooks():
    rng = np.random.default_rng(2)
    E = rng.standard_normal((5, 4))
    Wq, Wk, Wv = (rng.standard_normal((4, 4)) for _ in range(3))
    model = toy_model(E, Wq, Wk, Wv, vocab=list("abcde"))
    tokens = model.to_tokens("a c e b")
    out, cache = model.run_with_cache(tokens)
    A, H = attention(E[[0, 2, 4, 1]], Wq, Wk, Wv)
    # the toy model and the reference are float64, values of order 1: 1e-12 is about 1e4 ulps
    np.testing.assert_allclose(cache["blocks.0.attn.hook_pattern"][0, 0].numpy(), A, atol=1e-12)
    np.testing.assert_allclose(cache["blocks.0.attn.hook_z"][0, :, 0].numpy(), H, atol=1e-12)
    # No output projection and no residual: the block output is the mixture itself.
    np.testing.assert_allclose(out[0].numpy(), H, atol=1e-12)
    assert model.W_Q.shape == (1, 1, 4, 4)
    assert model.W_O.shape == (1, 1, 4, 4)
    np.testing.assert_allclose(model.W_O[0, 0].numpy(), np.eye(4))


def test_toy_model_with_output_projection_and_residual():
    rng = np.random.default_rng(3)
    E = rng.standard_normal((3, 2))
    Wq, Wk, Wv, Wo = (rng.standard_normal((2, 2)) for _ in range(4))
    model = toy_model(E, Wq, Wk, Wv, Wo, residual=True)
    out = model(torch.tensor([[0, 1, 2]]))[0].numpy()
    _, H = attention(E, Wq, Wk, Wv)
    np.testing.assert_allclose(out, E + H @ Wo, atol=1e-12)  # float64, as above


def test_hook_that_edits_pattern_changes_output_as_predicted():
    """Force bank to attend only to 'river': the output must become river's value."""
    E = np.array([[0, 0, 0, 1.0], [0, 1, 0, 0.2], [1, 0, 0, 0.2], [0.5, 0.5, 0.8, 0.2]])
    model = toy_model(E, np.eye(4), np.eye(4), np.eye(4), vocab=["the", "river", "money", "bank"])
    tokens = model.to_tokens("the river bank")

    def one_hot_on_river(pattern, hook):
        pattern = torch.zeros_like(pattern)
        pattern[:, :, -1, 1] = 1.0
        pattern[:, :, :-1, 0] = 1.0
        return pattern

    out = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", one_hot_on_river)])
    # float64 sums with one weight of 1 and the rest 0: exact, 1e-12 only a floor
    np.testing.assert_allclose(out[0, -1].numpy(), E[1], atol=1e-12)
    np.testing.assert_allclose(out[0, 0].numpy(), E[0], atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(W_E=np.eye(4), W_Q=np.eye(3), W_K=np.eye(3), W_V=np.eye(3)),
            r"W_E is \(4, 4\).*W_Q is",
        ),
        (dict(W_E=np.eye(4), W_Q=np.eye(4), W_K=np.ones((4, 2)), W_V=np.eye(4)), "same shape"),
        (
            dict(W_E=np.eye(4), W_Q=np.ones((4, 2)), W_K=np.ones((4, 2)), W_V=np.ones((4, 2))),
            "without an output projection",
        ),
        (
            dict(W_E=np.eye(2), W_Q=np.eye(2), W_K=np.eye(2), W_V=np.eye(2), W_O=np.ones((3, 2))),
            "W_O has shape",
        ),
        (
            dict(
                W_E=np.array([[np.inf, 0.0], [0.0, 1.0]]),
                W_Q=np.eye(2),
                W_K=np.eye(2),
                W_V=np.eye(2),
            ),
            "NaN or infinite",
        ),
    ],
)
def test_toy_model_bad_shapes(kwargs, match):
    with pytest.raises(InterpError, match=match):
        toy_model(**kwargs)


def test_unknown_token_and_empty_sentence():
    model = toy_model(np.eye(2), np.eye(2), np.eye(2), np.eye(2), vocab=["bank", "river"])
    with pytest.raises(InterpError, match=r"unknown token 'banc'; vocabulary: bank, river"):
        model.to_tokens("river banc")
    with pytest.raises(InterpError, match="empty sentence"):
        model.to_tokens("   ")
    with pytest.raises(InterpError, match="outside the vocabulary"):
        model(torch.tensor([[0, 5]]))
    with pytest.raises(InterpError, match="empty batch"):
        model(torch.zeros((1, 0), dtype=torch.long))
    with pytest.raises(InterpError, match="integer ids"):
        model(torch.zeros((1, 2)))

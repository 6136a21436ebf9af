"""Null-space probes and read fractions on real hooked models (ours, a bridge, a toy head)."""

import numpy as np
import pytest
import torch
from conftest import native_bridge

from interp import InterpError
from interp.analysis.heads.null_probe import null_space_probe, read_fraction
from interp.analysis.heads.scores import probe_tokens
from interp.analysis.heads.subspace import head_subspaces
from interp.models import load_induction_model
from interp.models.toy import toy_model


@pytest.fixture(scope="module")
def induction():
    return load_induction_model()


@pytest.fixture(scope="module")
def bridge():
    return native_bridge(d_head=4, n_ctx=40, d_vocab=30)


def check_probe(df, component="Q"):
    null, row = df[df.space == "null_space"], df[df.space == "row_space"]
    own = {"Q": "d_query", "K": "d_key", "V": "d_value"}[component]
    assert null[own].max() < 1e-5  # the map cannot see null directions
    assert row[own].min() > 0.05  # ... but does see row-space directions
    if component == "Q":
        assert null["d_pattern_fixed_keys"].max() < 1e-5
        assert row["d_pattern_fixed_keys"].max() > 1e-3
    # The direction is still in the model: other parts react to it.
    assert null["d_output"].max() > 1e-3


def test_probe_on_the_induction_model(induction):
    tokens = probe_tokens(induction, n=8)
    df = null_space_probe(induction, tokens, layer=1, head=1, component="Q")
    check_probe(df)
    assert (df["label"] == "L1H1").all() and (df["component"] == "Q").all()
    assert df.attrs["hook"] == "blocks.1.ln1.hook_normalized"
    assert df.attrs["nullity"] == 128 - 32
    null = df[df.space == "null_space"]
    assert null["d_key"].max() > 0.01 and null["d_other_queries"].max() > 0.01


@pytest.mark.parametrize("component", ["Q", "K", "V"])
def test_probe_on_a_bridge(bridge, component):
    df = null_space_probe(
        bridge,
        probe_tokens(bridge, n=4),
        layer=1,
        head=2,
        component=component,
        n_directions=4,
        positions=[10, 20],
    )
    check_probe(df, component)
    assert df.attrs["hook"] == "blocks.1.ln1.hook_out"


def test_probe_on_a_toy_head():
    rng = np.random.default_rng(0)
    E = rng.standard_normal((6, 5))
    Wq = rng.standard_normal((5, 5))
    Wq[:, 3:] = 0.0  # queries use two of five coordinates... rank 3 query map
    model = toy_model(
        E, Wq, rng.standard_normal((5, 5)), rng.standard_normal((5, 5)), residual=True
    )
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5]])
    df = null_space_probe(model, tokens, layer=0, head=0, n_directions=3)
    assert df.attrs["hook"] == "blocks.0.hook_resid_pre" and df.attrs["nullity"] == 2
    null = df[df.space == "null_space"]
    # the toy model is float64, its weights of order 1: 1e-9 is about 1e7 ulps
    assert null["d_query"].max() < 1e-9 and null["d_pattern_fixed_keys"].max() < 1e-9


def test_head_subspaces_shapes(induction):
    q = head_subspaces(induction, layer=1, head=1, component="Q")
    assert q.rank == 32 and q.null_space.shape == (96, 128)
    qk = head_subspaces(induction, layer=1, head=1, component="QK")
    assert qk.rank == 32 and qk.column_space.shape == (32, 128)
    ov = head_subspaces(induction, layer=1, head=1, component="OV")
    W = (induction.W_V[1, 1] @ induction.W_O[1, 1]).detach().double().numpy()
    # the subspaces are float64 SVDs; W is a float32 product with entries below 0.1, so its
    # rounding (about 1e-8 of it) and the SVD's are far below 1e-6
    assert np.abs(ov.null_space @ W).max() < 1e-6  # sources the head never moves
    o = head_subspaces(induction, layer=1, head=1, component="O")
    assert o.column_space.shape == (32, 128)


def test_read_fraction(induction):
    df = read_fraction(induction, probe_tokens(induction, n=8))
    assert list(df.columns) == [
        "layer",
        "head",
        "label",
        "component",
        "rank",
        "read_fraction",
        "baseline",
    ]
    assert len(df) == 4 and df["read_fraction"].between(0, 1).all()
    assert (df["baseline"] == 32 / 128).all()
    one = read_fraction(induction, probe_tokens(induction, n=8), heads=["L1H1"], component="K")
    assert len(one) == 1


def test_bad_input(induction):
    tokens = probe_tokens(induction, n=2)
    with pytest.raises(InterpError, match="component must be Q, K or V"):
        null_space_probe(induction, tokens, layer=0, head=0, component="O")
    for bad in (float("nan"), 0.0, -1.0):
        with pytest.raises(InterpError, match="scale must be"):
            null_space_probe(induction, tokens, layer=0, head=0, scale=bad)
    with pytest.raises(InterpError, match="n_directions must be >= 1"):
        null_space_probe(induction, tokens, layer=0, head=0, n_directions=0)
    with pytest.raises(InterpError, match="layer 4 out of range"):
        null_space_probe(induction, tokens, layer=4, head=0)
    with pytest.raises(InterpError, match="positions"):
        null_space_probe(induction, tokens, layer=0, head=0, positions=[99])
    with pytest.raises(InterpError, match="component must be one of"):
        head_subspaces(induction, layer=0, head=0, component="X")
    full = toy_model(np.eye(3), np.eye(3), np.eye(3), np.eye(3))
    with pytest.raises(InterpError, match="null space is empty"):
        null_space_probe(full, torch.tensor([[0, 1, 2]]), layer=0, head=0)

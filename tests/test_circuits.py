"""QK/OV circuits, copying scores and composition scores, cross-checked against TransformerLens."""

import pytest
import torch
from conftest import native_bridge

from interp import InterpError
from interp.analysis.heads.composition import (
    composition_scores,
    composition_tensor,
    random_baseline,
)
from interp.analysis.heads.weight_circuits import (
    copying_score,
    copying_scores,
    diagonal_fraction,
    effective_embedding,
    k_composition_circuit,
    ov_circuit,
    qk_circuit,
)
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer


@pytest.fixture(scope="module")
def bridge():
    return native_bridge(n_layers=3, n_heads=2, d_vocab=24, seed=1)


def no_ln_model():
    cfg = AttnOnlyConfig(
        n_layers=2,
        n_heads=2,
        d_model=16,
        d_head=4,
        d_vocab=12,
        n_ctx=8,
        normalization_type=None,
        seed=0,
    )
    return AttnOnlyTransformer(cfg).eval()


def test_circuits_equal_explicit_products_without_layernorm():
    m = no_ln_model()
    E, U = m.W_E, m.W_U
    qk = qk_circuit(m, layer=1, head=0)
    torch.testing.assert_close(qk.AB, E @ m.W_Q[1, 0] @ m.W_K[1, 0].T @ E.T)
    pos = qk_circuit(m, layer=0, head=1, embedding="positional")
    torch.testing.assert_close(pos.AB, m.W_pos @ m.W_Q[0, 1] @ m.W_K[0, 1].T @ m.W_pos.T)
    ov = ov_circuit(m, layer=1, head=1)
    torch.testing.assert_close(ov.AB, E @ m.W_V[1, 1] @ m.W_O[1, 1] @ U)
    kc = k_composition_circuit(m, prev=(0, 1), induction=(1, 0))
    expect = (E @ m.W_Q[1, 0]) @ (E @ m.W_V[0, 1] @ m.W_O[0, 1] @ m.W_K[1, 0]).T
    torch.testing.assert_close(kc.AB, expect)
    assert ov.A.shape == (12, 4) and ov.B.shape == (4, 12)  # factored, never d_vocab^2 inside


def test_layernorm_rows_are_normalised(bridge):
    E = effective_embedding(bridge, layer=0)
    torch.testing.assert_close(E.mean(-1), torch.zeros(24), atol=1e-5, rtol=0)


def test_copying_score_and_diagonal_fraction_on_known_matrices():
    from transformer_lens import FactoredMatrix

    eye = FactoredMatrix(torch.eye(6)[:, :3] * 2, torch.eye(6)[:3])  # copies tokens 0..2
    assert copying_score(eye) == pytest.approx(1.0)
    neg = FactoredMatrix(-torch.eye(5), torch.eye(5))
    assert copying_score(neg) == pytest.approx(-1.0)
    assert diagonal_fraction(FactoredMatrix(torch.eye(5), torch.eye(5)), chunk=2) == 1.0
    perm = torch.eye(5)[[1, 2, 3, 4, 0]]
    assert diagonal_fraction(FactoredMatrix(perm, torch.eye(5))) == 0.0
    with pytest.raises(InterpError, match="square"):
        diagonal_fraction(FactoredMatrix(torch.ones(3, 2), torch.ones(2, 4)))


def test_copying_scores_table(bridge):
    df = copying_scores(bridge)
    assert list(df.columns) == ["layer", "head", "label", "copying_score", "top1_self_fraction"]
    assert df["copying_score"].between(-1, 1).all()


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_composition_matches_transformer_lens(bridge, kind):
    ours = composition_tensor(bridge, component=kind)
    theirs = bridge.all_composition_scores(kind).scores
    # composition scores are norm ratios, at most 1: float32 norms taken in another order
    # than TL's agree to a few ulps of that scale, so atol 1e-6 is 1e-6 of 1 (about 8 ulps)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    # and the same numbers on our own class holding the same weights
    mine = AttnOnlyTransformer.from_bridge(bridge)
    torch.testing.assert_close(
        composition_tensor(mine, component=kind), theirs, atol=1e-6, rtol=1e-5
    )


def test_composition_table_and_baseline(bridge):
    df = composition_scores(bridge, component="K")
    assert len(df) == 12  # pairs (earlier, later): 2*2 (L0,L1) + 2*2 (L0,L2) + 2*2 (L1,L2)
    assert (df["src_layer"] < df["layer"]).all()
    base = random_baseline(32, 8)
    assert abs(base - 1 / 32**0.5) < 0.08  # about 1/sqrt(d_model)
    assert (df["baseline"] == base).all()
    with pytest.raises(InterpError, match="component must be"):
        composition_scores(bridge, component="X")


def test_bad_layer_head():
    m = no_ln_model()
    with pytest.raises(InterpError, match="layer 5 out of range"):
        qk_circuit(m, layer=5, head=0)
    with pytest.raises(InterpError, match="head 3 out of range"):
        ov_circuit(m, layer=0, head=3)
    with pytest.raises(InterpError, match="earlier layer"):
        k_composition_circuit(m, prev=(1, 0), induction=(1, 1))
    with pytest.raises(InterpError, match="embedding must be"):
        qk_circuit(m, layer=0, head=0, embedding="rotary")
    with pytest.raises(InterpError, match="layer must be an integer, got float 1.5"):
        qk_circuit(m, layer=1.5, head=0)
    with pytest.raises(InterpError, match="layer must be an integer, got str '1'; pass layer=1"):
        qk_circuit(m, layer="1", head=0)
    with pytest.raises(InterpError, match="head must be an integer, got bool"):
        ov_circuit(m, layer=0, head=True)


def test_numpy_integer_indices_are_accepted():
    import numpy as np

    m = no_ln_model()
    torch.testing.assert_close(
        qk_circuit(m, layer=np.int64(1), head=np.int32(0)).AB, qk_circuit(m, layer=1, head=0).AB
    )


def test_fold_ln_false_uses_the_raw_weights(bridge):
    """ARENA's circuits: raw W_E / W_pos / W_U, no LayerNorm folded in."""
    W_E, W_U = bridge.W_E, bridge.W_U
    raw = ov_circuit(bridge, layer=1, head=0, fold_ln=False)
    torch.testing.assert_close(raw.AB, W_E @ bridge.W_V[1, 0] @ bridge.W_O[1, 0] @ W_U)
    qk = qk_circuit(bridge, layer=0, head=1, embedding="positional", fold_ln=False)
    P = bridge.W_pos
    torch.testing.assert_close(qk.AB, P @ bridge.W_Q[0, 1] @ bridge.W_K[0, 1].T @ P.T)
    folded = ov_circuit(bridge, layer=1, head=0)
    assert not torch.allclose(folded.AB, raw.AB)


def test_previous_position_attention_of_the_induction_models_previous_token_head(induction_model):
    from interp.analysis.heads.weight_circuits import previous_position_attention

    folded = previous_position_attention(
        qk_circuit(induction_model, layer=0, head=1, embedding="positional")
    )
    raw = previous_position_attention(
        qk_circuit(induction_model, layer=0, head=1, embedding="positional", fold_ln=False)
    )
    assert folded > 0.5 > 0.2 > raw  # raw W_pos is small: the raw circuit's rows are nearly flat
    ideal = torch.full((6, 6), -1e4)
    for q in range(1, 6):
        ideal[q, q - 1] = 0.0
    assert previous_position_attention(ideal, scale=1.0) == pytest.approx(1.0)


def test_pair_scores_equal_transformer_lens():
    from transformer_lens import FactoredMatrix
    from transformer_lens.utilities.matrix import composition_scores as tl_scores

    from interp.analysis.heads.composition import pair_scores

    g = torch.Generator().manual_seed(0)
    left = FactoredMatrix(torch.randn(16, 40, 8, generator=g), torch.randn(16, 8, 40, generator=g))
    right = FactoredMatrix(torch.randn(16, 40, 8, generator=g), torch.randn(16, 8, 40, generator=g))
    # norm ratios, at most 1: atol 1e-6 is 1e-6 of that scale (about 8 float32 ulps)
    torch.testing.assert_close(
        pair_scores(left, right), tl_scores(left, right, broadcast_dims=False), atol=1e-6, rtol=1e-5
    )

"""The trained one-head classifiers: the article's seed-0 run, the widget, the biased data."""

import numpy as np
import pytest
import torch

from interp import InterpError
from interp.experiments.bank_sense import sense_training as st
from interp.models.toy import OneHeadSense


@pytest.fixture(scope="module")
def fit():
    return st.train_sense_classifier()


def test_g_article_seed0_predictions_and_attention(fit):
    table = fit.table
    assert table["prediction"].tolist()[:2] == ["water", "finance"]
    rows = [st.rounded_attention(r) for r in table["bank_attention"][:2]]
    assert rows[0] == {"the": 0.0, "river": 1.0, "bank": 0.0}
    assert rows[1] == {"the": 0.0, "money": 1.0, "bank": 0.0}
    assert fit.losses[-1] < fit.losses[0]


def test_g_parameter_count(fit):
    groups = fit.model.parameter_groups()
    assert groups == {"embedding": 32, "W_Q": 64, "W_K": 64, "W_V": 64, "classifier": 18}
    assert sum(groups.values()) == 242 == sum(p.numel() for p in fit.model.parameters())


def test_g_training_is_deterministic_and_leaves_global_rng_alone(fit):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    again = st.train_sense_classifier(epochs=5)
    assert torch.rand(1) == before
    again2 = st.train_sense_classifier(epochs=5)
    for p, q in zip(again.model.parameters(), again2.model.parameters()):
        assert torch.equal(p, q)


def test_g_hooks_expose_the_attention(fit):
    model = fit.model
    ids = model.encode(["the", "river", "bank"])
    logits, cache = model.run_with_cache(ids[None])
    _, A = model(ids, return_attn=True)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"][0, 0], A)
    assert cache["blocks.0.attn.hook_q"].shape == (1, 3, 1, 8)
    assert model.W_Q.shape == (1, 1, 8, 8)


def test_h_biased_dataset_fits_arbitrary_labels():
    _, table = st.biased_dataset()
    assert table["context"].tolist() == ["river", "money", "vault", "salmon", "lawyer", "attorney"]
    assert table["assigned_label"].tolist() == ["water", "finance"] * 3
    # The model fits every assignment, including opposite labels for lawyer and attorney.
    assert (table["prediction"] == table["assigned_label"]).all()
    assert table["attention_to_context"].between(0, 1).all()


def test_f_walkthrough_trace_and_zero_gradient():
    w = st.SGDWalkthrough()
    assert np.all(w.parameters()["cls_bias"] == 0)
    p0 = w.parameters()
    t = w.trace(0)
    assert list(t) == [
        "1. sentence",
        "2. lookup",
        "3. qkv",
        "4. mixture",
        "5. prediction",
        "6. loss",
        "7. gradients",
        "8. update",
    ]
    # Tracing computes gradients but changes nothing yet.
    assert all(np.array_equal(p0[k], w.parameters()[k]) for k in p0)
    money = st.VOCAB.index("money")
    assert np.all(t["7. gradients"]["emb"][money] == 0.0)
    assert np.all(t["7. gradients"]["emb"][st.VOCAB.index("river")] != 0.0)
    # three float32 softmax weights sum to 1 within a few ulps of 1: rtol 1e-6 of 1
    np.testing.assert_allclose(t["4. mixture"]["weights"].sum(), 1.0, rtol=1e-6)
    w.apply_update()
    expected = t["8. update"]
    # p - lr * g in numpy against torch's SGD step: float32 rounds lr * g and the difference
    # (torch may fuse them), about an ulp of the larger of |p| and |lr * g|, so a parameter
    # near 0 after the step gets 1e-7 of that scale, not 1e-7 absolute
    before = t["7. gradients"]
    for k, v in w.parameters().items():
        scale = max(1.0, float(np.abs(p0[k]).max()), float(np.abs(w.lr * before[k]).max()))
        np.testing.assert_allclose(v, expected[k], rtol=1e-6, atol=1e-7 * scale)
    assert w.next_example == 1


def test_f_train_20_and_reset():
    w = st.SGDWalkthrough()
    p0 = w.parameters()
    hist = w.train(20)
    assert hist["sentence"].tolist()[:2] == ["the river bank", "the money bank"]
    assert len(hist) == 20 and w.updates == 20
    assert max(w.losses().values()) < hist["loss_before"].iloc[:2].min()
    w.reset()
    assert w.updates == 0
    assert all(np.array_equal(p0[k], w.parameters()[k]) for k in p0)
    with pytest.raises(InterpError, match="call trace"):
        w.apply_update()


def test_bad_training_input():
    with pytest.raises(InterpError, match="unknown token 'banc'"):
        st.train_sense_classifier([(("the", "banc"), 0)])
    with pytest.raises(InterpError, match="empty"):
        st.train_sense_classifier([])
    with pytest.raises(InterpError, match="must be one of"):
        st.biased_dataset([("river", "gravy")])
    with pytest.raises(InterpError, match="outside the vocabulary"):
        OneHeadSense(4)(torch.tensor([7]))

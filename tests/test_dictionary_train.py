"""Training a TopK dictionary: deterministic by seed, the same under any chunking, its
figures consistent with the splice, bad options refused before any work."""

import pytest
import torch

from interp.core.errors import InterpError
from interp.datasets import repeated_tokens
from interp.dictionaries import Dictionary, dictionary_report, train_dictionary
from interp.dictionaries.activations import hook_activations
from interp.models import load_model

HOOK = "blocks.1.hook_resid_pre"


@pytest.fixture(scope="module")
def model():
    return load_model("induction-2l")


@pytest.fixture(scope="module")
def tokens():
    return repeated_tokens(48, d_vocab=64, seq_len=48, repeats=None, seed=3).tokens


@pytest.fixture(scope="module")
def fit(model, tokens):
    return train_dictionary(model, tokens, hook=HOOK, n_features=96, k=4, epochs=3, batch_size=256)


def test_training_learns_and_reports(model, tokens, fit):
    D, r = fit.dictionary, fit.report
    assert (D.d_in, D.d_sae, D.k, D.architecture, D.hook_name) == (128, 96, 4, "topk", HOOK)
    # a random dictionary of the same shape explains far less than the trained one
    random = Dictionary.random(d_in=128, d_sae=96, architecture="topk", k=4, hook_name=HOOK)
    before = dictionary_report(model, tokens, random).fraction_variance_explained
    assert r.fraction_variance_explained > max(0.5, before + 0.3) and r.l0 <= 4
    assert abs(r.loss_with_error - r.clean_loss) < 1e-5  # the error kept: nothing changes
    assert r.loss_without_error > r.clean_loss
    # the reported variance explained is the one computed directly from the activations
    x = hook_activations(model, tokens, HOOK).double()
    with torch.no_grad():
        err = D.error(x.float()).double()
    fve = 1 - err.pow(2).sum() / (x - x.mean((0, 1))).pow(2).sum()
    assert abs(float(fve) - r.fraction_variance_explained) < 1e-5
    assert D.metadata["training"]["steps"] == fit.training["steps"] > 0


def test_deterministic_and_chunking_invariant(model, tokens, fit):
    again = train_dictionary(model, tokens, hook=HOOK, n_features=96, k=4, epochs=3, batch_size=256)
    assert torch.equal(again.dictionary.W_enc, fit.dictionary.W_enc)
    other = train_dictionary(
        model, tokens, hook=HOOK, n_features=96, k=4, epochs=3, batch_size=256, seed=1
    )
    assert not torch.equal(other.dictionary.W_enc, fit.dictionary.W_enc)
    # the report sums over chunks: a budget that splits the prompts gives the same figures.
    # The sums are float64, but each chunk's activations and logits are float32 passes over
    # fewer rows, which other kernels (AVX2) may round otherwise: the variance explained (a
    # ratio, scale 1) to 1e-6 of 1 (about 8 float32 ulps), not the float64 1e-9; the loss
    # (logsumexp - logit per token) to 1e-6 of the logits' size, not 1e-6 absolute
    r = fit.report
    small = dictionary_report(model, tokens, fit.dictionary, memory_budget=3_000_000)
    assert small.fraction_variance_explained == pytest.approx(
        r.fraction_variance_explained, abs=1e-6
    )
    with torch.no_grad():
        size = max(1.0, float(model(tokens).abs().max()))
    assert small.loss_without_error == pytest.approx(r.loss_without_error, abs=1e-6 * size)


def test_the_pass_stops_at_the_hook(model, tokens):
    """Nothing after the hook runs while activations are read (the forward is cut off)."""
    ran = []
    model.hook_dict["blocks.1.hook_resid_post"].add_hook(lambda x, hook: ran.append(1))
    try:
        hook_activations(model, tokens[:2], HOOK)
    finally:
        model.reset_hooks()
    assert ran == []


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(hook="blocks.9.hook_resid_pre"), "not a hook of this model"),
        (dict(hook="blocks.0.attn.hook_pattern"), "holds attention patterns"),
        (dict(k=200), "more than n_features"),
        (dict(epochs=0), "epochs"),
        (dict(lr=-1.0), "lr"),
        (dict(skip_columns=48), "leaves none"),
        (dict(memory_budget=10), "memory budget"),
    ],
)
def test_bad_options(model, tokens, kw, message):
    args = dict(hook=HOOK, n_features=96, k=4) | kw
    with pytest.raises(InterpError, match=message):
        train_dictionary(model, tokens, **args)

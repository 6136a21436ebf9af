"""The logit lens: each stage read through a freshly recomputed final norm; last stage = logits.

Checked against the model's own logits, against TransformerLens 4.3's
``tools.analysis.logit_lens`` (which recomputes the norm too: TL #1076) on
bridges, and against a hand computation on our attention-only model. The
memory bound is measured on SmolLM2 in test_pretrained.py.
"""

import pytest
import torch
import torch.nn.functional as F

from interp import InterpError
from interp.analysis import logit_lens
from interp.models import load_model
from interp.models.hf import random_gpt2, random_llama

MODELS = {
    "attn-only": lambda: load_model("induction-2l"),
    "gpt2": lambda: random_gpt2(2, vocab=30),
    "llama-gqa": lambda: random_llama(2, vocab=30),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def test_the_last_stage_is_the_models_own_prediction(model):
    tokens = torch.randint(2, 30, (2, 8), generator=torch.Generator().manual_seed(0))
    df = logit_lens(model, tokens, k=4)
    L = model.cfg.n_layers
    assert sorted(set(df["stage"])) == list(range(L + 1))
    assert df["stage_name"].iloc[0] == "embed" and set(df["position"]) == set(range(8))
    with torch.no_grad():
        logits = model(tokens).float()
    logp = F.log_softmax(logits, -1)
    last = df[df["stage"] == L]
    seq, pos = last["sequence"].to_numpy().copy(), last["position"].to_numpy().copy()
    top = logp[seq, pos].topk(4, -1)
    # The same norm and unembedding on the same vectors, in other row blocks: equal to
    # float32 rounding (other BLAS kernels, e.g. AVX2-only CPUs, round a row subset otherwise).
    # A log-probability is a logit minus a logsumexp: it moves by a few ulps of the logits'
    # size, so the bar is 1e-6 of that size (about 8 ulps), not 1e-6 absolute; a probability
    # exp(logp) moves by that much relative to itself (rtol, at least the old 1e-5), and
    # atol 1e-7 (of the probabilities' scale, 1) only covers those that underflow to 0.
    size = max(1.0, float(logits.abs().max()))
    for j in range(4):
        got = torch.tensor(last[f"p{j + 1}"].to_numpy())
        want = top.values[:, j].exp().float()
        torch.testing.assert_close(got, want, rtol=max(1e-5, 1e-6 * size), atol=1e-7)
    has = last["target_id"].notna().to_numpy()
    tgt = torch.tensor(last["target_id"].fillna(0).to_numpy(int))
    want = logp[seq, pos, tgt]
    got_logp = torch.tensor(last["target_logp"].to_numpy())[has]
    torch.testing.assert_close(got_logp, want[has].float(), rtol=1e-5, atol=1e-6 * size)
    assert last[~has]["position"].tolist() == [7, 7]  # the last position has no next token
    ranks = (logp[seq, pos] > want[:, None]).sum(-1) + 1
    assert last["target_rank"].to_numpy()[has].tolist() == ranks[has].tolist()


def test_equal_to_transformer_lens_on_bridges():
    """TransformerLens 4.3 tools.analysis.logit_lens(positions=None, return_type="log_probs")."""
    from transformer_lens.tools.analysis import logit_lens as tl_lens

    for model in (random_gpt2(2, vocab=30), random_llama(2, vocab=30)):
        tokens = torch.randint(2, 30, (2, 7), generator=torch.Generator().manual_seed(1))
        tl = tl_lens(model, tokens, positions=None, return_type="log_probs").values
        ours = logit_lens(model, tokens, k=2)
        got = torch.tensor(ours["target_logp"].to_numpy()).view(3, 2, 7)[:, :, :6]
        want = tl[:, :, :6].gather(-1, tokens[None, :, 1:, None].expand(3, 2, 6, 1))[..., 0]
        torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-5)


def test_each_stage_recomputes_its_own_norm():
    """By hand on our model: stage s is ln_final(resid_s) @ W_U + b_U, with resid_s's own scale."""
    model = load_model("induction-2l")
    tokens = torch.randint(1, 64, (2, 9), generator=torch.Generator().manual_seed(2))
    df = logit_lens(model, tokens, at=[4, -1], target=7)
    _, cache = model.run_with_cache(tokens)
    stages = [
        cache["blocks.0.hook_resid_pre"],
        *(cache[f"blocks.{l}.hook_resid_post"] for l in (0, 1)),
    ]
    for s, resid in enumerate(stages):
        x = resid[:, [4, 8]]
        x = (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        x = x * model.ln_final.w + model.ln_final.b
        logp = F.log_softmax(x @ model.W_U + model.b_U, -1)[..., 7]  # [batch, 2]
        got = df[df["stage"] == s].sort_values(["sequence", "position"])["target_logp"]
        torch.testing.assert_close(
            torch.tensor(got.to_numpy()).view(2, 2), logp.detach(), atol=1e-5, rtol=0
        )
    frozen_final_scale = cache["ln_final.hook_scale"][:, [4, 8]]
    assert not torch.allclose(stages[0][:, [4, 8]].std(-1, keepdim=True), frozen_final_scale)


def test_bad_input_and_the_cache_rule(minilm):
    model = load_model("induction-2l")
    tokens = torch.randint(1, 64, (2, 6))
    with pytest.raises(InterpError, match="k=65 is more than the vocabulary"):
        logit_lens(model, tokens, k=65)
    with pytest.raises(InterpError, match="at \\[6\\] out of range"):
        logit_lens(model, tokens, at=[6])
    with pytest.raises(InterpError, match="has no language-model head"):
        logit_lens(minilm, torch.tensor([[101, 2054, 102]]))
    gpt2 = random_gpt2(2, vocab=30)
    with pytest.raises(InterpError, match="is 2 tokens for this tokenizer"):
        logit_lens(gpt2, torch.tensor([[0, 3, 4]]), target="t5 t6")
    _, other = model.run_with_cache(tokens.flip(1))
    with pytest.raises(InterpError, match="does not belong to these tokens"):
        logit_lens(model, tokens, cache=other)

"""The positional kernel (issue 24): a head's mean score at each offset, checked against the
model's own forward pass.

In layer 0 the residual stream holds the token's embedding (plus its learned position), so
the kernel's mean over independently drawn query and key tokens is the mean, over every
(query token, key token) pair, of the scores ``hook_attn_scores`` holds in sequences built
to put those two tokens at that offset. That mean is taken here from real forward passes,
never from the kernel's own algebra (mean query and key vectors, the rotation).
"""

import itertools

import pytest
import torch
import transformers as T

import interp.analysis as A
from interp.core.errors import InterpError
from interp.models import load_model
from interp.models.hf import bridge_from_hf

SMALL = dict(
    num_hidden_layers=2,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    max_position_embeddings=64,
)
IDS = dict(vocab_size=40, bos_token_id=0, eos_token_id=1, pad_token_id=1)
RTOL = 1e-5  # of the largest score: float32 sums in another order


def _hf(cfg, cls, arch, **kw):
    torch.manual_seed(0)
    hf = getattr(T, cls)(getattr(T, cfg)(**IDS, **kw))
    with torch.no_grad():  # biases and norm weights start trivial: move every parameter
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return bridge_from_hf(hf, architecture_name=arch)


ROTARY = {
    "llama (GQA, biases)": lambda: _hf(
        "LlamaConfig",
        "LlamaForCausalLM",
        "meta-llama/Llama-3.2-1B",
        num_key_value_heads=2,
        attention_bias=True,
        **SMALL,
    ),
    "gpt-neox (partial rotary)": lambda: _hf(
        "GPTNeoXConfig", "GPTNeoXForCausalLM", "EleutherAI/pythia-70m", rotary_pct=0.25, **SMALL
    ),
}
TOKENS = [3, 7, 7, 11, 20]  # a distribution: 7 counts twice
D = 6  # offsets 0..D


def _pairs():
    ids, w = torch.unique(torch.tensor(TOKENS), return_counts=True)
    w = w.double() / w.sum()
    return [(int(a), int(b), float(w[i] * w[j])) for (i, a), (j, b) in itertools.product(
        enumerate(ids), enumerate(ids))]  # fmt: skip


def _scores(model, seqs):
    """``[batch, head, query, key]`` scores of layer 0, and the largest live one (masked
    entries hold -3.4e38)."""
    _, c = model.run_with_cache(torch.tensor(seqs), names_filter="blocks.0.attn.hook_attn_scores")
    s = c["blocks.0.attn.hook_attn_scores"].double()
    return s, float(s[s > -1e20].abs().max())


@pytest.mark.parametrize("kind", sorted(ROTARY))
def test_rotary_kernel_is_the_mean_score_of_a_forward_pass(kind):
    """Offsets d >= 1: query token a at position d, key token b at 0, in one sequence
    ``[b, a, a, ...]`` per pair; the score of a rotary model depends on the offset alone."""
    model = ROTARY[kind]()
    pairs = _pairs()
    s, top = _scores(model, [[b] + [a] * D for a, b, _ in pairs])
    w = torch.tensor([p[2] for p in pairs], dtype=torch.float64)
    worst = 0.0
    for h in range(model.cfg.n_heads):
        K = A.positional_kernel(model, layer=0, head=h, distribution=TOKENS, max_offset=D)
        want = torch.einsum("b,bd->d", w, s[:, h, 1:, 0])  # offsets 1..D
        got = torch.tensor(K["score"].to_numpy()[1:])
        worst = max(worst, float((got - want).abs().max()))
    assert worst < RTOL * top, worst


KINDS = {**ROTARY, "attn-only (learned positions)": lambda: load_model("induction-2l")}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kernel_at_offset_zero_is_a_tokens_score_with_itself(kind):
    """At d = 0 the query and the key are one position, so they hold one token: the kernel
    is the mean of the diagonal of the model's own scores over sequences ``[a] * (D + 1)``
    (every position, the learned ones averaged), not a pair of independent tokens."""
    model = KINDS[kind]()
    ids = sorted(set(TOKENS))
    w = torch.tensor([TOKENS.count(a) / len(TOKENS) for a in ids], dtype=torch.float64)
    s, top = _scores(model, [[a] * (D + 1) for a in ids])
    want = torch.einsum("a,ahp->h", w, s.diagonal(dim1=2, dim2=3)) / (D + 1)
    for h in range(model.cfg.n_heads):
        K = A.positional_kernel(model, layer=0, head=h, distribution=TOKENS, max_offset=D)
        assert float(K["score"].iloc[0]) == pytest.approx(float(want[h]), abs=RTOL * top)


def test_learned_kernel_is_the_mean_score_of_a_forward_pass():
    """Our attention-only model (learned positions): for every key position k and pair
    (a, b), the sequence of a's with b at k; the kernel at d averages query positions d..D."""
    model = load_model("induction-2l")
    pairs = _pairs()
    w = torch.tensor([p[2] for p in pairs], dtype=torch.float64)
    seqs = []
    for k in range(D + 1):
        for a, b, _ in pairs:
            seq = [a] * (D + 1)
            seq[k] = b
            seqs.append(seq)
    s, top = _scores(model, seqs)
    s = s.view(D + 1, len(pairs), model.cfg.n_heads, D + 1, D + 1)
    mean = torch.einsum("b,kbhqx->khqx", w, s)  # [key position, head, query, key]
    for h in range(model.cfg.n_heads):
        K = A.positional_kernel(model, layer=0, head=h, distribution=TOKENS, max_offset=D)
        for d in range(1, D + 1):
            want = torch.stack([mean[p - d, h, p, p - d] for p in range(d, D + 1)]).mean()
            got = float(K["score"].iloc[d])
            assert got == pytest.approx(float(want), rel=RTOL, abs=RTOL * top)
    # the previous-token head's kernel peaks at offset 1, over the whole vocabulary too
    prev = A.positional_kernel(model, layer=0, head=1)
    assert int(prev.loc[prev["score"].idxmax(), "offset"]) == 1
    assert prev.attrs["analysis"] == "positional_kernel" and prev.attrs["forward_equivalents"] == 0


def test_bias_kernel_and_bad_inputs():
    model = ROTARY["llama (GQA, biases)"]()
    bias = A.positional_kernel(model, layer=1, head=2, distribution="bias", max_offset=3)
    assert bias["score"].abs().max() > 0  # b_Q, b_K were jittered
    cases = [
        (dict(layer=0, head=0, max_offset=-1), "max_offset must be >= 0"),
        (dict(layer=0, head=0, max_offset=64), "does not fit the context"),
        (dict(layer=0, head=0, distribution=[]), "holds no ids"),
        (dict(layer=0, head=0, distribution=[0.5]), "must be integers"),
        (dict(layer=0, head=0, distribution=[99]), r"must lie in \[0, 40\)"),
        (dict(layer=0, head=0, distribution="zipf"), "'uniform', 'bias' or token ids"),
        (dict(layer=0, head=7), "head 7 out of range"),
    ]
    for kw, message in cases:
        with pytest.raises(InterpError, match=message):
            A.positional_kernel(model, **kw)

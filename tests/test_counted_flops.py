"""Counted cost is the work (issue 44): ``forward_equivalents`` within 25% of what torch counts.

Every analysis states ``forward_equivalents``: its FLOPs over one plain forward pass's, from
the engines' one cost model (:mod:`interp.engine.cost`). Here torch's own count
(``torch.utils.flop_counter.flop_registry``: matrix products and attention, forward and
backward, measured by a dispatch mode: ``tests/flop_meter.py``) is the reference, on a random
Llama (4 layers, d 128, grouped-query attention) at two vocabulary sizes, where the
unembedding is a small and then the largest share of a pass. Each analysis runs once first
(its once-per-model checks are not its work). A generation's forward-equivalents are in
plain passes over its prompt, so its reference is a plain pass over the prompt.
"""

import functools
import warnings

import pytest
import torch
import transformers as T
from flop_meter import FlopMeter

import interp.analysis as A
from interp.analysis.senses.words import WordTokens
from interp.core.metrics import logit_diff_metric
from interp.datasets import repeated_random_tokens
from interp.dictionaries import (
    Dictionary,
    Transcoder,
    dictionary_report,
    read_features,
    train_dictionary,
    train_transcoder,
    transcoder_report,
)
from interp.models.hf import bridge_from_hf

BAR = 0.25  # counted within 25% of measured (the bar)


def _llama(vocab: int):
    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        vocab_size=vocab, bos_token_id=0, eos_token_id=1, pad_token_id=1, num_hidden_layers=4,
        hidden_size=128, intermediate_size=344, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bridge_from_hf(T.LlamaForCausalLM(cfg), architecture_name="meta-llama/Llama-3.2-1B")


NAMES = [
    "logit_lens", "ablate_heads", "patch_heads", "patch_components", "attribute_heads",
    "attribute_edges eap", "attribute_edges eap-ig", "attribute_edges exact", "path_patch",
    "evaluate_circuit", "qk_attribution", "head_scores", "direct_logit_attribution",
    "read_features", "generate", "generate without the kv cache",
    "generate, mean-ablated and patched", "compare_generations", "head_atlas",
    "read_fraction", "null_space_probe", "dictionary_report", "transcoder_report",
    "train_dictionary", "train_transcoder", "clue_attention", "in_context_learning_score",
    "ablate_head_groups", "ablate_mlps", "ablate_layers",
    "patch_components z by head, denoising", "patch_components mlp_out by layer_position",
    "feature_head_attribution", "qk_interventions", "rotary_bands", "circuit_curve",
]  # fmt: skip
ON_THE_PROMPT = {n for n in NAMES if "generat" in n}  # reference: a plain pass of the prompt


def _cases(m, toks):
    met = logit_diff_metric(5, 6)
    cor = toks.flip(1)
    D = Dictionary.random(d_in=128, d_sae=64, hook_name="blocks.2.hook_resid_pre", seed=0)
    two = [("L0H0", "L2H1.q"), ("embed", "logits")]
    p, new = toks[:, :15], dict(max_new_tokens=4)
    ablated = A.HeadAblation(["L1H0"], ablation="mean")
    mlp = dict(hook="blocks.1.ln2.hook_normalized", target_hook="blocks.1.hook_mlp_out")
    T = Transcoder.random(d_in=128, d_out=128, d_sae=64, architecture="topk", k=4,
                          hook_name=mlp["hook"], hook_name_out=mlp["target_hook"])  # fmt: skip
    train = dict(n_features=64, k=4, batch_size=50)  # two steps, the second with AuxK
    # clue_attention's sentences: the word at 20, its clue at 5 and 6
    words = [
        WordTokens("", "", t[None], 20, (20,), (5, 6), tuple(map(str, t.tolist()))) for t in toks
    ]
    scores = functools.cache(lambda: A.attribute_edges(m, toks, corrupted_tokens=cor, metric=met))
    patch = dict(corrupted_tokens=cor, metric=met)
    return {
        "logit_lens": lambda: A.logit_lens(m, toks),
        "ablate_heads": lambda: A.ablate_heads(m, toks),
        "patch_heads": lambda: A.patch_heads(m, toks, corrupted_tokens=cor, metric=met),
        "patch_components": lambda: A.patch_components(
            m, toks, corrupted_tokens=cor, metric=met, component="resid_pre", by="layer"
        ),
        "attribute_heads": lambda: A.attribute_heads(m, toks, metric=met),
        "attribute_edges eap": lambda: A.attribute_edges(m, toks, corrupted_tokens=cor, metric=met),
        "attribute_edges eap-ig": lambda: A.attribute_edges(
            m, toks, corrupted_tokens=cor, metric=met, method="eap-ig", steps=3
        ),
        "attribute_edges exact": lambda: A.attribute_edges(
            m, toks, corrupted_tokens=cor, metric=met, method="exact", edges=two
        ),
        "path_patch": lambda: A.path_patch(m, toks, corrupted_tokens=cor, metric=met),
        "evaluate_circuit": lambda: A.evaluate_circuit(
            m, toks, corrupted_tokens=cor, metric=met, edges=two
        ),
        "qk_attribution": lambda: A.qk_attribution(m, toks, layer=2, head=1),
        "head_scores": lambda: A.head_scores(m, toks),
        "direct_logit_attribution": lambda: A.direct_logit_attribution(m, toks, answer=5),
        "read_features": lambda: read_features(m, toks, dictionary=D).features,
        "generate": lambda: A.generate(m, p, **new),
        "generate without the kv cache": lambda: A.generate(m, p, kv_cache=False, **new),
        "generate, mean-ablated and patched": lambda: A.generate(
            m, p, interventions=[ablated, A.Patch(p.flip(1), heads=["L2H1"])], **new
        ),
        "head_atlas": lambda: A.head_atlas(m, toks),
        "read_fraction": lambda: A.read_fraction(m, toks),
        "dictionary_report": lambda: dictionary_report(m, toks, D),
        "transcoder_report": lambda: transcoder_report(m, toks, T),
        "train_dictionary": lambda: train_dictionary(m, toks, hook=D.hook_name, **train),
        "train_transcoder": lambda: train_transcoder(m, toks, **mlp, **train),
        "null_space_probe": lambda: A.null_space_probe(
            m, toks, layer=2, head=1, n_directions=1, control=False
        ),
        "compare_generations": lambda: A.compare_generations(
            m, p, interventions=[A.HeadAblation(["L1H0"])], **new
        ),
        "clue_attention": lambda: A.clue_attention(m, words),
        "in_context_learning_score": lambda: A.in_context_learning_score(m, toks),
        "ablate_head_groups": lambda: A.ablate_head_groups(
            m, toks, groups={"a": ["L1H0", "L2H1"], "b": ["L3H0"]}
        ),
        "ablate_mlps": lambda: A.ablate_mlps(m, toks),
        "ablate_layers": lambda: A.ablate_layers(m, toks),
        "patch_components z by head, denoising": lambda: A.patch_components(
            m, toks, component="z", by="head", direction="denoising", **patch
        ),
        "patch_components mlp_out by layer_position": lambda: A.patch_components(
            m, toks, component="mlp_out", by="layer_position", positions=[20, 24], **patch
        ),
        "feature_head_attribution": lambda: A.feature_head_attribution(m, toks, dictionary=D),
        "qk_interventions": lambda: A.qk_interventions(m, toks, layer=2, head=1),
        "rotary_bands": lambda: A.rotary_bands(m, toks, layer=2, head=1),
        "circuit_curve": lambda: A.circuit_curve(m, toks, scores=scores(), points=3, **patch),
    }


@pytest.fixture(scope="module", params=[4096, 32768], ids=["vocab 4k", "vocab 32k"])
def lab(request):
    """The model, its cases and one plain pass's measured FLOPs (of the tokens, of the
    prompt), on one vocabulary size."""
    m = _llama(request.param)
    toks = repeated_random_tokens(4, 12, d_vocab=request.param, seed=0).tokens  # 4 x 25
    plain = {}
    for key, t in (("tokens", toks), ("prompt", toks[:, :15])):
        with torch.no_grad(), FlopMeter() as meter:
            m(t)
        plain[key] = meter.total
    cases = _cases(m, toks)
    assert sorted(cases) == sorted(NAMES)
    return cases, plain


@pytest.mark.parametrize("name", NAMES)
def test_the_counted_cost_is_the_work(lab, name):
    cases, plain = lab
    fn = cases[name]
    fn()  # once-per-model checks (exactness probes) run here
    with FlopMeter() as meter:
        out = fn()
    counted = float(out.attrs["forward_equivalents"])
    got = meter.total / plain["prompt" if name in ON_THE_PROMPT else "tokens"]
    assert got > 0
    assert abs(counted - got) <= BAR * got, (name, counted, got)


@pytest.mark.parametrize("heads", [None, ["L0H1"], ["L1H0"]], ids=["all", "layer 0", "layer 1"])
def test_the_attention_only_sweep_counts_its_projection(heads):
    """``resume-after-block`` (the shipped attention-only model): each edit's change of one
    head's ``z`` through that head's ``W_O``, then the blocks after its layer."""
    from interp.models import load_model

    m = load_model("induction-2l")
    toks = repeated_random_tokens(8, 12, d_vocab=m.cfg.d_vocab, seed=0).tokens
    with torch.no_grad(), FlopMeter() as meter:
        m(toks)
    plain = meter.total
    A.ablate_heads(m, toks, heads=heads)  # the path's check runs here
    with FlopMeter() as meter:
        out = A.ablate_heads(m, toks, heads=heads)
    assert out.attrs["engine"] == "resume-after-block"
    counted, got = float(out.attrs["forward_equivalents"]), meter.total / plain
    assert abs(counted - got) <= BAR * got, (counted, got)

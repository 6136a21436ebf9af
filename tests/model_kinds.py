"""Every kind of model the QK tools support, each a small random Hugging Face model wrapped
in a bridge (its own rotary convention, norms, score scale and mask), plus our
attention-only model: the list the QK, mask-rule and norm-rule tests run over, so that a
new architecture is added once and checked by all of them.

Random init leaves biases and norm weights trivial, so every parameter is moved a little
(seeded): every term of a decomposition then counts.
"""

import functools

import torch
import transformers as T

from interp.models import load_model
from interp.models.hf import bridge_from_hf, random_gpt2

SMALL = dict(
    num_hidden_layers=3,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    max_position_embeddings=64,
)
IDS = dict(vocab_size=40, bos_token_id=0, eos_token_id=1, pad_token_id=1)


def build(cfg, cls, arch, jitter=0.3, **kw):
    torch.manual_seed(0)
    hf = getattr(T, cls)(getattr(T, cfg)(**IDS, **kw))
    with torch.no_grad():  # random init leaves biases and norm weights trivial: move them
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * jitter)
    return bridge_from_hf(hf, architecture_name=arch)


KINDS = {
    "attn-only (learned positions)": lambda: load_model("induction-2l"),
    "gpt2": lambda: random_gpt2(3, vocab=40),
    "llama (GQA, rotary)": lambda: build(
        "LlamaConfig", "LlamaForCausalLM", "meta-llama/Llama-3.2-1B", num_key_value_heads=2, **SMALL
    ),
    "llama-3 rope scaling": lambda: build(
        "LlamaConfig",
        "LlamaForCausalLM",
        "meta-llama/Llama-3.2-1B",
        num_key_value_heads=2,
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=16,
        ),
        **SMALL,
    ),
    "gpt-neox (partial rotary)": lambda: build(
        "GPTNeoXConfig", "GPTNeoXForCausalLM", "EleutherAI/pythia-70m", rotary_pct=0.25, **SMALL
    ),
    "qwen3 (QK-norm)": lambda: build(
        "Qwen3Config",
        "Qwen3ForCausalLM",
        "Qwen/Qwen3-0.6B",
        num_key_value_heads=2,
        head_dim=8,
        **SMALL,
    ),
    "gpt-j (interleaved rotary)": lambda: build(
        "GPTJConfig",
        "GPTJForCausalLM",
        "EleutherAI/gpt-j-6b",
        n_layer=3,
        n_embd=32,
        n_head=4,
        rotary_dim=4,
        n_positions=64,
    ),
    "gemma-2 (softcap, scalar, window, sandwich norms)": lambda: build(
        "Gemma2Config",
        "Gemma2ForCausalLM",
        "google/gemma-2-2b",
        num_key_value_heads=2,
        head_dim=8,
        query_pre_attn_scalar=16,
        sliding_window=4,
        attn_logit_softcapping=2.0,
        **SMALL,
    ),
    "phi (partial rotary)": lambda: build(
        "PhiConfig", "PhiForCausalLM", "microsoft/phi-2", partial_rotary_factor=0.5, **SMALL
    ),
    "bert (bidirectional encoder, post-norm)": lambda: build(
        "BertConfig",
        "BertForMaskedLM",
        "google-bert/bert-base-uncased",
        num_hidden_layers=3,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        max_position_embeddings=64,
    ),
    "mistral (sliding window)": lambda: build(
        "MistralConfig",
        "MistralForCausalLM",
        "mistralai/Mistral-7B-v0.1",
        num_key_value_heads=2,
        sliding_window=4,
        **SMALL,
    ),
}


@functools.cache
def kind_model(kind: str):
    """The model of ``kind``, built once per process (tests never mutate it)."""
    return KINDS[kind]()

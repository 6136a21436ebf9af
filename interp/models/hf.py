"""Hugging Face models as TransformerBridge models, offline.

TransformerBridge needs a tokenizer object that was loaded from disk (it reads
``name_or_path``); with no tokenizer it tries the hub. For randomly
initialised configs (tests, benchmarks) :func:`word_tokenizer` builds a
whitespace word-level tokenizer ``t0 .. t{n-1}`` offline.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from interp.errors import InterpError
from interp.paths import cache_dir


def word_tokenizer(vocab_size: int) -> Any:
    """An offline word-level tokenizer over ``t0 .. t{vocab_size-1}`` (``t0`` is BOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if vocab_size < 2:
        raise InterpError(f"vocab_size must be >= 2, got {vocab_size}")
    tk = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="t0", eos_token="t1", unk_token="t0", pad_token="t1"
    )
    # TransformerBridge re-reads the tokenizer from its folder, so keep one on disk.
    target = cache_dir() / "tokenizers" / f"word-{vocab_size}"
    if not (target / "tokenizer.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".word-"))
        fast.save_pretrained(tmp)
        try:
            os.replace(tmp, target)  # atomic; a concurrent writer may have won
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(target)


def bridge_from_hf(hf_model: Any, *, architecture_name: str, tokenizer: Any = None) -> Any:
    """Wrap an in-memory Hugging Face causal LM in a TransformerBridge, in eval mode.

    ``architecture_name`` is any hub id of the same architecture (it selects the
    bridge adapter; nothing is downloaded). A model built from a config starts
    in train mode (dropout on), so it is switched to eval first.
    """
    from transformer_lens.model_bridge import TransformerBridge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_model.eval()
    tok = tokenizer or word_tokenizer(int(hf_model.config.vocab_size))
    return TransformerBridge.boot_transformers(
        architecture_name, hf_model=hf_model, tokenizer=tok
    ).eval()


def random_gpt2(
    n_layers: int = 2,
    *,
    d_model: int = 32,
    n_heads: int = 4,
    vocab: int = 50,
    n_ctx: int = 64,
    seed: int = 0,
) -> Any:
    """A randomly initialised GPT-2-style bridge (MLPs, LayerNorm), eval mode."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    hf = GPT2LMHeadModel(
        GPT2Config(
            n_layer=n_layers,
            n_embd=d_model,
            n_head=n_heads,
            n_positions=n_ctx,
            vocab_size=vocab,
            bos_token_id=0,
            eos_token_id=1,
        )
    )
    return bridge_from_hf(hf, architecture_name="gpt2")


def random_llama(
    n_layers: int = 2,
    *,
    d_model: int = 32,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    vocab: int = 50,
    n_ctx: int = 64,
    seed: int = 0,
) -> Any:
    """A randomly initialised Llama-style bridge (RMSNorm, grouped-query attention), eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    hf = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=d_model,
            intermediate_size=2 * d_model,
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=n_kv_heads,
            vocab_size=vocab,
            max_position_embeddings=n_ctx,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    return bridge_from_hf(hf, architecture_name="meta-llama/Llama-3.2-1B")

"""The model shapes of :mod:`scale` (random weights, real shapes) and the Hugging Face
folders built from them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# The real shapes, from each model's Hugging Face config.json. Special ids are the word
# tokenizer's (t0 BOS, t1 EOS): prompts here are token ids.
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-1b": (
        "llama",
        dict(
            hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
            tie_word_embeddings=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_parameters={**LLAMA3_ROPE, "factor": 32.0},
        ),
    ),
    "qwen-1.5b": (
        "qwen2",
        dict(
            hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
            num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
            tie_word_embeddings=True, max_position_embeddings=131072, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            use_sliding_window=False, sliding_window=131072, max_window_layers=21,
        ),
    ),
    "gemma-2b": (
        "gemma2",
        dict(
            hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
            num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
            tie_word_embeddings=True, max_position_embeddings=8192, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0, query_pre_attn_scalar=256, sliding_window=4096,
        ),
    ),
    "llama-8b": (
        "llama",
        dict(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
            tie_word_embeddings=False, max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_parameters={**LLAMA3_ROPE, "factor": 8.0},
        ),
    ),
}  # fmt: skip


def shape_config(name: str, shrink: int = 1) -> tuple[str, dict[str, Any]]:
    """The model type and config keywords of shape ``name``, its layers, head widths, MLP
    and vocabulary divided by ``shrink`` (head counts kept, so the graph keeps its fan-out).

    Raises:
        SystemExit: for an unknown shape.
    """
    if name not in SHAPES:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(SHAPES)}")
    kind, cfg = SHAPES[name]
    cfg = {**cfg, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
    if shrink > 1:
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // heads)
        head_dim = max(8, head_dim // shrink // 2 * 2)
        cfg["num_hidden_layers"] = max(2, round(cfg["num_hidden_layers"] / shrink))
        cfg["intermediate_size"] = max(16, cfg["intermediate_size"] // shrink)
        cfg["vocab_size"] = max(64, cfg["vocab_size"] // shrink)
        if kind == "gemma2":  # its width is not heads x head_dim; its query scale is head_dim
            cfg["hidden_size"] = max(16, cfg["hidden_size"] // shrink // 8 * 8)
            cfg["query_pre_attn_scalar"] = head_dim
        else:
            cfg["hidden_size"] = heads * head_dim
        if "head_dim" in cfg:
            cfg["head_dim"] = head_dim
    return kind, cfg


def hf_config(name: str, shrink: int = 1) -> Any:
    from transformers import AutoConfig

    kind, cfg = shape_config(name, shrink)
    return AutoConfig.for_model(kind, **cfg)


def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Build and save the random-weight folder of one shape (seeded)."""
    import torch
    from transformers import AutoModelForCausalLM

    from interp.models.hf_tokenizers import WORD_TOKENIZER_KEY

    t = time.perf_counter()
    torch.manual_seed(0)
    cfg = hf_config(spec["model"], spec["shrink"])
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, spec["dtype"]))
    n_params = sum(p.numel() for p in model.parameters())
    folder = Path(spec["folder"])
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config[WORD_TOKENIZER_KEY] = "word"  # a toy vocabulary t0 .. tN: no tokenizer files
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "BUILT").write_text(json.dumps({"params": n_params}))
    return {"params": n_params, "seconds": time.perf_counter() - t}

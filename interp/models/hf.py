"""Hugging Face models as TransformerBridge models, offline.

TransformerBridge needs a tokenizer object that was loaded from disk (it reads
``name_or_path``); with no tokenizer it tries the hub. For randomly
initialised configs (tests, benchmarks) :func:`word_tokenizer` builds a
whitespace word-level tokenizer ``t0 .. t{n-1}`` offline.

:func:`load_hf_dir` loads a local model folder with the class its config
names. A folder whose checkpoint has no language-model head (an encoder such
as all-MiniLM-L6-v2, saved as ``BertModel``) is loaded with a masked-LM head
for the bridge, and the model is flagged ``interp_logits_meaningful = False``
so loss metrics refuse it instead of reporting a loss from random weights.

Example:
    >>> model = random_gpt2(2, vocab=30)
    >>> model.to_tokens("t5 t12 t19 t20").tolist()
    [[0, 5, 12, 19, 20]]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from interp.errors import CheckpointError, InterpError
from interp.paths import cache_dir

_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def word_tokenizer(vocab_size: int) -> Any:
    """An offline word-level tokenizer over ``t0 .. t{vocab_size-1}`` (``t0`` is BOS, ``t1`` EOS).

    The special tokens are registered as whole words only, so ``t12`` is one
    token, not ``t1`` followed by ``2``.

    Raises:
        InterpError: for a vocabulary smaller than 2.
    """
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if vocab_size < 2:
        raise InterpError(f"vocab_size must be >= 2, got {vocab_size}")

    def special(t: str) -> AddedToken:
        return AddedToken(t, single_word=True, normalized=False)

    tk = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token=special("t0"),
        eos_token=special("t1"),
        unk_token=special("t0"),
        pad_token=special("t1"),
    )
    # TransformerBridge re-reads the tokenizer from its folder, so keep one on disk. The
    # folder name carries a version: v1 folders registered t0/t1 as substrings.
    target = cache_dir() / "tokenizers" / f"word-v2-{vocab_size}"
    if not (target / "tokenizer.json").is_file():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".word-"))
        except OSError as exc:
            raise InterpError(
                f"cannot write the tokenizer cache under {str(target.parent)!r} "
                f"({exc.strerror or exc}); set INTERP_CACHE to a writable folder"
            ) from None
        fast.save_pretrained(tmp)
        try:
            os.replace(tmp, target)  # atomic; a concurrent writer may have won
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(target)


def bridge_from_hf(hf_model: Any, *, architecture_name: str, tokenizer: Any = None) -> Any:
    """Wrap an in-memory Hugging Face model in a TransformerBridge, in eval mode.

    ``architecture_name`` is any hub id or folder of the same architecture (it
    selects the bridge adapter; nothing is downloaded). A model built from a
    config starts in train mode (dropout on), so it is switched to eval first.
    """
    from transformer_lens.model_bridge import TransformerBridge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_model.eval()
    tok = tokenizer or word_tokenizer(int(hf_model.config.vocab_size))
    bridge = TransformerBridge.boot_transformers(
        architecture_name, hf_model=hf_model, tokenizer=tok
    ).eval()
    bridge.interp_hf_model = hf_model
    return bridge


def _read_config(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"{str(path / 'config.json')!r} is not valid JSON ({exc}); the model folder is damaged"
        ) from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise InterpError(
            f"{str(path)!r} has a config.json without model_type: it is neither an interp "
            "checkpoint nor a Hugging Face model folder"
        )
    return cfg


def _lm_class(config: dict[str, Any]) -> Any:
    """The Auto class to load ``config`` with: causal LM, or masked LM for encoders."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    archs = [str(a) for a in config.get("architectures") or []]
    if any(a.endswith(_CAUSAL_SUFFIXES) for a in archs):
        return AutoModelForCausalLM
    if any(a.endswith("ForMaskedLM") for a in archs):
        return AutoModelForMaskedLM
    encoder = config["model_type"] in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not config.get(
        "is_decoder", False
    )
    return AutoModelForMaskedLM if encoder else AutoModelForCausalLM


def load_hf_dir(
    path: str | os.PathLike[str],
    *,
    dtype: Any = None,
    device_map: Any = None,
    architecture_name: str | None = None,
    quiet: bool = False,
) -> Any:
    """A local Hugging Face model folder as a TransformerBridge (no network).

    Weights missing from the checkpoint inside the base model are an error
    (the folder is incomplete); a missing language-model head flags the model
    ``interp_logits_meaningful = False`` (see the module docstring) and says so
    on stderr unless ``quiet`` (which also silences Hugging Face's load report).
    A folder without tokenizer files gets :func:`word_tokenizer`.

    Raises:
        CheckpointError: for an unreadable config or weights, or weights missing
            from the base model.
        InterpError: for a folder that is not a Hugging Face model.
    """
    from transformers import AutoTokenizer

    d = Path(path)
    config = _read_config(d)
    cls = _lm_class(config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    kwargs: dict[str, Any] = {"local_files_only": True, "output_loading_info": True}
    kwargs["dtype"] = dtype or "float32"
    if device_map is not None:
        kwargs["device_map"] = device_map
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    if quiet:
        hf_logging.set_verbosity_error()
    try:
        hf, info = cls.from_pretrained(d, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"cannot load a Hugging Face model from {str(d)!r}: {exc}") from None
    finally:
        hf_logging.set_verbosity(level)
    prefix = getattr(hf, "base_model_prefix", "") or ""
    missing = sorted(info.get("missing_keys", ()))
    in_base = [k for k in missing if prefix and k.startswith(prefix + ".")]
    if in_base:
        raise CheckpointError(
            f"the checkpoint in {str(d)!r} is incomplete: {len(in_base)} weights of the model "
            f"body are missing (e.g. {in_base[0]}); restore the weights file"
        )
    try:
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tok = word_tokenizer(int(hf.config.vocab_size))
    bridge = bridge_from_hf(hf, architecture_name=architecture_name or str(d), tokenizer=tok)
    if missing:  # only head weights are missing: the logits come from random weights
        bridge.interp_logits_meaningful = False
    if missing and not quiet:
        print(
            f"interp: {d.name} has no language-model head in its checkpoint ({missing[0]} ... "
            "missing); attention and the residual stream are real, logits are not, so loss "
            "metrics are refused",
            file=sys.stderr,
        )
    return bridge


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

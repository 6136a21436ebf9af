"""Hugging Face models as TransformerBridge models, offline.

:func:`load_hf_dir` loads a local model folder with the class its config
names. A folder whose checkpoint has no language-model head (an encoder such
as all-MiniLM-L6-v2, saved as ``BertModel``) is loaded with a masked-LM head
for the bridge, and the model is flagged ``interp_logits_meaningful = False``
so loss metrics refuse it instead of reporting a loss from random weights.

The folder's tokenizer (:mod:`interp.models.hf_tokenizers`) is read before
its weights, so a folder without one is refused first.

Example:
    >>> model = random_gpt2(2, vocab=30)
    >>> model.to_tokens("t5 t12 t19 t20").tolist()
    [[0, 5, 12, 19, 20]]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from interp.core.errors import CheckpointError, InterpError
from interp.core.precision import tolerance
from interp.models.hf_tokenizers import folder_tokenizer, read_config, word_tokenizer
from interp.models.placement import check_not_offloaded
from interp.outputs.files import write_text

_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
VERDICT = "interp-bridge-verified.json"


def architecture_of(hf_model: Any) -> str:
    """The architecture a Hugging Face model names in its config (e.g. ``LlamaForCausalLM``)."""
    config = getattr(hf_model, "config", None)
    archs = list(getattr(config, "architectures", None) or [])
    return str(archs[0]) if archs else str(getattr(config, "model_type", type(hf_model).__name__))


def _check_tokens_for(hf_model: Any) -> Any:
    """A fixed ``[1, 8]`` id tensor inside the model's vocabulary, on its first device."""
    import torch

    vocab = int(hf_model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, 8), generator=gen)
    device = next(iter(hf_model.parameters())).device
    return ids.to(device)


def _logits(out: Any) -> Any:
    return out.logits if hasattr(out, "logits") else out


def bridge_from_hf(
    hf_model: Any,
    *,
    architecture_name: str,
    tokenizer: Any = None,
    verdict: Path | None = None,
) -> Any:
    """Wrap an in-memory Hugging Face model in a TransformerBridge, in eval mode, verified.

    ``architecture_name`` is any hub id or folder of the same architecture (it
    selects the bridge adapter; nothing is downloaded). A model built from a
    config starts in train mode (dropout on), so it is switched to eval first.

    The bridge replaces the model's modules with its own (TransformerLens's
    adapters re-split fused weights to expose ``hook_q``, ``hook_k`` ...), so
    an adapter that splits a weight in the wrong layout gives a model that runs
    and is wrong everywhere. The Hugging Face model's logits on 8 fixed tokens
    are therefore computed *before* wrapping and compared with the bridge's
    after (two forward passes of 8 tokens); a mismatch is refused.
    ``verdict`` (a file beside a converted copy) remembers a passed check for
    these library versions, so it runs once.

    Raises:
        InterpError: for a model whose weights were offloaded
            (:func:`interp.models.placement.check_not_offloaded`), when TransformerLens
            cannot wrap the architecture, or the
            bridge's logits differ from the Hugging Face model's (the message
            names the architecture and the size of the difference).
    """
    import torch
    from transformer_lens.model_bridge import TransformerBridge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_not_offloaded(hf_model)
    hf_model.eval()
    arch = architecture_of(hf_model)
    tok = tokenizer or word_tokenizer(int(hf_model.config.vocab_size))
    key = _verdict_key(hf_model)
    trusted = verdict is not None and _read_verdict(verdict) == key
    ids = _check_tokens_for(hf_model)
    if not trusted:
        with torch.no_grad():
            reference = _logits(hf_model(ids)).detach().float().cpu()
    try:
        bridge = TransformerBridge.boot_transformers(
            architecture_name, hf_model=hf_model, tokenizer=tok
        ).eval()
    except Exception as exc:  # noqa: BLE001 - any adapter failure is the same problem for users
        raise InterpError(
            f"TransformerLens cannot wrap this {arch} model ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else 'no message'}); this configuration "
            "of the architecture is not supported by its adapter"
        ) from None
    bridge.interp_hf_model = hf_model
    if not trusted:
        with torch.no_grad():
            got = _logits(bridge(ids)).detach().float().cpu()
        check_agreement(got, reference, arch=arch, dtype=next(hf_model.parameters()).dtype)
        if verdict is not None:
            _write_verdict(verdict, key)
    return bridge


def check_agreement(got: Any, reference: Any, *, arch: str, dtype: Any = None) -> float:
    """The largest difference between a bridge's logits and its Hugging Face model's.

    The tolerance is relative to the logits' size: 1e-3 in float32 (bridges
    agree to about 1e-6); in float16 / bfloat16 the precision's rule
    (:func:`interp.core.precision.tolerance`).

    Raises:
        InterpError: for logits of another shape, or a difference beyond the tolerance.
    """

    if tuple(got.shape) != tuple(reference.shape):
        raise InterpError(
            f"the TransformerLens bridge of this {arch} model gives logits of shape "
            f"{tuple(got.shape)}, Hugging Face {tuple(reference.shape)}; its adapter does not "
            "reproduce the model, so every analysis would be wrong"
        )
    scale = max(1.0, float(reference.abs().max()))
    tol = tolerance(dtype, scale, float32=1e-3)
    gap = float((got - reference).abs().max())
    if not gap <= tol:
        raise InterpError(
            f"the TransformerLens bridge of this {arch} model disagrees with the Hugging Face "
            f"model: logits differ by up to {gap:.3g} (largest logit {scale:.3g}, tolerance "
            f"{tol:.2g}) on a fixed 8-token check; its adapter does not reproduce this "
            "configuration, so every analysis would be wrong; the model is refused"
        )
    return gap


def _verdict_key(hf_model: Any) -> dict[str, str]:
    import torch
    import transformer_lens
    import transformers

    return {
        "interp_check": "logits-v1",
        "transformers": transformers.__version__,
        "transformer_lens": getattr(transformer_lens, "__version__", "?"),
        "torch": torch.__version__,
        "dtype": str(next(hf_model.parameters()).dtype),
    }


def _read_verdict(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_verdict(path: Path, key: dict[str, str]) -> None:

    try:
        write_text(path, json.dumps(key, indent=1) + "\n")
    except (OSError, InterpError):
        pass  # a read-only folder: the check simply runs again next time


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
    verified_copy: bool = False,
) -> Any:
    """A local Hugging Face model folder as a TransformerBridge (no network).

    The bridge is checked against the Hugging Face model (:func:`bridge_from_hf`);
    ``verified_copy`` (our converted copies) keeps the passed check's verdict
    in the folder (:data:`VERDICT`) so later loads skip it.

    Weights missing from the checkpoint inside the base model are an error
    (the folder is incomplete); a missing language-model head flags the model
    ``interp_logits_meaningful = False`` (see the module docstring) and says so
    on stderr unless ``quiet`` (which also silences Hugging Face's load report).
    The folder's tokenizer is read first (:func:`folder_tokenizer`), so a
    folder without one is refused before its weights load.

    Raises:
        CheckpointError: for an unreadable config or weights (a truncated
            ``model.safetensors`` included), or weights missing from the base model.
        InterpError: for a folder that is not a Hugging Face model, a folder
            without a usable tokenizer (no tokenizer files, damaged ones, or one
            that encodes text to nothing: the message names the files and the
            fix, saving the tokenizer into the folder; a toy folder declares
            ``"interp_tokenizer": "word"`` instead), an architecture
            TransformerLens cannot wrap, or a bridge whose logits disagree with
            the Hugging Face model's.
    """
    d = Path(path)
    config = read_config(d)
    tok = folder_tokenizer(d, config)
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
        hf, info = _from_pretrained(cls, d, kwargs)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors, torch and HF each raise their own
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise CheckpointError(
            f"cannot load a Hugging Face model from {str(d)!r} ({type(exc).__name__}: {first}); "
            "the folder's weights or config are damaged or incomplete: restore them"
        ) from None
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
    verdict = d / VERDICT if verified_copy else None
    bridge = bridge_from_hf(
        hf, architecture_name=architecture_name or str(d), tokenizer=tok, verdict=verdict
    )
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


def _from_pretrained(cls: Any, d: Path, kwargs: dict[str, Any]) -> Any:
    """``cls.from_pretrained(d, **kwargs)``; when the folder stores another precision than
    the one asked for (and everything loads on the CPU), its weights are read and converted
    a piece at a time first (:mod:`interp.models.weights`: the load then peaks near the
    converted weights, not the stored file plus them)."""
    import torch
    from transformers import AutoConfig

    from interp.models.weights import read_weights, stored_dtypes

    dtype = kwargs["dtype"]
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if kwargs.get("device_map") is None and stored_dtypes(d) - {dtype}:
        config = AutoConfig.from_pretrained(d, local_files_only=True)
        model_cls = cls._model_mapping.get(type(config), None)
        if model_cls is not None and not getattr(model_cls, "_keep_in_fp32_modules", None):
            state = read_weights(d, dtype)
            rest = {k: v for k, v in kwargs.items() if k != "local_files_only"}
            return model_cls.from_pretrained(None, config=config, state_dict=state, **rest)
    return cls.from_pretrained(d, **kwargs)


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

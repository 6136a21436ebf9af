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

A folder must carry its tokenizer (:func:`folder_tokenizer`): without one,
prompts could not be encoded (Hugging Face builds an empty tokenizer for a
GPT-2 folder that has none, which encodes every prompt to nothing), so such a
folder is refused before its weights load, with the fix. A toy model whose
vocabulary is :func:`word_tokenizer`'s words says so in its ``config.json``
(``"interp_tokenizer": "word"``) and needs no tokenizer files.

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
VERDICT = "interp-bridge-verified.json"
# The files a saved Hugging Face tokenizer leaves in its folder (any one of them).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# config.json key of a toy folder whose vocabulary is word_tokenizer's t0 .. t{n-1}.
WORD_TOKENIZER_KEY = "interp_tokenizer"


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
        InterpError: when TransformerLens cannot wrap the architecture, or the
            bridge's logits differ from the Hugging Face model's (the message
            names the architecture and the size of the difference).
    """
    import torch
    from transformer_lens.model_bridge import TransformerBridge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
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
    agree to about 1e-6), 5e-2 in half precision.

    Raises:
        InterpError: for logits of another shape, or a difference beyond the tolerance.
    """
    import torch

    if tuple(got.shape) != tuple(reference.shape):
        raise InterpError(
            f"the TransformerLens bridge of this {arch} model gives logits of shape "
            f"{tuple(got.shape)}, Hugging Face {tuple(reference.shape)}; its adapter does not "
            "reproduce the model, so every analysis would be wrong"
        )
    scale = max(1.0, float(reference.abs().max()))
    half = dtype in (torch.float16, torch.bfloat16)
    tol = (5e-2 if half else 1e-3) * scale
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
    from interp.files import write_text

    try:
        write_text(path, json.dumps(key, indent=1) + "\n")
    except (OSError, InterpError):
        pass  # a read-only folder: the check simply runs again next time


def read_config(path: Path) -> dict[str, Any]:
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


def folder_tokenizer(path: str | os.PathLike[str], config: dict[str, Any] | None = None) -> Any:
    """The tokenizer a Hugging Face model folder carries, loaded offline (no weights read).

    A folder whose ``config.json`` has ``"interp_tokenizer": "word"`` (a toy
    model over ``t0 .. t{vocab_size-1}``) gets :func:`word_tokenizer` and needs
    no tokenizer files; every other folder must hold its own tokenizer.

    Example:
        >>> import json, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "config.json").write_text(json.dumps(
        ...     {"model_type": "gpt2", "vocab_size": 30, "interp_tokenizer": "word"}))
        >>> folder_tokenizer(d)("t5 t12")["input_ids"]
        [5, 12]

    Raises:
        InterpError: for a folder without tokenizer files (naming the files
            looked for and the fix: save the tokenizer into the folder), tokenizer
            files that cannot be loaded, a tokenizer that encodes text to no
            tokens (its vocabulary files are missing), or an unknown
            ``interp_tokenizer``.
        CheckpointError: for a ``config.json`` that is not valid JSON.
    """
    from transformers import AutoTokenizer

    d = Path(path)
    config = read_config(d) if config is None else config
    declared = config.get(WORD_TOKENIZER_KEY)
    if declared is not None:
        if declared != "word":
            raise InterpError(
                f"{str(d / 'config.json')!r} sets {WORD_TOKENIZER_KEY}={declared!r}; the only "
                'value is "word" (a toy vocabulary t0 .. tN); remove it to use the folder\'s '
                "own tokenizer files"
            )
        vocab = config.get("vocab_size")
        if not isinstance(vocab, int) or isinstance(vocab, bool):
            raise InterpError(
                f"{str(d / 'config.json')!r} declares the word tokenizer but its vocab_size is "
                f"{vocab!r}; give the vocabulary size as an integer"
            )
        return word_tokenizer(vocab)
    save = (
        "save the model's tokenizer into the folder (tokenizer.save_pretrained(folder)), "
        f'or, for a toy model over the words t0 .. tN, add "{WORD_TOKENIZER_KEY}": "word" '
        "to its config.json"
    )
    if not any((d / name).is_file() for name in TOKENIZER_FILES):
        raise InterpError(
            f"the model folder {str(d)!r} has no tokenizer files (none of "
            f"{', '.join(TOKENIZER_FILES)}), so prompts cannot be encoded; {save}"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - tokenizers, sentencepiece and HF each raise their own
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InterpError(
            f"cannot load the tokenizer in {str(d)!r} ({type(exc).__name__}: {first}); its "
            f"tokenizer files are damaged or incomplete: {save}"
        ) from None
    if not list(tok("The cat sat", add_special_tokens=False)["input_ids"]):
        raise InterpError(
            f"the tokenizer in {str(d)!r} encodes text to no tokens (its vocabulary files are "
            f"missing: it has only some of {', '.join(TOKENIZER_FILES)}); {save}"
        )
    return tok


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
        hf, info = cls.from_pretrained(d, **kwargs)
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

"""What a model is, from its config alone: sizes, kind and hooks, with no weights read.

:func:`model_spec` answers for every name :func:`interp.models.load_model` takes,
reading only the small config the model source carries, so that options which
cannot fit the model (a head out of range, a steering vector of another width,
more new tokens than the context holds, an encoder asked to generate) are
refused before seconds of loading and a gigabyte of weights:

* ``induction-2l`` and our checkpoints: the ``model`` block of ``config.json``;
* a Hugging Face folder (``minilm-l6`` included): ``config.json``, its fields
  read as TransformerLens's bridge maps them (``hidden_size`` or ``n_embd`` is
  ``d_model``, ``max_position_embeddings`` or ``n_positions`` is ``n_ctx`` ...);
* ``smollm2-135m``: the converted copy's ``config.json``, or before the first
  conversion the GGUF file's metadata (read by ``gguf``; nothing is dequantised);
* a hub id: ``None`` (its config is on the hub; its checks wait for the model).

A spec is no model: its sizes stand in for ``model.cfg`` in the checks that
need only sizes (:func:`interp.core.head_checks.parse_heads` takes it as is).
Hooks: our attention-only models' hooks follow from the config exactly; a
bridge's depend on TransformerLens's adapter for the architecture, so a spec
knows the hooks every bridge has (the residual streams, ``hook_q`` ... ``hook_z``,
the MLP's ``hook_pre`` and ``hook_post`` ...) and that no hook of a layer past
the last exists; any other name is checked once the model loads
(:meth:`ModelSpec.has_hook` says ``None``, unknown).

Example:
    >>> spec = model_spec("induction-2l")
    >>> spec.n_layers, spec.n_heads, spec.d_model, spec.n_ctx, spec.causal
    (2, 2, 128, 48, True)
    >>> spec.has_hook("blocks.1.hook_resid_pre"), spec.has_hook("blocks.2.hook_resid_pre")
    (True, False)
    >>> spec.activation_shape("blocks.0.attn.hook_z", 5)
    (5, 2, 32)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

from interp.core.errors import CheckpointError, InterpError

# Hooks of every block of every TransformerLens bridge (TransformerLens 4.x: Llama, GPT-2,
# BERT ... adapters); an architecture may add more (rotary, gated MLP, ...).
BRIDGE_BLOCK_HOOKS = (
    "hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_in", "hook_attn_out",
    "hook_mlp_in", "hook_mlp_out", "hook_q_input", "hook_k_input", "hook_v_input",
    "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_result",
    "attn.hook_pattern", "attn.hook_attn_scores", "ln1.hook_scale", "ln1.hook_normalized",
    "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_post",
)  # fmt: skip
BRIDGE_GLOBAL_HOOKS = ("hook_embed", "ln_final.hook_scale", "ln_final.hook_normalized")
_BLOCK = re.compile(r"blocks\.([^.]+)\.(.+)")
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
# Model types of encoders (each has a masked-LM class in transformers), answered without
# importing transformers; any other type is looked up in its masked-LM mapping.
_ENCODER_TYPES = frozenset(
    ("bert", "roberta", "distilbert", "albert", "electra", "xlm-roberta", "camembert",
     "deberta", "deberta-v2", "mpnet", "modernbert", "ernie")
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model's sizes and kind, read from its config (module docstring).

    Attributes:
        name: The name it was asked for (an alias, a folder).
        architecture: What its config names (``AttnOnlyTransformer``, ``LlamaForCausalLM``,
            ``BertModel`` ...).
        bridge: Whether it loads as a TransformerLens bridge (else our attention-only model).
        n_layers, n_heads, d_model, d_head, d_vocab: ``model.cfg``'s sizes.
        n_kv_heads: Key/value heads a layer (``n_heads`` without grouped-query attention).
        d_mlp: An MLP's width (``None``: no MLPs, an attention-only model).
        n_ctx: The longest sequence it takes (``None``: its config names no limit).
        causal: False for an encoder (bidirectional attention): it cannot generate.
        logits_meaningful: False where the checkpoint has no language-model head
            (``minilm-l6``).
        source: Where the sizes were read (a config file, or the GGUF file).
        native_hooks: Every hook of our attention-only model (empty for a bridge).
    """

    name: str
    architecture: str
    bridge: bool
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    d_mlp: int | None
    d_vocab: int
    n_ctx: int | None
    causal: bool
    logits_meaningful: bool
    source: str
    native_hooks: frozenset[str] = frozenset()

    @property
    def cfg(self) -> ModelSpec:
        """The spec itself: the head checks read ``model.cfg``'s sizes."""
        return self

    def describe(self) -> str:
        """``smollm2-135m (30 layers x 9 heads, d_model 576, context 8192)``."""
        ctx = f", context {self.n_ctx}" if self.n_ctx else ""
        return (
            f"{self.name} ({self.n_layers} layers x {self.n_heads} heads, "
            f"d_model {self.d_model}{ctx})"
        )

    def known_hooks(self) -> frozenset[str]:
        """The hooks the model surely has: all of them for our models, the hooks every
        bridge has for a bridge (module docstring)."""
        if not self.bridge:
            return self.native_hooks
        block = [f"blocks.{l}.{h}" for l in range(self.n_layers) for h in BRIDGE_BLOCK_HOOKS]
        return frozenset([*BRIDGE_GLOBAL_HOOKS, *block])

    def has_hook(self, name: Any) -> bool | None:
        """True: the model has hook ``name``; False: it has not (a layer past its last, or
        a name our model lacks); None: unknown until the model loads (a bridge's hook
        outside :data:`BRIDGE_BLOCK_HOOKS`)."""
        if not isinstance(name, str):
            return False
        if name in self.known_hooks():
            return True
        if not self.bridge:
            return False
        m = _BLOCK.fullmatch(name)
        if m and not (m.group(1).isdigit() and int(m.group(1)) < self.n_layers):
            return False
        return None

    def hook_problem(self, name: Any) -> str | None:
        """Why ``name`` is not a hook of this model (``None``: it is, or may be)."""
        if self.has_hook(name) is not False:
            return None
        m = _BLOCK.fullmatch(str(name))
        if m and not (m.group(1).isdigit() and int(m.group(1)) < self.n_layers):
            return f"it names layer {m.group(1)}, but {self.name} has layers 0..{self.n_layers - 1}"
        leaf = str(name).rsplit(".", 1)[-1]
        near = sorted(n for n in self.known_hooks() if n.endswith(leaf))[:3]
        near = near or sorted(n for n in self.known_hooks() if n.startswith("blocks.0."))[:4]
        what = "an attention-only model" if self.d_mlp is None else "the model"
        return f"{what} {self.name} has no such hook (e.g. {', '.join(near)})"

    def activation_shape(self, name: str, pos: int) -> tuple[int, ...]:
        """One prompt's activation shape at hook ``name``, as the runtime gives it
        (:meth:`interp.runtime.base.Runtime.activation_shape`): a residual-width stream
        ``[pos, d_model]``, per-head vectors ``[pos, head, d_head]`` (key and value heads
        on grouped-query models), a ``[head, pos, pos]`` pattern, MLP neurons ``[pos, d_mlp]``."""
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("hook_pattern", "hook_attn_scores"):
            return (self.n_heads, pos, pos)
        if leaf in ("hook_q", "hook_z", "hook_rot_q"):
            return (pos, self.n_heads, self.d_head)
        if leaf in ("hook_k", "hook_v", "hook_rot_k"):
            return (pos, self.n_kv_heads, self.d_head)
        if leaf == "hook_result":
            return (pos, self.n_heads, self.d_model)
        if leaf in ("hook_pre", "hook_post", "hook_pre_linear"):
            return (pos, self.d_mlp or 4 * self.d_model)
        if leaf == "hook_scale":
            return (pos, 1)
        return (pos, self.d_model)


def model_spec(name_or_path: Any) -> ModelSpec | None:
    """The config-only view of a model name (module docstring); ``None`` for a hub id.

    Reads a config file (or the GGUF metadata), never weights; fast enough to run before
    every load.

    Raises:
        InterpError: as :func:`interp.models.loader.classify` (an unknown name, a missing
            folder ...), for a missing weights package, or a config that names no sizes;
            CheckpointError: for a config that is not valid JSON (the error the load gives).
    """
    from interp.models.loader import ALIASES, classify

    name = os.fspath(name_or_path) if isinstance(name_or_path, (str, os.PathLike)) else None
    kind = None if name is None else "alias" if name in ALIASES else _quick_kind(name)
    if kind is None:
        kind = classify(name_or_path)  # its errors: the ones load_model gives
    name = os.fspath(name_or_path)
    if kind == "hub":
        return None
    if name == "induction-2l" or kind == "checkpoint":
        from interp.core.paths import INDUCTION_CHECKPOINT, data_dir

        path = data_dir() / INDUCTION_CHECKPOINT if name == "induction-2l" else Path(name)
        return native_spec(name, path.expanduser() / "config.json")
    if kind == "alias":
        from interp.models import pretrained

        if name == "minilm-l6":
            folder = pretrained.package_dir(name) / "model"
            return hf_spec(name, folder / "config.json", logits_meaningful=False)
        pretrained.package_dir(name)
        copy = pretrained.smollm2_cache()
        if pretrained.cache_status(copy) == "ok":
            return hf_spec(name, copy / "config.json")
        ggufs = sorted(pretrained.package_dir(name).glob("*.gguf"))
        return gguf_spec(name, ggufs[0]) if ggufs else None
    return hf_spec(name, Path(name).expanduser() / "config.json")


def _quick_kind(name: str) -> str | None:
    """``checkpoint`` or ``hf_dir`` for a folder whose ``config.json`` says plainly which it
    is; None for anything else, which :func:`interp.models.loader.classify` then names (it
    imports torch to recognise a damaged checkpoint, seconds a plain folder does not need)."""
    path = Path(name).expanduser()
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    if "format_version" in config:
        return "checkpoint"
    return "hf_dir" if "model_type" in config else None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"{str(path)!r} is not valid JSON ({exc}); the {what} is damaged: restore it"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {str(path)!r} ({exc.strerror}); restore it") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{str(path)!r} holds no config (a JSON object); restore it")
    return data


def _size(value: Any, field: str, path: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InterpError(f"{str(path)!r}: {field} must be a positive integer, got {value!r}")
    return value


def native_spec(name: str, path: Path) -> ModelSpec:
    """The spec of one of our checkpoints, from the ``model`` block of its ``config.json``:
    its hooks follow from it exactly (:class:`interp.models.attn_only.AttnOnlyTransformer`).

    Raises:
        CheckpointError: for a config that is not valid JSON or holds no ``model`` block.
        InterpError: for a size that is not a positive integer.
    """
    meta = _read_json(path, "checkpoint config")
    m = meta.get("model")
    if not isinstance(m, dict):
        raise CheckpointError(f"checkpoint config {str(path)!r} is invalid: no 'model' block")
    sizes = {f: _size(m.get(f), f, path) for f in ("n_layers", "n_heads", "d_model", "d_head")}
    L = sizes["n_layers"]
    ln = m.get("normalization_type", "LN") == "LN"
    hooks = {"hook_embed"}
    if m.get("positional_embedding_type", "standard") == "standard":
        hooks.add("hook_pos_embed")
    if ln and m.get("use_unembed", True):
        hooks |= {"ln_final.hook_scale", "ln_final.hook_normalized"}
    block = ["hook_resid_pre", "hook_attn_out", "hook_resid_post"]
    block += [f"attn.hook_{x}" for x in ("q", "k", "v", "attn_scores", "pattern", "z")]
    block += ["ln1.hook_scale", "ln1.hook_normalized"] if ln else []
    hooks |= {f"blocks.{l}.{h}" for l in range(L) for h in block}
    n_ctx = m.get("n_ctx")
    return ModelSpec(
        name=name, architecture="AttnOnlyTransformer", bridge=False, n_layers=L,
        n_heads=sizes["n_heads"], n_kv_heads=sizes["n_heads"], d_model=sizes["d_model"],
        d_head=sizes["d_head"], d_mlp=None, d_vocab=_size(m.get("d_vocab"), "d_vocab", path),
        n_ctx=int(n_ctx) if n_ctx else None,
        causal=m.get("attention_dir", "causal") == "causal", logits_meaningful=True,
        source=str(path), native_hooks=frozenset(hooks),
    )  # fmt: skip


def _first(config: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    return None


def _is_encoder(config: dict[str, Any]) -> bool:
    """The rule :func:`interp.models.hf.load_hf_dir` loads by: a causal LM's architecture is
    causal, a masked LM's an encoder; otherwise a model type with a masked-LM class that
    is not ``is_decoder`` (BERT's ``BertModel``) is an encoder."""
    archs = [str(a) for a in config.get("architectures") or []]
    if any(a.endswith(_CAUSAL_SUFFIXES) for a in archs):
        return False
    if any(a.endswith("ForMaskedLM") for a in archs):
        return True
    if config.get("model_type") in _ENCODER_TYPES:  # the common ones, without transformers
        return not config.get("is_decoder", False)
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return config.get("model_type") in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not config.get(
        "is_decoder", False
    )


def hf_spec(name: str, path: Path, *, logits_meaningful: bool = True) -> ModelSpec:
    """The spec of a Hugging Face ``config.json``, its fields read as TransformerLens's bridge
    maps them (``map_default_transformer_lens_config``; a multimodal config's
    ``text_config``).

    Raises:
        CheckpointError: for a config that is not valid JSON.
        InterpError: for a config without ``model_type``, or one that names no layer count,
            head count or width.
    """
    from interp.models.hf_tokenizers import read_config

    raw = read_config(path.parent) if path.name == "config.json" else _read_json(path, "config")
    config = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    d_model = _first(config, "n_embd", "hidden_size", "model_dim", "d_model", "hidden_dim")
    n_heads = _first(config, "n_head", "num_attention_heads", "num_heads", "n_heads")
    n_layers = _first(
        config, "n_layer", "num_hidden_layers", "num_transformer_layers", "num_layers",
        "n_layers", "n_blocks",
    )  # fmt: skip
    if not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (d_model, n_heads, n_layers)
    ):
        raise InterpError(
            f"{str(path)!r} names no layer count, head count and width that TransformerLens "
            "reads (num_hidden_layers, num_attention_heads, hidden_size): it is not a "
            "transformer language model's config"
        )
    kv = _first(config, "num_key_value_heads", "num_kv_heads", "n_kv_heads")
    n_ctx = _first(
        config, "n_positions", "max_position_embeddings", "max_context_length", "seq_length",
        "max_seq_len", "max_sequence_length",
    )  # fmt: skip
    d_head = config.get("head_dim") or d_model // n_heads
    d_mlp = _first(config, "n_inner", "intermediate_size", "mlp_hidden_size")
    archs = [str(a) for a in raw.get("architectures") or []]
    return ModelSpec(
        name=name, architecture=archs[0] if archs else str(raw.get("model_type")), bridge=True,
        n_layers=n_layers, n_heads=n_heads, n_kv_heads=int(kv) if isinstance(kv, int) else n_heads,
        d_model=d_model, d_head=int(d_head), d_mlp=d_mlp if isinstance(d_mlp, int) else None,
        d_vocab=int(config.get("vocab_size") or 0), n_ctx=n_ctx if isinstance(n_ctx, int) else None,
        causal=not _is_encoder(raw), logits_meaningful=logits_meaningful, source=str(path),
    )  # fmt: skip


def gguf_spec(name: str, path: Path) -> ModelSpec | None:
    """The spec of a GGUF file's metadata (``{arch}.block_count`` ...), read by ``gguf``
    without dequantising a tensor; ``None`` without the ``gguf`` package (the load then says
    how to install it).

    Raises:
        CheckpointError: for a file ``gguf`` cannot read.
    """
    try:
        import gguf
    except ImportError:
        return None
    try:
        reader = gguf.GGUFReader(path)
        fields = reader.fields

        def value(key: str) -> Any:
            f = fields.get(key)
            return None if f is None else f.contents()

        arch = str(value("general.architecture"))
        n_layers, n_heads = value(f"{arch}.block_count"), value(f"{arch}.attention.head_count")
        d_model = value(f"{arch}.embedding_length")
        kv = value(f"{arch}.attention.head_count_kv") or n_heads
        vocab = value(f"{arch}.vocab_size") or len(fields["tokenizer.ggml.tokens"].data)
        d_head = value(f"{arch}.attention.key_length") or d_model // n_heads
        return ModelSpec(
            name=name, architecture=f"{arch} (GGUF)", bridge=True, n_layers=int(n_layers),
            n_heads=int(n_heads), n_kv_heads=int(kv), d_model=int(d_model), d_head=int(d_head),
            d_mlp=int(value(f"{arch}.feed_forward_length") or 4 * d_model), d_vocab=int(vocab),
            n_ctx=int(value(f"{arch}.context_length") or 0) or None, causal=True,
            logits_meaningful=True, source=str(path),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"cannot read the GGUF metadata of {str(path)!r}: {exc}") from None

"""Shared validation and table helpers for the analysis modules.

Every analysis validates its model and tokens here *before* any forward pass,
so a bad call fails fast with a message that says how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.errors import InterpError
from interp.hooks import head_label, hook_name


def check_model(model: Any) -> Any:
    """Raise unless ``model`` looks like a hooked transformer (``cfg`` + ``run_with_cache``)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "run_with_cache"):
        raise InterpError(
            f"{type(model).__name__} is not a hooked model: it needs .cfg and .run_with_cache "
            "(use interp.models, or a transformer_lens TransformerBridge)"
        )
    for field in ("n_layers", "n_heads"):
        if not isinstance(getattr(cfg, field, None), int):
            raise InterpError(f"model.cfg has no integer {field}")
    return cfg


def is_causal(model: Any) -> bool:
    """False only for models whose config says ``attention_dir == "bidirectional"`` (encoders)."""
    return getattr(model.cfg, "attention_dir", "causal") != "bidirectional"


def bos_token_id(model: Any) -> int:
    """The id a sequence starts with: CLS for encoders, else BOS; 0 without a tokenizer."""
    tok = getattr(model, "tokenizer", None)
    attrs = ("bos_token_id", "cls_token_id")
    if not is_causal(model):
        attrs = attrs[::-1]
    for attr in attrs:
        value = getattr(tok, attr, None) if tok is not None else None
        if value is not None:
            return int(value)
    return 0


def model_n_ctx(model: Any) -> int | None:
    return getattr(model.cfg, "n_ctx", None)


def check_tokens(model: Any, tokens: Any, *, min_len: int = 1) -> torch.Tensor:
    """Validate ``tokens`` for ``model`` and return a ``[batch, pos]`` long tensor.

    Raises:
        InterpError: for a non-tensor, wrong rank or dtype, an empty batch, a
            sequence shorter than ``min_len`` or longer than ``n_ctx``, or ids
            outside the vocabulary.
    """
    if not isinstance(tokens, torch.Tensor):
        raise InterpError(
            f"tokens must be a [batch, pos] tensor of ids, got {type(tokens).__name__}; "
            "use model.to_tokens(...) for text or words"
        )
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise InterpError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise InterpError(
            f"empty batch: tokens have shape {tuple(tokens.shape)}; pass at least one token"
        )
    if tokens.shape[1] < min_len:
        raise InterpError(f"sequences need at least {min_len} tokens, got {tokens.shape[1]}")
    n_ctx = model_n_ctx(model)
    if n_ctx is not None and tokens.shape[1] > n_ctx:
        raise InterpError(
            f"sequence length {tokens.shape[1]} exceeds the model's context n_ctx={n_ctx}; "
            "shorten or split the input"
        )
    d_vocab = getattr(model.cfg, "d_vocab", None)
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or (d_vocab is not None and hi >= d_vocab):
        raise InterpError(
            f"token id {lo if lo < 0 else hi} is outside the vocabulary [0, {d_vocab}); "
            "check the tokenizer or d_vocab"
        )
    return tokens.long()


def check_layer_head(model: Any, layer: int, head: int | None = None) -> None:
    """Raise unless ``layer`` (and ``head``) index into the model."""
    cfg = model.cfg
    if not isinstance(layer, int) or not 0 <= layer < cfg.n_layers:
        raise InterpError(
            f"layer {layer!r} out of range: the model has layers 0..{cfg.n_layers - 1}"
        )
    if head is not None and (not isinstance(head, int) or not 0 <= head < cfg.n_heads):
        raise InterpError(f"head {head!r} out of range: the model has heads 0..{cfg.n_heads - 1}")


def parse_heads(model: Any, heads: Iterable[Any] | None) -> list[tuple[int, int]]:
    """Normalise heads given as ``(layer, head)`` pairs or ``"L1H4"`` labels; all heads if None."""
    cfg = model.cfg
    if heads is None:
        return [(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    out = []
    for item in heads:
        if isinstance(item, str):
            s = item.strip().upper()
            try:
                l_str, h_str = s[1:].split("H")
                if not s.startswith("L"):
                    raise ValueError
                item = (int(l_str), int(h_str))
            except ValueError:
                raise InterpError(
                    f"head label {item!r} is not of the form L<layer>H<head>"
                ) from None
        layer, head = item
        check_layer_head(model, int(layer), int(head))
        out.append((int(layer), int(head)))
    if not out:
        raise InterpError("no heads given")
    return out


def head_frame(values: dict[str, Any], n_layers: int, n_heads: int) -> pd.DataFrame:
    """A tidy table with one row per head: ``layer, head, label``, then the value columns.

    Each value is an array ``[n_layers, n_heads]``.
    """
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    columns: dict[str, Any] = {"layer": layers.ravel(), "head": heads.ravel()}
    columns["label"] = [head_label(l, h) for l, h in zip(columns["layer"], columns["head"])]
    for name, v in values.items():
        arr = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        columns[name] = arr.reshape(-1)
    return pd.DataFrame(columns)  # built in one go: per-column inserts cost ms on small tables


def patterns(
    model: Any, tokens: torch.Tensor, *, cache: Any = None, layers: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Attention patterns ``[batch, head, query_pos, key_pos]`` per layer.

    Reads them from ``cache`` when given, else runs the model once caching only
    ``hook_pattern``.

    Raises:
        InterpError: if the model (or cache) has no attention patterns.
    """
    cfg = model.cfg
    layers = list(range(cfg.n_layers)) if layers is None else list(layers)
    names = [hook_name("pattern", l) for l in layers]
    if cache is None:
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, names_filter=names)
    missing = [n for n in names if n not in cache]
    if missing:
        raise InterpError(
            f"no attention patterns at {missing[0]}: the model or cache lacks hook_pattern "
            "(pass a cache built with that hook, or a model with attention)"
        )
    out = []
    for n in names:
        p = cache[n]
        if p.ndim == 3:  # a cache built with remove_batch_dim=True
            p = p[None]
        if p.shape[-1] != tokens.shape[1] or p.shape[0] != tokens.shape[0]:
            raise InterpError(
                f"cache pattern {n} has shape {tuple(p.shape)}, which does not match tokens "
                f"{tuple(tokens.shape)}; pass the cache of these tokens"
            )
        out.append(p.float())
    return out


def head_weight(model: Any, name: str) -> torch.Tensor:
    """``model.<name>`` with one entry per *query* head: ``[n_layers, n_heads, ...]``.

    Grouped-query attention models (e.g. SmolLM2: 9 query heads, 3 key/value
    heads) store ``W_K``/``W_V`` per key/value head; query head ``h`` uses
    key/value head ``h // (n_heads // n_kv_heads)``, so those are repeated.
    """
    W = getattr(model, name).detach()
    n_heads = int(model.cfg.n_heads)
    if W.shape[1] != n_heads:
        if n_heads % W.shape[1]:
            raise InterpError(f"{name} has {W.shape[1]} heads, not a divisor of {n_heads}")
        W = W.repeat_interleave(n_heads // W.shape[1], dim=1)
    return W


def per_query_heads(x: torch.Tensor, n_heads: int, dim: int = 2) -> torch.Tensor:
    """Repeat grouped key/value heads along ``dim`` so there is one per query head."""
    if x.shape[dim] == n_heads:
        return x
    return x.repeat_interleave(n_heads // x.shape[dim], dim=dim)

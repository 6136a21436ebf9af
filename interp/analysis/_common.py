"""Helpers shared by the analysis modules (private to :mod:`interp.analysis`).

Input validation lives one layer down, in :mod:`interp.protocol`; here are
the table builder, cache reads and per-query-head weight views.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.errors import InterpError
from interp.hooks import head_label, hook_name


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


def rows_frame(rows: Sequence[tuple[int, int]], values: dict[str, Sequence[Any]]) -> pd.DataFrame:
    """A tidy table for the listed heads only: ``layer, head, label``, then ``values``."""
    columns: dict[str, Any] = {
        "layer": [l for l, _ in rows],
        "head": [h for _, h in rows],
        "label": [head_label(l, h) for l, h in rows],
    }
    columns.update({k: list(v) for k, v in values.items()})
    return pd.DataFrame(columns)


def cached(cache: Any, name: str, tokens: torch.Tensor) -> torch.Tensor:
    """``cache[name]`` with a batch dimension, checked against ``tokens``.

    Raises:
        InterpError: if the cache lacks the hook or was built on other tokens.
    """
    try:
        x = cache[name]
    except (KeyError, TypeError, ValueError):
        x = None
    if x is None:
        raise InterpError(
            f"the cache has no {name}: build it with model.run_with_cache(tokens) "
            "(or a names_filter that keeps this hook)"
        )
    batch, pos = tokens.shape
    if x.ndim >= 1 and x.shape[0] != batch and batch == 1:
        x = x[None]  # a cache built with remove_batch_dim=True
    seq_dim = 2 if "hook_pattern" in name or "hook_attn_scores" in name else 1
    if x.shape[0] != batch or x.shape[seq_dim] != pos:
        raise InterpError(
            f"cache {name} has shape {tuple(x.shape)}, which does not match tokens "
            f"{tuple(tokens.shape)}; pass the cache of these tokens"
        )
    return x


def patterns(
    model: Any, tokens: torch.Tensor, *, cache: Any = None, layers: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Attention patterns ``[batch, head, query_pos, key_pos]`` per layer (float32).

    Reads them from ``cache`` when given, else runs the model once caching only
    ``hook_pattern``.

    Raises:
        InterpError: if the model (or cache) has no attention patterns.
    """
    cfg = model.cfg
    layers = list(range(cfg.n_layers)) if layers is None else list(layers)
    names = [hook_name("pattern", l) for l in layers]
    if cache is None:
        try:
            with torch.no_grad():
                _, cache = model.run_with_cache(tokens, names_filter=names)
        except (KeyError, AttributeError) as exc:
            raise InterpError("this model has no hook_pattern attention hooks") from exc
        missing = [n for n in names if n not in cache]
        if missing:
            raise InterpError(
                f"no attention patterns at {missing[0]}: the model lacks hook_pattern"
            )
    return [cached(cache, n, tokens).float() for n in names]


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


def hook_names(model: Any) -> set[str]:
    """Every hook name the model exposes."""
    names = set(getattr(model, "hook_dict", {}) or {})
    if not names and hasattr(model, "hook_points"):
        names = {h.name for h in model.hook_points()}
    return names

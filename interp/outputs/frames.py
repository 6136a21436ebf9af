"""Tidy tables: one row per head (``layer, head, label``, then the values), and what ``attrs`` say.

Every analysis returns a DataFrame whose first columns name what a row is
(``layer, head, label`` with ``label = L{l}H{h}`` for heads) and whose
``attrs`` follow one schema (:func:`table_attrs`), so a table exported to any
format says how it was computed.

Example:
    >>> head_frame({"score": [[0.5, 1.0]]}, 1, 2)["label"].tolist()
    ['L0H0', 'L0H1']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.hooks import head_label
from interp.core.protocol import HookedModel, model_name
from interp.core.version import VERSION


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


def head_columns(rows: Sequence[tuple[int, int]]) -> dict[str, list[Any]]:
    """The columns ``layer, head, label`` of the listed heads, as lists: a table's first
    columns, for a caller that builds the table in one go with its values.

    Args:
        rows: ``(layer, head)`` pairs, one per row.

    Returns:
        ``{"layer": [...], "head": [...], "label": ["L0H1", ...]}``.

    Example:
        >>> head_columns([(1, 0)])
        {'layer': [1], 'head': [0], 'label': ['L1H0']}
    """
    return {
        "layer": [l for l, _ in rows],
        "head": [h for _, h in rows],
        "label": [head_label(l, h) for l, h in rows],
    }


def rows_frame(rows: Sequence[tuple[int, int]], values: dict[str, Sequence[Any]]) -> pd.DataFrame:
    """A tidy table for the listed heads only: ``layer, head, label``, then ``values``."""
    columns: dict[str, Any] = head_columns(rows)
    columns.update({k: list(v) for k, v in values.items()})
    return pd.DataFrame(columns)


# What every table's attrs hold: the same keys, with these meanings, for every analysis
# (tests/test_signatures.py checks each public function's tables against it).
SCHEMA: dict[str, str] = {
    "analysis": "the function that made the table",
    "description": "what the numbers are, in a sentence",
    "method": "how they were computed: exact, eap, eap-ig or attribution",
    "ablation": "what replaced an activation: zero, mean, resample or patch (None: nothing)",
    "direction": "noising or denoising: which run was edited (None: no run was)",
    "metric": "the metric's name (None: no metric)",
    "unit": "what one unit of the values is",
    "model": "the model's name",
    "positions": "where edits applied: a list of positions, 'all' or 'each' (None: no edits)",
    "seed": "the seed of its random draws (None: it draws nothing)",
    "version": "the interp version that computed it",
    "forward_equivalents": "the work it took: passes counted in forward passes of its tokens",
    "engine": "the engine path that ran (None: no engine)",
}
METHODS: tuple[str, ...] = ("exact", "eap", "eap-ig", "attribution")


def table_attrs(
    analysis: str,
    *,
    description: str,
    method: str,
    model: HookedModel,
    metric: Any = None,
    unit: str | None = None,
    ablation: str | None = None,
    direction: str | None = None,
    positions: Any = None,
    seed: int | None = None,
    forward_equivalents: float,
    engine: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A table's ``attrs`` in the one schema (:data:`SCHEMA`), plus ``extra`` keys.

    ``metric`` is a :class:`~interp.core.metrics.Metric` (its name and unit are recorded) or a
    name; ``unit`` overrides the metric's. ``model`` is the model (its name is recorded).

    Raises:
        ValueError: for a method outside :data:`METHODS` (a programming error).
    """
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {METHODS}")
    name = getattr(metric, "name", metric)
    if unit is None:
        unit = getattr(metric, "unit", None) or ""
    out = {
        "analysis": analysis,
        "description": description,
        "method": method,
        "ablation": ablation,
        "direction": direction,
        "metric": name,
        "unit": unit,
        "model": None if model is None else model if isinstance(model, str) else model_name(model),
        "positions": positions,
        "seed": seed,
        "version": VERSION,
        "forward_equivalents": round(float(forward_equivalents), 3),
        "engine": engine,
    }
    if ablation == "patch":  # two runs: which tokens their metric is scored against
        out["scored_on"] = "the clean tokens, in both runs"
    out.update(extra)
    return out


def described(df: pd.DataFrame, analysis: str, **attrs: Any) -> pd.DataFrame:
    """``df`` with ``attrs`` in the schema (:func:`table_attrs`; same arguments)."""
    df.attrs.update(table_attrs(analysis, **attrs))
    return df

"""Ablating MLPs and whole attention layers: "attention or MLP?" in one call.

The same methods as head ablation (:mod:`interp.analysis.ablation`): ``zero``,
``mean`` (over the batch or ``reference_tokens``), ``resample`` (a seeded
draw of another sequence), at every position or at ``positions``, exact on
the engine of :mod:`interp.analysis._sweep` (each edit resumed at its layer).

* :func:`ablate_mlps`: each MLP's output (``blocks.{l}.hook_mlp_out``), or,
  with ``neuron_groups=g``, each of ``g`` contiguous groups of its hidden
  neurons (``blocks.{l}.mlp.hook_post``).
* :func:`ablate_layers`: each layer's attention (every head's ``hook_z``:
  the output bias stays, as in head ablation) and MLP, one row each.

Example:
    >>> from interp.models.hf import random_gpt2
    >>> from interp.datasets import repeated_random_tokens
    >>> model = random_gpt2(2, vocab=30)
    >>> tokens = repeated_random_tokens(3, 6, d_vocab=30, seed=0).tokens
    >>> ablate_layers(model, tokens)["label"].tolist()
    ['L0.attn', 'L0.mlp', 'L1.attn', 'L1.mlp']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd
import torch

from interp.analysis._common import hook_names
from interp.analysis._sweep import Site, site, sweep
from interp.analysis.ablation import Method, prepare_ablation, record_ablation, replacements
from interp.analysis.metrics import Metric
from interp.errors import InterpError
from interp.hooks import hook_name
from interp.protocol import check_int, check_layer_head, eval_no_grad

PARTS = ("attn", "mlp")


def _layers(model: Any, layers: Iterable[Any] | None) -> list[int]:
    if layers is None:
        return list(range(model.cfg.n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise InterpError(f"layers must be a list of block indices, got {layers!r}")
    out = sorted({check_layer_head(model, l)[0] for l in layers})
    if not out:
        raise InterpError("layers is empty; pass block indices, or None for every layer")
    return out


def _check_mlps(model: Any) -> int:
    """``d_mlp``, refusing models without MLPs."""
    if hook_name("mlp_out", 0) not in hook_names(model):
        raise InterpError(
            "this model has no MLPs (no blocks.0.hook_mlp_out): it is attention-only; ablate "
            "its heads (ablate_heads) or its attention layers (ablate_layers(parts=['attn']))"
        )
    return int(getattr(model.cfg, "d_mlp", 0) or 0)


def _run(
    model: Any,
    tokens: torch.Tensor,
    rows: list[dict[str, Any]],
    edits: list[list[Site]],
    *,
    method: str,
    metric: Any,
    loss_mask: Any,
    positions: Any,
    reference_tokens: Any,
    cache: Any,
    seed: int,
    batch_size: Any,
    memory_budget: Any,
    progress: bool,
    analysis: str,
) -> pd.DataFrame:
    """Prepare, sweep and tabulate ``edits`` (one per row)."""
    tokens, m, reference_tokens, pos, seed, cache = prepare_ablation(
        model, tokens, method, metric, loss_mask, reference_tokens, positions, seed, cache
    )
    at = None if pos is None else tuple(int(i) for i in torch.nonzero(pos).flatten())
    edits = [
        [Site(s.hook, s.layer, s.head, at, s.channels, s.head_dim, s.pos_dim) for s in e]
        for e in edits
    ]
    names = sorted({s.hook for e in edits for s in e})
    with eval_no_grad(model):
        values = replacements(
            model,
            tokens,
            method,
            names,
            reference_tokens=reference_tokens,
            cache=cache,
            seed=seed,
        )
        result = sweep(
            model,
            tokens,
            edits,
            m,
            values=values,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"{method} ablation",
        )
    df = pd.DataFrame(rows)
    df["clean"] = result.clean
    df["ablated"] = result.values
    df["delta"] = df["ablated"] - result.clean
    return record_ablation(df, result, method, m, model, pos, seed, reference_tokens, analysis)


def ablate_mlps(
    model: Any,
    tokens: torch.Tensor,
    *,
    method: Method = "zero",
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
    layers: Sequence[int] | None = None,
    neuron_groups: int | None = None,
    loss_mask: torch.Tensor | None = None,
    positions: Any = None,
    reference_tokens: torch.Tensor | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate each MLP (or each of ``neuron_groups`` groups of its neurons) alone.

    Columns ``layer, group, label, neurons, clean, ablated, delta`` (``group``
    and ``neurons`` are empty for whole MLPs; labels ``L3.mlp`` or
    ``L3.mlp[384:768]``). Options as :func:`interp.analysis.ablate_heads`.

    Raises:
        InterpError: for a model without MLPs, ``neuron_groups`` below 1 or
            above ``d_mlp``, layers out of range, and as :func:`ablate_heads`.
    """
    d_mlp = _check_mlps(model)
    chosen = _layers(model, layers)
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    if neuron_groups is None:
        for l in chosen:
            rows.append({"layer": l, "group": None, "label": f"L{l}.mlp", "neurons": ""})
            edits.append([site("mlp_out", l)])
    else:
        g = check_int(neuron_groups, "neuron_groups", minimum=1)
        if g > d_mlp:
            raise InterpError(f"neuron_groups={g} is more than the MLP's {d_mlp} neurons")
        bounds = [round(i * d_mlp / g) for i in range(g + 1)]
        for l in chosen:
            for i in range(g):
                a, b = bounds[i], bounds[i + 1]
                rows.append(
                    {
                        "layer": l,
                        "group": i,
                        "label": f"L{l}.mlp[{a}:{b}]",
                        "neurons": f"{a}-{b - 1}",
                    }
                )
                edits.append([Site(f"blocks.{l}.mlp.hook_post", l, channels=(a, b))])
    df = _run(
        model,
        tokens,
        rows,
        edits,
        method=method,
        metric=metric,
        loss_mask=loss_mask,
        positions=positions,
        reference_tokens=reference_tokens,
        cache=cache,
        seed=seed,
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        analysis="ablate_mlps (exact)" + ("" if neuron_groups is None else ", neuron groups"),
    )
    df["group"] = df["group"].astype("Int64")
    return df


def ablate_layers(
    model: Any,
    tokens: torch.Tensor,
    *,
    method: Method = "zero",
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
    layers: Sequence[int] | None = None,
    parts: Sequence[str] = PARTS,
    loss_mask: torch.Tensor | None = None,
    positions: Any = None,
    reference_tokens: torch.Tensor | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate each layer's attention (all its heads) and MLP alone: one row per layer and part.

    Columns ``layer, part, label, clean, ablated, delta`` (labels ``L3.attn``,
    ``L3.mlp``). ``parts`` picks ``"attn"``, ``"mlp"`` or both (attention-only
    models have no ``"mlp"``). Options as :func:`interp.analysis.ablate_heads`.

    Raises:
        InterpError: for an unknown part, ``"mlp"`` on a model without MLPs,
            layers out of range, and as :func:`ablate_heads`.
    """
    parts = tuple(parts) if not isinstance(parts, str) else (parts,)
    if not parts or any(p not in PARTS for p in parts):
        raise InterpError(f"parts must be a subset of {', '.join(PARTS)}, got {parts}")
    if "mlp" in parts:
        if hook_name("mlp_out", 0) not in hook_names(model) and parts == PARTS:
            parts = ("attn",)  # an attention-only model: its layers are their attention
        elif "mlp" in parts:
            _check_mlps(model)
    chosen = _layers(model, layers)
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    for l in chosen:
        for part in parts:
            rows.append({"layer": l, "part": part, "label": f"L{l}.{part}"})
            edits.append([site("z", l)] if part == "attn" else [site("mlp_out", l)])
    return _run(
        model,
        tokens,
        rows,
        edits,
        method=method,
        metric=metric,
        loss_mask=loss_mask,
        positions=positions,
        reference_tokens=reference_tokens,
        cache=cache,
        seed=seed,
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        analysis="ablate_layers (exact): each layer's attention and MLP",
    )

"""Ablating MLPs and whole attention layers: "attention or MLP?" in one call.

The same ablations as for heads (:mod:`interp.analysis.components.ablation`):
``zero``, ``mean`` (over the batch or ``reference_tokens``), ``resample`` (a
seeded draw of another sequence), at every position or at ``positions``, exact
on the engine of :mod:`interp.engine.sweep` (each edit resumed at its layer).

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

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from interp.analysis.components._pipeline import ablate, check_ablating
from interp.analysis.components.ablation import Ablation, MetricArg
from interp.analysis.shapes import Mask, Tokens
from interp.checks import check_int
from interp.engine.chunks import Estimate
from interp.engine.sites import Site, site
from interp.errors import InterpError
from interp.glossary import retired_words
from interp.head_checks import check_layer
from interp.hooks import hook_name
from interp.protocol import HookedModel, check_model, hook_names

PARTS = ("attn", "mlp")


def _layers(model: HookedModel, layers: Iterable[Any] | None) -> list[int]:
    if layers is None:
        return list(range(model.cfg.n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise InterpError(f"layers must be a list of block indices, got {layers!r}")
    out = sorted({check_layer(model, l) for l in layers})
    if not out:
        raise InterpError("layers is empty; pass block indices, or None for every layer")
    return out


def _check_mlps(model: HookedModel) -> int:
    """``d_mlp``, refusing models without MLPs."""
    if hook_name("mlp_out", 0) not in hook_names(model):
        raise InterpError(
            "this model has no MLPs (no blocks.0.hook_mlp_out): it is attention-only; ablate "
            "its heads (ablate_heads) or its attention layers (ablate_layers(parts=['attn']))"
        )
    return int(getattr(model.cfg, "d_mlp", 0) or 0)


@retired_words(method="ablation")
def ablate_mlps(
    model: HookedModel,
    tokens: Tokens,
    *,
    ablation: Ablation = "zero",
    metric: MetricArg = None,
    layers: Sequence[int] | None = None,
    neuron_groups: int | None = None,
    loss_mask: Mask | None = None,
    positions: Any = None,
    reference_tokens: Tokens | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Ablate each MLP (or each of ``neuron_groups`` groups of its neurons) alone.

    Columns ``layer, neuron_group, label, neurons, clean, ablated, effect``
    (``neuron_group`` and ``neurons`` are empty for whole MLPs; labels ``L3.mlp``
    or ``L3.mlp[384:768]``). Options as :func:`interp.analysis.ablate_heads`.

    Raises:
        InterpError: for a model without MLPs, ``neuron_groups`` below 1 or
            above ``d_mlp``, layers out of range, and as :func:`ablate_heads`.
    """
    check_model(model)
    d_mlp = _check_mlps(model)
    chosen = _layers(model, layers)
    if neuron_groups is not None:
        g = check_int(neuron_groups, "neuron_groups", minimum=1)
        if g > d_mlp:
            raise InterpError(f"neuron_groups={g} is more than the MLP's {d_mlp} neurons")
    a = check_ablating(
        model, tokens, ablation=ablation, metric=metric, loss_mask=loss_mask,
        reference_tokens=reference_tokens, positions=positions, seed=seed, cache=cache,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    if neuron_groups is None:
        for l in chosen:
            rows.append({"layer": l, "neuron_group": None, "label": f"L{l}.mlp", "neurons": ""})
            edits.append([site("mlp_out", l)])
    else:
        bounds = [round(i * d_mlp / g) for i in range(g + 1)]
        for l in chosen:
            for i in range(g):
                lo, hi = bounds[i], bounds[i + 1]
                rows.append(
                    {
                        "layer": l,
                        "neuron_group": i,
                        "label": f"L{l}.mlp[{lo}:{hi}]",
                        "neurons": f"{lo}-{hi - 1}",
                    }
                )
                edits.append([Site(f"blocks.{l}.mlp.hook_post", l, channels=(lo, hi))])
    table = pd.DataFrame(rows)
    table["neuron_group"] = table["neuron_group"].astype("Int64")
    return ablate(
        model,
        a,
        edits,
        table,
        analysis="ablate_mlps",
        description=f"the metric with each MLP{'' if neuron_groups is None else ' neuron group'} "
        f"{a.ablation}-ablated alone, exactly",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )


@retired_words(method="ablation")
def ablate_layers(
    model: HookedModel,
    tokens: Tokens,
    *,
    ablation: Ablation = "zero",
    metric: MetricArg = None,
    layers: Sequence[int] | None = None,
    parts: Sequence[str] = PARTS,
    loss_mask: Mask | None = None,
    positions: Any = None,
    reference_tokens: Tokens | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Ablate each layer's attention (all its heads) and MLP alone: one row per layer and part.

    Columns ``layer, part, label, clean, ablated, effect`` (labels ``L3.attn``,
    ``L3.mlp``). ``parts`` picks ``"attn"``, ``"mlp"`` or both (attention-only
    models have no ``"mlp"``). Options as :func:`interp.analysis.ablate_heads`.

    Raises:
        InterpError: for an unknown part, ``"mlp"`` on a model without MLPs,
            layers out of range, and as :func:`ablate_heads`.
    """
    check_model(model)
    parts = tuple(parts) if not isinstance(parts, str) else (parts,)
    if not parts or any(p not in PARTS for p in parts):
        raise InterpError(f"parts must be a subset of {', '.join(PARTS)}, got {parts}")
    if "mlp" in parts:
        if hook_name("mlp_out", 0) not in hook_names(model) and parts == PARTS:
            parts = ("attn",)  # an attention-only model: its layers are their attention
        else:
            _check_mlps(model)
    chosen = _layers(model, layers)
    a = check_ablating(
        model, tokens, ablation=ablation, metric=metric, loss_mask=loss_mask,
        reference_tokens=reference_tokens, positions=positions, seed=seed, cache=cache,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    for l in chosen:
        for part in parts:
            rows.append({"layer": l, "part": part, "label": f"L{l}.{part}"})
            edits.append([site("z", l)] if part == "attn" else [site("mlp_out", l)])
    return ablate(
        model,
        a,
        edits,
        pd.DataFrame(rows),
        analysis="ablate_layers",
        description=f"the metric with each layer's attention and MLP {a.ablation}-ablated alone",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )

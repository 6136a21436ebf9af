"""The one pipeline of every single-activation intervention: check, build values, sweep, tabulate.

Head, MLP and layer ablations (:mod:`.ablation`, :mod:`.layer_ablation`) and
head and component patching (:mod:`.patching`, :mod:`.component_patching`)
differ only in their edits. Each checks every input before any pass
(:func:`check_ablating`, :func:`check_patching`), builds the values its edits
splice in (:func:`interp.engine.ablations.values_for` or the source run), runs
the exact sweep (:func:`interp.engine.sweep.sweep`) and tabulates ``effect``
with the attrs schema of :func:`interp.analysis.frames.table_attrs`. Private to
:mod:`interp.analysis.components`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import torch

from interp.analysis.frames import table_attrs
from interp.analysis.shapes import Tokens
from interp.checks import check_seed, check_token_pair, check_tokens, position_mask
from interp.engine.ablations import check_ablation, check_reference, source_run, values_for
from interp.engine.batching import Cost
from interp.engine.cache import CheckedCache, cache_work, check_cache
from interp.engine.direction import (
    check_direction,
    check_span,
    clean_first,
    effects,
    normalized,
    runs,
)
from interp.engine.sites import Site, mask_positions
from interp.engine.sweep import check_sweep_work, sweep
from interp.errors import InterpError
from interp.metrics import Metric, prepare_metric
from interp.protocol import HookedModel, check_model, eval_no_grad, positions_label

ABLATING = ("zero", "mean", "resample")


@dataclasses.dataclass(frozen=True)
class Ablating:
    """An ablation's checked inputs."""

    tokens: torch.Tensor
    metric: Metric
    ablation: str
    reference_tokens: Tokens | None
    positions: torch.Tensor | None  # [pos] bool, None: every position
    seed: int
    cache: CheckedCache | None


def check_ablating(
    model: HookedModel,
    tokens: Any,
    *,
    ablation: str,
    metric: Any,
    loss_mask: Any,
    reference_tokens: Any,
    positions: Any,
    seed: Any,
    cache: Any,
) -> Ablating:
    """Every input of an ablation checked before any forward pass.

    Raises:
        InterpError: for an unknown ablation, bad tokens, a ``loss_mask`` or reference
            batch that does not fit, ``loss_mask`` beside a custom metric, a metric that
            needs an LM head the model lacks, positions out of range, a bad seed, or a
            cache of other tokens.
    """
    check_model(model)
    ablation = check_ablation(ablation, ABLATING)
    tokens = check_tokens(model, tokens, min_len=2)
    m = prepare_metric(model, tokens, metric, loss_mask)
    reference_tokens = check_reference(model, tokens, ablation, reference_tokens)
    pos = position_mask(tokens.shape[1], positions)
    seed = check_seed(seed)
    with eval_no_grad(model):
        checked = check_cache(model, tokens, cache)
    return Ablating(tokens, m, ablation, reference_tokens, pos, seed, checked)


def ablate(
    model: HookedModel,
    a: Ablating,
    edits: Sequence[Sequence[Site]],
    rows: pd.DataFrame,
    *,
    analysis: str,
    description: str,
    batch_size: Any,
    memory_budget: Any,
    progress: bool,
) -> pd.DataFrame:
    """``rows`` (one per edit) with ``clean, ablated, effect``: each edit's sites at
    ``a.positions``, replaced by ``a.ablation``'s values, in one exact sweep."""
    at = mask_positions(a.positions)
    edits = [[s.at(at) for s in e] for e in edits]
    names = sorted({s.hook for e in edits for s in e})
    check_sweep_work(model, edits)  # before the values' pass
    cost = Cost(model.cfg.n_layers)
    with eval_no_grad(model):
        values = values_for(
            model,
            a.tokens,
            a.ablation,
            names,
            reference_tokens=a.reference_tokens,
            cache=a.cache,
            seed=a.seed,
            cost=cost,
        )
        result = sweep(
            model,
            a.tokens,
            edits,
            a.metric,
            values=values,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"{a.ablation} ablation",
        )
    df = rows.copy()
    df["clean"] = result.base  # an ablation edits the clean run
    df["ablated"] = result.values
    df["effect"] = effects(result.values, result.base)
    ref = a.reference_tokens
    df.attrs.update(
        table_attrs(
            analysis,
            description=description,
            method="exact",
            ablation=a.ablation,
            direction="noising",
            metric=a.metric,
            model=model,
            positions=positions_label(a.positions),
            seed=a.seed,
            forward_equivalents=result.cost + cost.forward_equivalents + cache_work(a.cache),
            engine=result.path,
            engine_note=result.note,
            reference="the tokens" if ref is None else f"{ref.shape[0]} sequences",
        )
    )
    return df


@dataclasses.dataclass(frozen=True)
class Patching:
    """A patch's checked inputs: the base run is edited with the source run's values."""

    tokens: torch.Tensor  # the clean tokens (the metric is scored against them)
    corrupted: torch.Tensor
    base: torch.Tensor
    source: torch.Tensor
    metric: Metric
    direction: str
    positions: torch.Tensor | None
    cache: CheckedCache | None  # of the clean tokens


def check_patching(
    model: HookedModel,
    tokens: Any,
    *,
    corrupted_tokens: Any,
    metric: Any,
    direction: Any,
    positions: Any,
    cache: Any,
    what: str,
) -> Patching:
    """Every input of a patch checked before any forward pass.

    Raises:
        InterpError: for an unknown direction, clean and corrupted tokens that do not pair
            up, a missing metric or one that needs an LM head the model lacks, positions
            out of range, or a cache of other tokens.
    """
    check_model(model)
    direction = check_direction(direction)
    tokens, corrupted_tokens = check_token_pair(model, tokens, corrupted_tokens)
    if metric is None:
        raise InterpError(f"{what} needs a metric, e.g. logit_diff_metric(answer, wrong)")
    m = prepare_metric(model, tokens, metric, None)
    pos = position_mask(tokens.shape[1], positions)
    with eval_no_grad(model):
        checked = check_cache(model, tokens, cache)
    base, source = runs(direction, tokens, corrupted_tokens)
    return Patching(tokens, corrupted_tokens, base, source, m, direction, pos, checked)


def patch(
    model: HookedModel,
    p: Patching,
    names: Sequence[str],
    cells: Callable[[dict[str, torch.Tensor]], tuple[pd.DataFrame, list[list[Site]]]],
    *,
    analysis: str,
    description: str,
    batch_size: Any,
    memory_budget: Any,
    progress: bool,
    **extra: Any,
) -> pd.DataFrame:
    """The source run's activations at ``names`` spliced into the base run, one cell at a
    time: ``cells(values)`` gives the table's rows and one edit per row. Columns ``clean,
    corrupted, patched, effect, normalized`` (:mod:`interp.engine.direction`).

    Raises:
        InterpError: when the clean and corrupted runs give the same metric.
    """
    with eval_no_grad(model):
        source_cache = p.cache if p.direction == "denoising" else None  # the clean run's
        source_value, values = source_run(model, p.source, p.metric, names, source_cache, p.tokens)
        rows, edits = cells(values)
        result = sweep(
            model,
            p.base,
            edits,
            p.metric,
            values=values,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"patching ({p.direction})",
            score_tokens=p.tokens,
        )
    base_value = result.base
    check_span(base_value, source_value, "the normalized effect")
    clean, corrupted = clean_first(p.direction, base_value, source_value)
    df = rows.copy()
    df["clean"] = clean
    df["corrupted"] = corrupted
    df["patched"] = result.values
    df["effect"] = effects(result.values, base_value)
    df["normalized"] = normalized(df["effect"], base=base_value, source=source_value)
    df.attrs.update(
        table_attrs(
            analysis,
            description=description,
            method="exact",
            ablation="patch",
            direction=p.direction,
            metric=p.metric,
            model=model,
            positions=positions_label(p.positions),
            seed=None,
            forward_equivalents=result.cost + 1.0 + cache_work(p.cache),
            engine=result.path,
            engine_note=result.note,
            **extra,
        )
    )
    return df

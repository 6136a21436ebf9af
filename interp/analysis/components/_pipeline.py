"""The one pipeline of every single-activation intervention: check, build values, sweep, tabulate.

Head, MLP and layer ablations (:mod:`.ablation`, :mod:`.layer_ablation`) and
head and component patching (:mod:`.patching`, :mod:`.component_patching`)
differ only in their edits. Each checks every input before any pass
(:func:`check_ablating`, :func:`check_patching`), builds the values its edits
splice in (:func:`interp.engine.ablations.values_for` or the source run), runs
the exact sweep (:func:`interp.engine.sweeps.sweep.sweep`) and tabulates ``effect``
with the attrs schema of :func:`interp.outputs.frames.table_attrs`. Private to
:mod:`interp.analysis.components`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.checks import check_seed
from interp.core.metrics import Metric
from interp.core.precision import model_dtype
from interp.core.protocol import HookedModel, check_model, eval_no_grad, positions_label
from interp.core.shapes import Tokens
from interp.engine.ablations import (
    Replacements,
    check_ablation,
    check_reference,
    source_run,
    values_work,
)
from interp.engine.cache import CheckedCache, cache_rows, cache_work, check_cache
from interp.engine.chunks import Estimate, check_chunkable
from interp.engine.cost import Cost, pass_equivalents
from interp.engine.direction import (
    check_span,
    clean_first,
    effects,
    normalized,
)
from interp.engine.runner import Chunk, Task, run
from interp.engine.runs import check_runs
from interp.engine.sweeps.cost import sweep_footprint
from interp.engine.sweeps.sites import Site, mask_positions
from interp.engine.sweeps.suffix import shared_prefix
from interp.engine.sweeps.sweep import check_sweep_work, sweep
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

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
    r = check_runs(
        model, tokens, patching=False, metric=metric, loss_mask=loss_mask, positions=positions,
        ablation=ablation, min_len=2,
    )  # fmt: skip
    reference_tokens = check_reference(model, r.tokens, ablation, reference_tokens)
    seed = check_seed(seed)
    checked = None
    if cache is not None:  # (no cache: nothing to check, no eval-mode switch to pay for)
        with eval_no_grad(model):
            checked = check_cache(model, r.tokens, cache)
    return Ablating(r.tokens, r.metric, ablation, reference_tokens, r.positions, seed, checked)


def ablate(
    model: HookedModel,
    a: Ablating,
    edits: Sequence[Sequence[Site]],
    rows: pd.DataFrame | Mapping[str, Any],
    *,
    analysis: str,
    description: str,
    batch_size: Any,
    memory_budget: Any,
    progress: bool,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """``rows`` (a table or its columns, one row per edit) with ``clean, ablated, effect``:
    each edit's sites at ``a.positions``, replaced by ``a.ablation``'s values, in one exact
    sweep per chunk of prompts (:mod:`interp.engine.chunks`); ``estimate=True`` returns the
    run's :class:`~interp.engine.chunks.Estimate` instead."""
    at = mask_positions(a.positions)
    edits = [[s.at(at) for s in e] for e in edits]
    names = sorted({s.hook for e in edits for s in e})
    n, pos = a.tokens.shape
    held = () if a.ablation == "zero" else names  # zero ablation splices no values in
    reads = held if a.reference_tokens is None else ()  # values a cache supplies
    values_cost = Cost.of(model, pos, a.metric.rows)  # the values' pass
    blocks = values_cost.block_share  # a pass stopped at a block: its share of the blocks
    shared: dict[str, Any] = {}

    def work(chunks: list[slice]) -> float:
        # the sweep, the values' pass and the cache's: what the run will count
        values = values_work(model.cfg.n_layers, a.tokens, a.ablation, names,
                             split=len(chunks) > 1, reference_tokens=a.reference_tokens,
                             cache=a.cache)  # fmt: skip
        also = (values + cache_work(a.cache, reads)) * blocks
        parts = chunk_rows(a.metric, chunks)
        return check_sweep_work(model, edits, also=also, pos=pos, parts=parts)

    def prepare(chunks: list[slice]) -> float:
        shared["values"] = Replacements(
            model, a.tokens, a.ablation, names, reference_tokens=a.reference_tokens,
            cache=a.cache, seed=a.seed, cost=values_cost, chunks=chunks,
        )  # fmt: skip
        return 0.0  # counted in values_cost as the chunks draw on it

    def chunk(c: Chunk) -> dict[str, Any]:
        result = sweep(
            model, a.tokens[c.rows], edits, c.metric, values=shared["values"].rows(c.rows),
            batch_size=batch_size, memory_budget=c.budget, progress=c.progress,
            desc=f"{a.ablation} ablation", checked=True,  # work() checked every chunk's
        )  # fmt: skip
        return {
            "base": result.base, "ablated": np.asarray(result.values, dtype=float),
            "engine": (result.path, result.note), "cost": result.cost,
        }  # fmt: skip

    task = Task(
        analysis, sweep_footprint(model, pos, edits, held, rows=a.metric.rows), work=work,
        chunk=chunk, combine={"base": "mean", "ablated": "mean", "engine": "same"},
        metric=a.metric, prepare=prepare, what=f"{analysis} ({a.ablation})",
        fix="ablate at fewer positions or use shorter prompts",
        inputs=(a, edits),
    )  # fmt: skip
    with eval_no_grad(model):
        out = run(model, (n, pos), task, memory_budget=memory_budget, estimate=estimate,
                  progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    base = out.values["base"]
    ablated = out.values["ablated"]
    path, note = out.values["engine"]
    counted = round(out.forward_equivalents + values_cost.total, 3)
    # an ablation edits the clean run
    df = table(rows, clean=float(base), ablated=ablated, effect=effects(list(ablated), float(base)))
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
            forward_equivalents=round(counted + cache_work(a.cache) * blocks, 3),
            engine=path,
            engine_note=note,
            reference="the tokens" if ref is None else f"{ref.shape[0]} sequences",
            chunks=out.chunks,
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
    r = check_runs(
        model, tokens, patching=True, corrupted_tokens=corrupted_tokens, direction=direction,
        metric=metric, positions=positions, what=what,
    )  # fmt: skip
    with eval_no_grad(model):
        checked = check_cache(model, r.tokens, cache)
    return Patching(
        r.tokens, r.corrupted, r.base, r.source, r.metric, r.direction, r.positions, checked
    )


def patch(
    model: HookedModel,
    p: Patching,
    names: Sequence[str],
    cells: Callable[[dict[str, torch.Tensor]], tuple[Any, list[list[Site]]]],
    *,
    analysis: str,
    description: str,
    batch_size: Any,
    memory_budget: Any,
    progress: bool,
    estimate: bool = False,
    **extra: Any,
) -> pd.DataFrame | Estimate:
    """The source run's activations at ``names`` spliced into the base run, one cell at a
    time: ``cells(values)`` gives the table's rows (a table or its columns) and one edit per
    row. Columns ``clean, corrupted, patched, effect, normalized``
    (:mod:`interp.engine.direction`). The prompts run in chunks under the memory budget
    (:mod:`interp.engine.chunks`); ``estimate=True`` returns the run's
    :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: when the clean and corrupted runs give the same metric.
    """
    n, pos = p.tokens.shape
    rt = runtime_of(model)
    shapes = {k: torch.empty(1, *rt.activation_shape(k, pos), device="meta") for k in names}
    rows, edits = cells(shapes)  # the cells read only the activations' shapes
    # the sweep, the source run (a pass for its metric) and the cache's (denoising reads it)
    reads = names if p.direction == "denoising" else ()
    unit = Cost.of(model, pos, p.metric.rows)
    shared = shared_prefix(p.base, p.source)  # every chunk's passes share these positions

    def source_pass(metric: Metric) -> float:  # the source run: a pass to the metric's rows
        return pass_equivalents(model, pos, rows=runtime_of(model).unembedded(metric.rows))

    def work(chunks: list[slice]) -> float:
        parts = chunk_rows(p.metric, chunks)
        source = sum(share * pass_equivalents(model, pos, rows=rt.unembedded(r))
                     for share, r in parts)  # fmt: skip
        also = source + cache_work(p.cache, reads) * unit.block_share
        return check_sweep_work(model, edits, also=also, pos=pos, parts=parts, shared=shared)

    def chunk(c: Chunk) -> dict[str, Any]:
        # the clean run's cache serves as the source only when denoising
        source_cache = cache_rows(p.cache, c.rows) if p.direction == "denoising" else None
        sl = c.rows
        value, values = source_run(model, p.source[sl], c.metric, names, source_cache, p.tokens[sl])
        result = sweep(
            model, p.base[sl], edits, c.metric, values=values, batch_size=batch_size,
            memory_budget=c.budget, progress=c.progress, desc=f"patching ({p.direction})",
            score_tokens=p.tokens[sl], shared=shared, checked=True,  # work() checked them
        )  # fmt: skip
        del values
        return {
            "base": result.base, "source": value,
            "patched": np.asarray(result.values, dtype=float),
            "engine": (result.path, result.note), "cost": result.cost + source_pass(c.metric),
        }  # fmt: skip

    task = Task(
        analysis, sweep_footprint(model, pos, edits, names, rows=p.metric.rows), work=work,
        chunk=chunk, metric=p.metric, what=analysis,
        combine={"base": "mean", "source": "mean", "patched": "mean", "engine": "same"},
        fix="patch fewer cells (fewer positions or a coarser by=) or use shorter prompts",
        inputs=(p, edits),
    )  # fmt: skip
    with eval_no_grad(model):
        out = run(model, (n, pos), task, memory_budget=memory_budget, estimate=estimate,
                  progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    base_value, source_value = float(out.values["base"]), float(out.values["source"])
    patched = out.values["patched"]
    path, note = out.values["engine"]
    check_span(base_value, source_value, "the normalized effect", model_dtype(model))
    clean, corrupted = clean_first(p.direction, base_value, source_value)
    effect = effects(list(patched), base_value)
    df = table(
        rows, clean=clean, corrupted=corrupted, patched=patched, effect=effect,
        normalized=normalized(effect, base=base_value, source=source_value),
    )  # fmt: skip
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
            forward_equivalents=round(
                out.forward_equivalents + cache_work(p.cache) * unit.block_share, 3
            ),
            engine=path,
            engine_note=note,
            chunks=out.chunks,
            **extra,
        )
    )
    return df


def table(rows: pd.DataFrame | Mapping[str, Any], **columns: Any) -> pd.DataFrame:
    """``rows`` (a table, or its columns) with ``columns`` after its own, built in one go: a
    copy and one inserted column at a time cost about a millisecond on a table of a few rows,
    as much as a pass of a small model."""
    if isinstance(rows, pd.DataFrame):
        return pd.DataFrame({**{c: rows[c] for c in rows.columns}, **columns}, index=rows.index)
    return pd.DataFrame({**rows, **columns})


def chunk_rows(metric: Metric, chunks: list[slice]) -> list[tuple[float, Any]]:
    """``(share of the prompts, rows its metric reads)`` per chunk a run computes (one chunk:
    the metric's own rows; chunks the metric gives no weight are not run)."""
    if len(chunks) == 1:
        return [(1.0, metric.rows)]
    check_chunkable(metric, len(chunks))  # its refusal names the chunks
    n = chunks[-1].stop
    out = []
    for sl in chunks:
        part, weight = metric.chunk(sl)
        if weight > 0:
            out.append(((sl.stop - sl.start) / n, part.rows))
    return out

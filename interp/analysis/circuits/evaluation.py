"""Circuits measured exactly: faithfulness of a set of edges, and curves of it by size
(the smallest circuit reaching a target: :mod:`interp.analysis.circuits.search`).

A circuit is a set of edges (:mod:`interp.analysis.circuits.circuit`). To
evaluate it, run the clean prompt once with every edge *outside* the circuit
switched to the replacement: each receiver's input is its input in this
pass, with every non-circuit sender's contribution replaced by that sender's
corrupted output (or zero, or its mean). This is EAP-IG's ``evaluate_graph``
definition, computed exactly per receiver in one forward pass (queries,
keys and values recomputed from each receiver's own input). All edges give
the clean metric (to float32 rounding: nothing is edited) and no edges the corrupted
one (to float precision); the faithfulness

    (m_circuit - m_corrupted) / (m_clean - m_corrupted)

is 1 for the whole graph and 0 for the empty circuit. Faithfulness depends
on the replacement: Miller et al. (2024) show it moves a lot between
ablations, so ``df.attrs`` records which one was used.

Example:
    >>> from interp.models import load_model
    >>> from interp.core.metrics import logit_diff_metric
    >>> model = load_model("induction-2l")
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])
    >>> corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]])
    >>> m = logit_diff_metric(8, 9)
    >>> whole = evaluate_circuit(model, clean, corrupted_tokens=corrupted, edges=None, metric=m)
    >>> float(whole["faithfulness"].item())
    1.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from interp.analysis.circuits.circuit import edge_mask, position_edge_mask
from interp.analysis.circuits.edge_attribution import score_matrix
from interp.analysis.circuits.pruning import top_edges
from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.core.metrics import Metric
from interp.core.precision import model_dtype
from interp.core.protocol import HookedModel, eval_no_grad, positions_label
from interp.core.shapes import Tokens
from interp.engine import runner
from interp.engine.batching import check_work
from interp.engine.chunks import Estimate
from interp.engine.direction import check_span
from interp.engine.edges.cost import edge_footprint, pass_work
from interp.engine.edges.passes import evaluate_masks
from interp.engine.edges.task import (
    EdgeTask,
    begin_chunk,
    begin_edge_task,
    check_edge_task,
    edge_inputs,
    prepare_chunks,
)
from interp.outputs.frames import table_attrs

Ablation = Literal["patch", "zero", "mean", "resample"]


def check_circuit(
    model: HookedModel, tokens: Any, corrupted_tokens: Any, metric: Any, ablation: str,
    seed: Any, positions: Any = None, per_position: bool = False,
) -> EdgeTask:  # fmt: skip
    """The checked task of a circuit evaluation: the clean run is the base (edges outside a
    circuit carry the replacement)."""
    return check_edge_task(
        model, tokens, corrupted_tokens=corrupted_tokens, metric=metric, ablation=ablation,
        positions=positions, seed=seed, per_position=per_position,
    )  # fmt: skip


def begin_circuit(task: EdgeTask, cache: Any) -> EdgeTask:
    """The task's first passes; the base metric from a plain pass."""
    return begin_edge_task(task, cache=cache, base_pass="metric")


def corrupted_metric(prep: EdgeTask, *, check: bool = True) -> float:
    """The metric with every edge replaced (with a corrupted prompt: the corrupted run's,
    from the pass that gave its outputs; else one circuit pass), refused when it equals the
    clean metric (``check``; a chunk's is checked once every chunk is in)."""
    if prep.source_value is not None:
        corrupted = prep.source_value
    else:
        corrupted = evaluate_masks(prep, [prep.graph.valid])[0]
    if check:
        check_span(prep.base_value, corrupted, "faithfulness", model_dtype(prep.rt.model))
    return corrupted


def faithfulness_of(value: float, clean: float, corrupted: float) -> float:
    """``(value - corrupted) / (clean - corrupted)``: 1 at the clean metric, 0 at the corrupted."""
    return (value - corrupted) / (clean - corrupted)  # corrupted_metric refused equal runs


def evaluate_circuit(
    model: HookedModel,
    tokens: Tokens,
    *,
    edges: Any,
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any],
    corrupted_tokens: Tokens | None = None,
    ablation: Ablation = "patch",
    positions: Any = None,
    cache: Any = None,
    seed: int = 0,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """The metric with only ``edges`` kept, and its faithfulness (module docstring).

    ``faithfulness = (m_circuit - m_corrupted) / (m_clean - m_corrupted)``, every edge
    outside the circuit switched to the replacement in one exact pass. Costs the two
    baselines (a plain clean forward; the corrupted run, which also records the senders'
    outputs) and one pass for the circuit; :func:`circuit_curve` shares the baselines and
    packs several circuits into each pass. The prompts run in chunks under
    ``memory_budget`` (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        edges: The circuit: a ``Circuit``, a ``[sender, receiver]`` bool mask, a table with
            ``sender`` and ``receiver`` columns, ``'a -> b'`` labels or pairs; ``None`` is the
            whole graph. With ``positions="each"``, read per position
            (:func:`~interp.analysis.circuits.circuit.position_edge_mask`: ``"a -> b @3"``
            labels, a table with a ``position`` column, a ``[sender, receiver, pos]`` mask; an
            edge without a position counts at every position).
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``.
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``
            (the replacement of ``ablation="patch"``).
        ablation: What replaces an activation (the output of a sender outside the circuit):
            ``'patch'`` (default: the corrupted run's), ``'zero'``, ``'mean'`` (over the
            batch) or ``'resample'`` (another sequence's, seeded).
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position; ``'each'`` (prompts of one length) makes an
            edge a sender -> receiver pair at one position, the stream position where the
            receiver reads the sender's output.
        cache: An ActivationCache of the clean ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches.
        seed: Every random draw (``ablation="resample"``, random circuits); the same seed
            gives the same numbers.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A one-row table: ``n_edges`` (edge-positions with ``positions="each"``),
        ``fraction_of_edges, metric, clean, corrupted, faithfulness``. ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (the ablation, metric), plus ``graph`` (its
        size) and ``chunks``. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for edges not in the graph, an unknown ablation, tokens
            that do not pair up, a metric that needs an LM head the model lacks,
            or a cache of other tokens.
    """
    task = check_circuit(model, tokens, corrupted_tokens, metric, ablation, seed, positions,
                         per_position=True)  # fmt: skip
    graph = task.graph
    if task.each:
        P = task.tokens.shape[1]
        valid = np.repeat(graph.valid[..., None], P, axis=-1)
        keep = valid.copy() if edges is None else position_edge_mask(graph, edges, P)
    else:
        valid = graph.valid
        keep = valid.copy() if edges is None else edge_mask(graph, edges)
    out = measure_circuits(
        task, [valid & ~keep], cache=cache, memory_budget=memory_budget, progress=progress,
        estimate=estimate, analysis="evaluate_circuit",
    )  # fmt: skip
    if isinstance(out, Estimate):
        return out
    values, clean, corrupted, chunks = out
    value = values[0]
    df = pd.DataFrame(
        [
            {
                "n_edges": int(keep.sum()),
                "fraction_of_edges": float(keep.sum() / valid.sum()),
                "metric": value,
                "clean": clean,
                "corrupted": corrupted,
                "faithfulness": faithfulness_of(value, clean, corrupted),
            }
        ]
    )
    df.attrs.update(_attrs(model, task, "evaluate_circuit", chunks))
    return df


def measure_circuits(
    task: EdgeTask, masks: Sequence[np.ndarray], *, cache: Any, memory_budget: int | None,
    progress: bool, estimate: bool, analysis: str,
) -> tuple[list[float], float, float, int] | Estimate:  # fmt: skip
    """The metric with each mask's edges carrying the replacement, and the clean and
    corrupted metrics, over every prompt, a chunk at a time (:func:`circuit_task` on the
    runner, :mod:`interp.engine.runner`): ``(values, clean, corrupted, chunks)``; with
    ``estimate``, the :class:`~interp.engine.chunks.Estimate`. Its passes are added to
    ``task.cost``.

    Raises:
        InterpError: when the clean and corrupted runs agree.
    """
    with eval_no_grad(task.rt.model):  # every pass in eval mode without gradients, once
        out = runner.run(
            task.rt.model, tuple(task.tokens.shape),
            circuit_task(task, masks, cache=cache, analysis=analysis),
            memory_budget=memory_budget, estimate=estimate, progress=progress,
        )  # fmt: skip
    if isinstance(out, Estimate):
        return out
    task.cost.add(out.forward_equivalents)
    base, worst = float(out.values["clean"]), float(out.values["corrupted"])
    check_span(base, worst, "faithfulness", model_dtype(task.rt.model))
    return list(out.values["values"]), base, worst, out.chunks


def circuit_task(
    task: EdgeTask, masks: Sequence[np.ndarray], *, cache: Any, analysis: str,
    work: Callable[[list[slice]], float] | None = None,
) -> runner.Task:  # fmt: skip
    """The runner's task of :func:`measure_circuits`: each chunk's clean and corrupted
    metrics and each mask's. ``work``: its counted forward-equivalents (default: the clean
    metric, the corrupted one, each mask's pass, and with several chunks the mean or
    resample ablation's replacement outputs)."""

    def chunk(c: runner.Chunk) -> dict[str, Any]:
        prep = begin_chunk(task, c, base_pass="metric")
        corrupted = corrupted_metric(prep, check=not c.split)
        values = evaluate_masks(prep, masks, progress=c.progress, desc=analysis)
        return {
            "values": np.asarray(values, dtype=float), "clean": prep.base_value,
            "corrupted": corrupted, "cost": prep.cost.total,
        }  # fmt: skip

    def counted(chunks: list[slice]) -> float:
        # the clean metric, the corrupted one (its pass, or a circuit of every edge), the circuits
        extra = task.ablation in ("mean", "resample") and len(chunks) > 1  # a plain pass
        return pass_work(task, 2 + len(masks)) + extra

    return runner.Task(
        analysis, edge_footprint(task, "circuit", copies=len(masks)),
        work=counted if work is None else work, chunk=chunk,
        combine={"values": "mean", "clean": "mean", "corrupted": "mean"}, metric=task.metric,
        prepare=lambda chunks: prepare_chunks(task, chunks, cache=cache),
        fix="use shorter prompts", desc=analysis, inputs=(edge_inputs(task), masks),
    )  # fmt: skip


def _attrs(model: HookedModel, task: EdgeTask, analysis: str, chunks: int) -> dict[str, Any]:
    return table_attrs(
        analysis,
        description="the metric with only a circuit's edges kept: every other edge carries the "
        "replacement, per receiver",
        method="exact",
        ablation=task.ablation,
        direction="noising",
        metric=task.metric,
        model=model,
        positions="each" if task.each else positions_label(task.positions),
        seed=task.seed if task.ablation == "resample" else None,
        forward_equivalents=task.cost.forward_equivalents,
        engine="edges",
        graph=task.graph.describe(),
        chunks=chunks,
    )


def _sizes(n_edges: int, points: int) -> list[int]:
    """``points`` circuit sizes from 1 to every edge, spaced geometrically."""
    grid = np.unique(np.round(np.geomspace(1, n_edges, points)).astype(int))
    return [int(x) for x in grid]


def circuit_curve(
    model: HookedModel,
    tokens: Tokens,
    *,
    scores: Any,
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any],
    corrupted_tokens: Tokens | None = None,
    sizes: Sequence[int] | None = None,
    points: int = 20,
    random_draws: int = 0,
    ablation: Ablation = "patch",
    seed: int = 0,
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Faithfulness of the top-``n`` edges by ``|score|`` for each size ``n`` (module docstring).

    Each circuit's faithfulness is :func:`evaluate_circuit`'s, exactly; circuits are
    evaluated several to a pass beside baselines run once, the prompts in chunks under
    ``memory_budget`` (:mod:`interp.engine.chunks`). Random circuits of the same sizes
    (``random_draws``) give the baseline a ranking must beat.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        scores: Edge scores: an :func:`interp.analysis.attribute_edges` table or a
            ``[sender, receiver]`` array (NaN: not ranked); circuits are the top-``n`` edges
            by ``|score|``.
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``.
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``
            (the replacement of ``ablation="patch"``).
        sizes: The circuit sizes (numbers of edges, at most the edges ``scores`` rank);
            ``None`` is ``points`` sizes from 1 to every ranked edge, spaced geometrically.
        points: How many sizes when ``sizes`` is ``None`` (default 20; at least 2, at most
            one per edge).
        random_draws: How many random circuits (seeded) of each size to add as a baseline
            (default 0).
        ablation: What replaces an activation (the output of a sender outside the circuit):
            ``'patch'`` (default: the corrupted run's), ``'zero'``, ``'mean'`` (over the
            batch) or ``'resample'`` (another sequence's, seeded).
        seed: Every random draw (``ablation="resample"``, random circuits); the same seed
            gives the same numbers.
        cache: An ActivationCache of the clean ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per circuit: ``kind`` (``top`` or ``random``), ``draw``,
        ``n_edges``, ``fraction_of_edges``, ``metric``, ``faithfulness``. ``attrs`` as
        :func:`evaluate_circuit`'s. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: as :func:`evaluate_circuit`, for sizes out of range, or
            scores of another graph.
    """
    task = check_circuit(model, tokens, corrupted_tokens, metric, ablation, seed)
    graph = task.graph
    sc = score_matrix(graph, scores)
    scored = int((~np.isnan(sc)).sum())
    points = check_int(points, "points", minimum=2)
    if points > graph.n_edges:
        raise InterpError(
            f"points={points:,} is more sizes than the graph has edges ({graph.n_edges:,}); "
            "a curve has at most one point per circuit size"
        )
    draws = check_int(random_draws, "random_draws", minimum=0)
    if sizes is None:
        sizes = _sizes(scored, points)
    sizes = [check_int(n, "each size", minimum=0) for n in sizes]
    if not sizes:
        raise InterpError("sizes is empty; pass circuit sizes (numbers of edges), or None")
    if any(n > scored for n in sizes):
        raise InterpError(
            f"a size exceeds the {scored:,} edges the scores rank (of the graph's "
            f"{graph.n_edges:,}); the top-n circuit of a larger n is not defined by them"
        )
    check_work(
        len(sizes) * (1 + draws) + 3,
        what=f"a curve of {len(sizes) * (1 + draws):,} circuits",
        fix="use fewer points or random_draws",
    )
    rows, masks = [], []
    rng = np.random.default_rng(check_seed(seed))
    valid_idx = np.flatnonzero(graph.valid)
    for n in sizes:
        top = top_edges(sc, n)
        rows.append({"kind": "top", "draw": 0, "n_edges": int(top.sum())})
        masks.append(graph.valid & ~top)
        for d in range(draws):
            pick = np.zeros(graph.valid.size, dtype=bool)
            pick[rng.choice(valid_idx, size=n, replace=False)] = True
            rows.append({"kind": "random", "draw": d, "n_edges": n})
            masks.append(graph.valid & ~pick.reshape(graph.valid.shape))
    out = measure_circuits(
        task, masks, cache=cache, memory_budget=memory_budget, progress=progress,
        estimate=estimate, analysis="circuit_curve",
    )  # fmt: skip
    if isinstance(out, Estimate):
        return out
    values, clean, corrupted, chunks = out
    df = pd.DataFrame(rows)
    df["fraction_of_edges"] = df["n_edges"] / graph.n_edges
    df["metric"] = values
    df["faithfulness"] = [faithfulness_of(v, clean, corrupted) for v in values]
    df.attrs.update(_attrs(model, task, "circuit_curve", chunks))
    df.attrs["seed"] = task.seed  # the random circuits' draws
    df.attrs.update(clean=clean, corrupted=corrupted, circuits=len(masks))
    return df

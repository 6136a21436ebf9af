"""Attribution for every edge: which writer-to-reader paths a metric depends on.

For an edge ``s -> r`` (:mod:`interp.analysis.circuits.circuit`), patching it
moves receiver ``r``'s input by ``alt_s - base_s`` (the sender's output in the
source run, or zero, or its mean over the batch, minus its output in the base
run) and leaves every other input alone. ``direction``
(:mod:`interp.engine.direction`): ``"noising"`` (the default, EAP's) edits the
clean run with the corrupted run's outputs; ``"denoising"`` the corrupted run
with the clean run's. The effect on the metric is estimated to first order
(edge attribution patching, EAP: Syed, Rager and Conmy 2023):

    score(s -> r) = sum over batch, positions, d_model of (alt_s - base_s) . dM/d(input_r)

from one source forward pass and one base forward and backward pass for every
edge at once. ``method="eap-ig"`` (Hanna et al. 2024, "EAP-IG-inputs")
averages the gradient over ``steps`` runs whose token embeddings are
interpolated from the source to the base prompt (``k / steps`` of the way,
``k = 1 .. steps``), which follows the metric through saturated softmaxes
better. ``method="exact"`` patches each listed edge alone, exactly (one
resumed pass each, packed by layer), so an estimate's error can be measured.

Gradients are taken with respect to each receiver's own input: each head's
query, key and value (per key/value head on grouped-query models, as the
model computes them) and each MLP's input, carried back from the model's own
``hook_q`` / ``hook_k`` / ``hook_v`` through its weights and norm, so the
forward pass is the model's own.

Example:
    >>> from interp.models import load_model
    >>> from interp.core.metrics import logit_diff_metric
    >>> model = load_model("induction-2l")
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])
    >>> corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]])
    >>> eap = attribute_edges(model, clean, corrupted_tokens=corrupted,
    ...                       metric=logit_diff_metric(8, 9))
    >>> eap.reindex(eap["estimate"].abs().sort_values().index)["label"].iloc[-1]
    'L1H1 -> logits'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from interp.analysis.circuits.circuit import wanted_edges
from interp.core.checks import check_finite, check_int
from interp.core.errors import InterpError
from interp.core.memory import check_table
from interp.core.metrics import Metric
from interp.core.protocol import HookedModel, eval_no_grad, positions_label
from interp.core.shapes import Tokens
from interp.engine import runner
from interp.engine.batching import check_work
from interp.engine.chunks import Estimate
from interp.engine.direction import Direction
from interp.engine.edges.cost import (
    edge_footprint,
    gradient_work,
    pass_shape,
    pass_work,
    patch_cost,
)
from interp.engine.edges.gradients import edge_estimates
from interp.engine.edges.graph import Graph
from interp.engine.edges.passes import patch_edges
from interp.engine.edges.task import (
    begin_chunk,
    check_edge_task,
    edge_inputs,
    prepare_chunks,
)
from interp.outputs.frames import described, table_attrs

Method = Literal["eap", "eap-ig", "exact"]
METHODS = ("eap", "eap-ig", "exact")


def attribute_edges(
    model: HookedModel,
    tokens: Tokens,
    *,
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any],
    corrupted_tokens: Tokens | None = None,
    method: Method = "eap",
    steps: int = 5,
    edges: Any = None,
    ablation: Literal["patch", "zero", "mean", "resample"] = "patch",
    direction: Direction = "noising",
    positions: Any = None,
    cache: Any = None,
    seed: int = 0,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """The effect on the metric of patching each edge alone: one row per edge.

    ``estimate`` (EAP, EAP-IG) or ``exact`` (module docstring): EAP scores every edge at
    once, ``score(s -> r) = sum (alt_s - base_s) . dM/d(input_r)``, from one source pass and
    one base forward and backward pass; EAP-IG averages that gradient over ``steps``
    interpolated embeddings; ``"exact"`` patches each edge alone (one resumed pass each).
    The prompts run in chunks under ``memory_budget`` (:mod:`interp.engine.chunks`; the
    scores of a metric that is a mean over prompts are the same as one batch's).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``; differentiable for the estimates.
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``;
            needed by ``ablation="patch"`` and by ``"eap-ig"``.
        method: How a number is computed: ``'eap'`` (default: first order, one backward
            pass), ``'eap-ig'`` (integrated gradients over ``steps``) or ``'exact'`` (a
            resumed pass per edge, equal to hooks).
        steps: EAP-IG's interpolation steps (``k / steps`` of the way, ``k = 1 .. steps``;
            default 5); at least 1.
        edges: The edges the table lists (any form
            :func:`interp.analysis.circuits.circuit.edge_mask` reads, or per position with
            ``positions="each"``); ``None`` is the whole graph (for ``"exact"``, one pass
            each).
        ablation: What replaces an activation (a sender's output): ``'patch'`` (default: the
            other run's, in ``direction``), ``'zero'``, ``'mean'`` (over the batch) or
            ``'resample'`` (another sequence's, seeded).
        direction: Which run a patch edits: ``'noising'`` (the default: the corrupted run's
            outputs into the clean run) or ``'denoising'`` (the clean run's into the
            corrupted run).
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position; ``'each'`` (prompts of one length) scores
            every edge at every position on its own: one row per edge and position, labels
            ``"a -> b @p"``, whose rows sum to the edge's score without positions.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.
        seed: Every random draw (``ablation="resample"``); the same seed gives the same
            numbers.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per edge of ``edges``: ``sender, receiver, receiver_input,
        label`` (and ``position`` with ``positions="each"``), then ``estimate`` or
        ``exact`` (the metric's change). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (the method, ablation, direction, metric),
        plus ``clean`` (the clean run's metric), ``steps``, ``graph`` and ``chunks``. With
        ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown method, ablation or direction, ``steps`` below 1,
            ``"eap-ig"`` without corrupted tokens, tokens that do not pair up, a
            metric that is not differentiable (estimates) or needs an LM head the
            model lacks, edges not in the graph, or a cache of other tokens.
    """
    if method not in METHODS:
        raise InterpError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    steps = check_int(steps, "steps", minimum=1)
    if method == "eap-ig" and ablation != "patch":
        raise InterpError(
            "eap-ig interpolates the token embeddings from the corrupted prompt to the clean "
            "one, so it needs ablation='patch' and corrupted_tokens"
        )
    task = check_edge_task(
        model, tokens, corrupted_tokens=corrupted_tokens, metric=metric, ablation=ablation,
        positions=positions, direction=direction, seed=seed, per_position=True,
    )  # fmt: skip
    graph = task.graph
    wanted = wanted_edges(graph, edges, task.tokens.shape[1] if task.each else None)
    if method == "exact":  # one edit a pass: each edge (at each position) alone
        where = np.nonzero(wanted)
        edits = [[idx] for idx in zip(*(w.tolist() for w in where))]

    def chunk(c: runner.Chunk) -> dict[str, Any]:
        # estimates take the base outputs from their own pass
        prep = begin_chunk(task, c, base_pass=method == "exact")
        if method == "exact":
            values = patch_edges(prep, edits, progress=c.progress, desc="exact edges")
            part = np.zeros(wanted.shape)
            part[where] = np.asarray(values) - prep.base_value
        else:
            part = edge_estimates(prep, method, steps).numpy()
        return {"scores": part, "clean": prep.clean_value, "cost": prep.cost.total}

    # the cost, refused before any pass (interp.engine.edges.cost): the passes that run, what
    # a chunk holds, the table
    replaced = int(ablation == "patch")  # the source run's pass
    if method == "exact":
        shape = pass_shape(task, edits)  # the blocks its passes resume at, the copies a pass
        forwards = patch_cost(task, edits) + pass_work(task, 1 + replaced)
        what = f"exact effects of {len(edits):,} edges" + (" at each position" if task.each else "")
        fix = "pass edges= (say the top few hundred by EAP-IG), or estimate them "
        fix += "(method='eap' or 'eap-ig')"
    else:  # a forward and a backward pass per step
        shape = {}
        forwards = pass_work(task, replaced) + gradient_work(task, 1 if method == "eap" else steps)
        what = f"{method} with {steps} steps" if method == "eap-ig" else "eap"
        fix = "use fewer steps (5 is EAP-IG's usual number)"
    footprint = edge_footprint(task, "patch" if method == "exact" else method, **shape)
    rows = int(wanted.sum())
    check_table(
        rows, task.tokens.device, what=f"a table of {rows:,} edge scores",
        memory_budget=memory_budget,
    )  # fmt: skip
    work = check_work(forwards, what=what, fix=fix)

    spec = runner.Task(
        "attribute_edges", footprint,
        # a split batch's mean or resample ablation: one more pass for the replacement outputs
        work=lambda chunks: work + (len(chunks) > 1 and ablation in ("mean", "resample")),
        chunk=chunk, combine={"scores": "mean", "clean": "mean"}, metric=task.metric,
        fix="use shorter prompts, or whole edges (positions=None)" if task.each
        else "use shorter prompts",
        desc="edges", inputs=(edge_inputs(task), method, steps, wanted),
        prepare=lambda chunks: prepare_chunks(task, chunks, cache=cache),
    )  # fmt: skip
    with eval_no_grad(model):  # every pass in eval mode, once (the gradients enable their own)
        out = runner.run(model, tuple(task.tokens.shape), spec, memory_budget=memory_budget,
                         estimate=estimate, progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    task.cost.add(out.forward_equivalents)
    scores = out.values["scores"]
    column = "exact" if method == "exact" else "estimate"
    df = _table(graph, wanted, scores, column)
    df.attrs.update(
        table_attrs(
            "attribute_edges",
            description="the effect on the metric of patching each edge alone "
            f"({task.direction}, {method})",
            method=method,
            ablation=ablation,
            direction=task.direction,
            metric=task.metric,
            model=model,
            positions="each" if task.each else positions_label(task.positions),
            seed=task.seed if ablation == "resample" else None,
            forward_equivalents=task.cost.forward_equivalents,
            engine="edges",
            steps=steps if method == "eap-ig" else None,
            clean=float(out.values["clean"]),
            graph=graph.describe(),
            chunks=out.chunks,
        )
    )
    return df


def _table(graph: Graph, wanted: np.ndarray, scores: np.ndarray, column: str) -> pd.DataFrame:
    """One row per edge of ``wanted`` (``[sender, receiver]``), or per edge and position
    (``[sender, receiver, pos]``: a ``position`` column and ``@p`` labels)."""
    where = np.nonzero(wanted)
    s, r = where[0], where[1]
    labels = [f"{graph.senders[i]} -> {graph.receivers[j]}" for i, j in zip(s, r)]
    columns: dict[str, Any] = {
        "sender": [graph.senders[i] for i in s],
        "receiver": [graph.receivers[j] for j in r],
        "receiver_input": [graph.receiver_input[j] for j in r],
    }
    if wanted.ndim == 3:
        columns["position"] = where[2]
        labels = [f"{lab} @{p}" for lab, p in zip(labels, where[2])]
    columns["label"] = labels
    columns[column] = scores[where]
    return pd.DataFrame(columns)


def score_matrix(graph: Graph, scores: Any) -> np.ndarray:
    """Scores as ``[sender, receiver]`` (NaN where no score): an :func:`attribute_edges`
    table (its ``estimate`` or ``exact`` column) or an array of that shape.

    Raises:
        InterpError: for a table without a score column or an array of another shape.
    """
    if isinstance(scores, pd.DataFrame):
        if "position" in scores.columns:
            raise InterpError(
                "these scores are per edge and position (positions='each'); curves and circuit "
                "searches rank whole edges: sum them first, e.g. "
                "df.groupby(['sender', 'receiver'], as_index=False)[column].sum()"
            )
        col = "exact" if "exact" in scores.columns else "estimate"
        if col not in scores.columns:
            raise InterpError("scores must be an attribute_edges table (estimate or exact column)")
        out = np.full(graph.valid.shape, np.nan)
        for a, b, v in zip(scores["sender"], scores["receiver"], scores[col]):
            s = graph.sender_index(a)
            for r in graph.receiver_indices(b):
                out[s, r] = v
        return out
    arr = np.asarray(scores.numpy() if hasattr(scores, "numpy") else scores, dtype=float)
    if arr.shape != graph.valid.shape:
        raise InterpError(f"scores have shape {arr.shape}; the graph's is {graph.valid.shape}")
    return np.where(graph.valid, arr, np.nan)


def _series(x: Any, name: str) -> pd.Series:
    """One score per edge, indexed by label: a Series, or an :func:`attribute_edges` table
    (its ``exact`` or ``estimate`` column).

    Raises:
        InterpError: for anything else, duplicate labels, or edges without a score (NaN).
    """
    if isinstance(x, pd.DataFrame):
        col = "exact" if "exact" in x.columns else "estimate"
        if col not in x.columns or "label" not in x.columns:
            raise InterpError(
                f"{name} is a table without a label and an exact or estimate column; pass an "
                "attribute_edges table or a Series of scores indexed by edge label"
            )
        x = x.set_index("label")[col]
    if not isinstance(x, pd.Series):
        raise InterpError(
            f"{name} must be a Series of scores indexed by edge label (or an attribute_edges "
            f"table), got {type(x).__name__}"
        )
    if x.index.has_duplicates:
        raise InterpError(f"{name} holds an edge twice ({x.index[x.index.duplicated()][0]!r})")
    values = pd.to_numeric(x, errors="coerce")
    missing = values.index[values.isna()]
    if len(missing):
        raise InterpError(
            f"{name} has no score for {len(missing)} edges (NaN or not a number, e.g. "
            f"{missing[0]!r}); compare only scored edges, e.g. {name}.dropna()"
        )
    return values.astype(float)


def edge_agreement(exact: pd.Series, estimated: pd.Series, *, threshold: float) -> pd.DataFrame:
    """How well an estimate finds the edges that matter: one row per measure.

    The edges that matter are those with ``|exact| > threshold``. Rows: ROC AUC of
    ``|estimate|`` for telling them apart from the rest (the probability that a random
    edge that matters outscores a random one that does not; ties count 1/2), Spearman
    correlation of estimate and exact, and how many of the ``m`` edges that matter are in
    the estimate's top ``m``. Reads no model.

    Args:
        exact: One exact effect per edge, indexed by label, or an :func:`attribute_edges`
            table of ``method="exact"`` (its ``exact`` column).
        estimated: One estimate per edge over the same edges, indexed by label, or an
            :func:`attribute_edges` table of an estimate (its ``estimate`` column).
        threshold: The ``|exact|`` above which an edge matters (a finite number; some edges
            must be on each side).

    Returns:
        A table with one row per measure: ``measure, value``; ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``threshold``.

    Example:
        >>> exact = pd.Series([5.0, 0.1, -3.0, 0.0], index=list("abcd"))
        >>> est = pd.Series([2.0, 0.5, -0.2, 0.3], index=exact.index)
        >>> edge_agreement(exact, est, threshold=1.0)["value"].round(3).tolist()
        [0.5, 1.0, 1.0]

    Raises:
        InterpError: for inputs that are not scores by edge label, scores missing (NaN),
            series over different edges, a threshold that is not a finite number, or no
            edge (or every edge) above the threshold.
    """
    exact, estimated = _series(exact, "exact"), _series(estimated, "estimated")
    threshold = check_finite(threshold, "threshold")
    if set(exact.index) != set(estimated.index):
        raise InterpError("exact and estimated must hold the same edges (index by label)")
    est = estimated.reindex(exact.index)
    matters = (exact.abs() > threshold).to_numpy()
    if matters.all() or not matters.any():
        raise InterpError(
            f"{int(matters.sum())} of {len(matters)} edges pass the threshold {threshold}; "
            "ROC AUC needs edges on both sides"
        )
    score = est.abs().to_numpy()
    pos, neg = score[matters], score[~matters]
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    auc = float(greater + 0.5 * ties)
    rho = float(exact.rank().corr(est.rank()))
    m = int(matters.sum())
    hits = len(set(exact.index[matters]) & set(est.abs().nlargest(m).index))
    rows = [
        {"measure": "ROC AUC (|estimate| finds the edges that matter)", "value": auc},
        {"measure": "Spearman (estimate vs exact)", "value": rho},
        {"measure": f"edges that matter ({m}) in the estimate's top {m}", "value": float(hits)},
    ]
    return described(
        pd.DataFrame(rows),
        "edge_agreement",
        description="how well an estimate finds the edges whose exact effect matters",
        method="exact",
        unit="",
        model=None,
        forward_equivalents=0.0,
        threshold=threshold,
    )

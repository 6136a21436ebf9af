"""The smallest circuit that reaches a faithfulness target, every candidate measured exactly.

Candidates are the top-``n`` edges by ``|score|`` (any scores: EAP, EAP-IG, exact),
pruned to edges connected to both the input and the logits
(:mod:`interp.analysis.circuits.pruning`); each is evaluated as
:func:`~interp.analysis.circuits.evaluation.evaluate_circuit` does, and ``n`` is
found by doubling, then bisection.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.core.metrics import logit_diff_metric
    >>> model = load_model("induction-2l")
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])
    >>> corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]])
    >>> m = logit_diff_metric(8, 9)
    >>> scores = attribute_edges(model, clean, corrupted_tokens=corrupted, metric=m)
    >>> circuit = find_circuit(model, clean, scores=scores, metric=m, corrupted_tokens=corrupted)
    >>> circuit.info["faithfulness"] >= 0.8
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from interp.analysis.circuits.circuit import Circuit
from interp.analysis.circuits.edge_attribution import attribute_edges, score_matrix  # noqa: F401
from interp.analysis.circuits.evaluation import (
    Ablation,
    begin_circuit,
    check_circuit,
    circuit_task,
    corrupted_metric,
    faithfulness_of,
    measure_circuits,
)
from interp.analysis.circuits.pruning import prune, top_edges
from interp.core.checks import check_finite, check_int
from interp.core.errors import InterpError
from interp.core.metrics import Metric
from interp.core.protocol import HookedModel, model_name
from interp.core.shapes import Tokens
from interp.engine import runner
from interp.engine.chunks import Estimate
from interp.engine.edges.passes import evaluate_masks


def find_circuit(
    model: HookedModel,
    tokens: Tokens,
    *,
    scores: Any,
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any],
    corrupted_tokens: Tokens | None = None,
    target: float = 0.8,
    bracket: tuple[int, int] | None = None,
    ablation: Ablation = "patch",
    cache: Any = None,
    seed: int = 0,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> Circuit | Estimate:
    """The smallest top-``n`` circuit whose exact faithfulness reaches ``target``.

    A top-``n`` circuit is the ``n`` edges of largest ``|score|``, pruned to the edges
    connected to both the input and the logits. ``n`` is found by doubling, then
    bisection, every candidate measured exactly (faithfulness need not grow with ``n``; the
    answer is the smallest ``n`` this search verified). When the prompts need several
    chunks under ``memory_budget`` (:mod:`interp.engine.chunks`), each candidate is
    measured over every chunk, its baselines run again.

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
        target: The faithfulness to reach, in (0, 1] (default 0.8).
        bracket: ``(lo, hi)``: start the bisection there instead of doubling, ``hi`` a size
            known to reach the target (say the first point of a
            :func:`~interp.analysis.circuits.evaluation.circuit_curve` that does, ``lo`` the
            one before), so a dip between doublings is not mistaken for the answer.
        ablation: What replaces an activation (the output of a sender outside the circuit):
            ``'patch'`` (default: the corrupted run's), ``'zero'``, ``'mean'`` (over the
            batch) or ``'resample'`` (another sequence's, seeded).
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
            It counts the most the search can measure: two candidates per doubling of ``n``.

    Returns:
        The :class:`~interp.analysis.circuits.circuit.Circuit`; its ``info`` records its
        faithfulness, size, fraction of all edges, the target, the evaluations, the
        forward-equivalents it ran and how scores were made (``circuit.save(path)`` writes
        it as JSON). With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: as :func:`~interp.analysis.circuits.evaluation.circuit_curve`, for a
            target outside (0, 1], or when even the whole graph does not reach it, or a
            ``bracket`` whose ``hi`` does not.
    """
    task = check_circuit(model, tokens, corrupted_tokens, metric, ablation, seed)
    target = check_finite(target, "target")
    if not 0 < target <= 1:
        raise InterpError(f"target must be in (0, 1], got {target}")
    graph = task.graph
    sc = score_matrix(graph, scores)
    lo, hi = 0, 1
    if bracket is not None:
        lo, hi = (check_int(n, "bracket", minimum=0) for n in bracket)
        if not lo < hi <= graph.n_edges:
            raise InterpError(f"bracket must be (lo, hi), 0 <= lo < hi <= {graph.n_edges}")
    evaluations = 2 * max(1, math.ceil(math.log2(max(2, graph.n_edges))))

    def work(chunks: list[slice]) -> float:
        # one batch: the two baselines once, a pass per candidate; in chunks a candidate
        # reruns the baselines on every chunk (and, for mean or resample, the replacement
        # outputs)
        split = len(chunks) > 1
        per = task.pass_work(3) + (1 if ablation != "patch" else 0) if split else task.pass_work()
        return (0 if split else task.pass_work(2)) + evaluations * per  # at most: the candidates

    # the chunks of measuring one candidate (circuit_task), counting the whole search
    spec = circuit_task(task, [], cache=cache, analysis="find_circuit", work=work)
    pl = runner.plan_task(model, tuple(task.tokens.shape), spec, memory_budget=memory_budget,
                          estimate=estimate, progress=progress)  # fmt: skip
    if estimate:
        return pl.estimate
    tried: dict[int, tuple[float, np.ndarray]] = {}
    if pl.split:
        clean = corrupted = math.nan

        def measure(mask: np.ndarray) -> float:
            nonlocal clean, corrupted
            (value,), clean, corrupted, _ = measure_circuits(
                task, [mask], cache=cache, memory_budget=memory_budget, progress=progress,
                estimate=False, analysis="find_circuit",
            )  # fmt: skip
            return faithfulness_of(value, clean, corrupted)
    else:
        prep = begin_circuit(task, cache)
        clean, corrupted = prep.base_value, corrupted_metric(prep)

        def measure(mask: np.ndarray) -> float:
            return faithfulness_of(evaluate_masks(prep, [mask])[0], clean, corrupted)

    def faith(n: int) -> float:
        if n not in tried:
            keep = prune(graph, top_edges(sc, n))
            tried[n] = (measure(graph.valid & ~keep), keep)
        return tried[n][0]

    if bracket is not None and faith(hi) < target:
        raise InterpError(
            f"the bracket's top-{hi} circuit reaches only {faith(hi):.3f}, below {target}"
        )
    while faith(hi) < target:
        if hi >= graph.n_edges:
            raise InterpError(
                f"no circuit reaches faithfulness {target}: every edge gives "
                f"{faith(graph.n_edges):.3f}"
            )
        lo, hi = hi, min(graph.n_edges, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if faith(mid) >= target:
            hi = mid
        else:
            lo = mid
    value, keep = tried[hi]
    info = {
        "model": model_name(model),
        "target": target,
        "top_n": hi,
        "n_edges": int(keep.sum()),
        "fraction_of_edges": float(keep.sum() / graph.n_edges),
        "faithfulness": value,
        "clean": clean,
        "corrupted": corrupted,
        "ablation": ablation,
        "metric": task.metric.name,
        "evaluations": {str(n): round(f, 6) for n, (f, _) in sorted(tried.items())},
        "forward_equivalents": task.cost.forward_equivalents,
        "scores": getattr(scores, "attrs", {}).get("method", "given"),
    }
    return Circuit(graph=graph, mask=keep, scores=sc, info=info)

"""Circuits measured exactly: faithfulness of a set of edges, curves, and the smallest circuit.

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
    >>> from interp.metrics import logit_diff_metric
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

from interp.analysis.circuits.circuit import Circuit, edge_mask, position_edge_mask
from interp.analysis.circuits.edge_attribution import score_matrix
from interp.analysis.frames import table_attrs
from interp.analysis.shapes import Tokens
from interp.checks import check_finite, check_int, check_seed
from interp.engine.batching import check_work
from interp.engine.direction import check_span
from interp.engine.edges import evaluate_masks
from interp.engine.tasks import EdgeTask, begin, check
from interp.errors import InterpError
from interp.metrics import Metric
from interp.protocol import HookedModel, model_name, positions_label

Ablation = Literal["patch", "zero", "mean", "resample"]


def _check(
    model: HookedModel, tokens: Any, corrupted_tokens: Any, metric: Any, ablation: str,
    seed: Any, positions: Any = None, each_for: str | None = None,
) -> EdgeTask:  # fmt: skip
    """The checked task of a circuit evaluation: the clean run is the base (edges outside a
    circuit carry the replacement)."""
    return check(
        model, tokens, corrupted_tokens=corrupted_tokens, metric=metric, ablation=ablation,
        positions=positions, seed=seed, each_for=each_for,
    )  # fmt: skip


def _begin(task: EdgeTask, cache: Any) -> EdgeTask:
    """The task's first passes; the base metric from a plain pass."""
    return begin(task, cache=cache, base_pass="metric")


def _corrupted(prep: EdgeTask) -> float:
    """The metric with every edge replaced (with a corrupted prompt: the corrupted run's,
    from the pass that gave its outputs; else one circuit pass), refused when it equals the
    clean metric."""
    if prep.source_value is not None:
        corrupted = prep.source_value
    else:
        corrupted = evaluate_masks(prep, [prep.graph.valid])[0]
    check_span(prep.base_value, corrupted, "faithfulness")
    return corrupted


def _faith(value: float, clean: float, corrupted: float) -> float:
    return (value - corrupted) / (clean - corrupted)  # _corrupted refused equal runs


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
) -> pd.DataFrame:
    """The metric with only ``edges`` kept (module docstring): one row with ``n_edges,
    fraction_of_edges, metric, clean, corrupted, faithfulness``.

    ``edges``: a :class:`~interp.analysis.circuits.circuit.Circuit`, a mask, a table
    with ``sender`` and ``receiver`` columns, ``"a -> b"`` labels or pairs;
    ``None`` means the whole graph. With ``positions="each"`` (prompts of one
    length) an edge is a sender -> receiver pair *at one position*, the
    stream position where the receiver reads the sender's output: ``edges`` is
    then read by :func:`~interp.analysis.circuits.circuit.position_edge_mask` (``"a -> b
    @3"`` labels, a table with a ``position`` column, a ``[sender, receiver,
    pos]`` mask; an edge without a position counts at every position), and
    ``n_edges`` counts edge-positions. Costs the two baselines (a plain clean
    forward; the corrupted run, which also records the senders' outputs) and one
    pass for the circuit; :func:`circuit_curve` shares the baselines and packs
    several circuits into each pass.

    Raises:
        InterpError: for edges not in the graph, an unknown ablation, tokens
            that do not pair up, a metric that needs an LM head the model lacks,
            or a cache of other tokens.
    """
    task = _check(model, tokens, corrupted_tokens, metric, ablation, seed, positions,
                  "evaluate_circuit")  # fmt: skip
    graph = task.graph
    if task.each:
        P = task.tokens.shape[1]
        valid = np.repeat(graph.valid[..., None], P, axis=-1)
        keep = valid.copy() if edges is None else position_edge_mask(graph, edges, P)
    else:
        valid = graph.valid
        keep = valid.copy() if edges is None else edge_mask(graph, edges)
    prep = _begin(task, cache)
    corrupted = _corrupted(prep)  # refuses runs that agree, before the circuit's pass
    value = evaluate_masks(prep, [valid & ~keep])[0]
    df = pd.DataFrame(
        [
            {
                "n_edges": int(keep.sum()),
                "fraction_of_edges": float(keep.sum() / valid.sum()),
                "metric": value,
                "clean": prep.base_value,
                "corrupted": corrupted,
                "faithfulness": _faith(value, prep.base_value, corrupted),
            }
        ]
    )
    df.attrs.update(_attrs(model, prep, "evaluate_circuit"))
    return df


def _attrs(model: HookedModel, prep: EdgeTask, analysis: str) -> dict[str, Any]:
    return table_attrs(
        analysis,
        description="the metric with only a circuit's edges kept: every other edge carries the "
        "replacement, per receiver",
        method="exact",
        ablation=prep.ablation,
        direction="noising",
        metric=prep.metric,
        model=model,
        positions="each" if prep.each else positions_label(prep.positions),
        seed=prep.seed if prep.ablation == "resample" else None,
        forward_equivalents=prep.cost.forward_equivalents,
        engine="edges",
        graph=prep.graph.describe(),
    )


def top_edges(scores: np.ndarray, n: int) -> np.ndarray:
    """The mask of the ``n`` edges with the largest ``|score|`` (NaN scores never chosen)."""
    flat = np.where(np.isnan(scores), -np.inf, np.abs(scores)).ravel()
    mask = np.zeros(flat.shape, dtype=bool)
    if n > 0:
        mask[np.argsort(-flat, kind="stable")[:n]] = True
    return mask.reshape(scores.shape) & ~np.isnan(scores)


def prune(graph: Any, mask: np.ndarray) -> np.ndarray:
    """``mask`` without edges that cannot carry information from the input to the logits:
    an edge stays when its sender is reached from the embeddings and its receiver's
    component reaches the logits, both through edges of the circuit."""
    comp_of_r = []  # the sender index of each receiver's component (-1 for the logits)
    for name, inp in zip(graph.receivers, graph.receiver_input):
        if inp == "logits":
            comp_of_r.append(-1)
        elif inp == "mlp":
            comp_of_r.append(graph.senders.index(name))  # "L3.mlp" reads and writes
        else:
            base = name.rsplit(".", 1)[0]
            comp_of_r.append(graph.senders.index(base) if base in graph.senders else -2)
    heads_of_kv: dict[int, list[int]] = {}
    for j, (inp, name) in enumerate(zip(graph.receiver_input, graph.receivers)):
        if inp in ("k", "v") and graph.grouped:  # a key/value head feeds its query heads
            l, g = name.split("KV")
            g = int(g.split(".")[0])
            group = graph.n_heads // graph.n_kv_heads
            heads_of_kv[j] = [
                graph.senders.index(f"{l}H{h}") for h in range(g * group, (g + 1) * group)
            ]
    S = len(graph.senders)
    reached = np.zeros(S, dtype=bool)
    reached[[i for i, k in enumerate(graph.sender_kind) if k in ("embed", "pos_embed")]] = True
    useful = np.zeros(S, dtype=bool)
    for _ in range(2 * graph.n_layers + 2):  # forward and backward sweeps until stable
        before = (reached.copy(), useful.copy())
        for s, r in zip(*np.nonzero(mask)):
            targets = heads_of_kv.get(r, [comp_of_r[r]])
            if reached[s]:
                for c in targets:
                    if c >= 0:
                        reached[c] = True
            if any(c == -1 or (c >= 0 and useful[c]) for c in targets):
                useful[s] = True
        if np.array_equal(before[0], reached) and np.array_equal(before[1], useful):
            break
    out = mask.copy()
    for s, r in zip(*np.nonzero(mask)):
        targets = heads_of_kv.get(r, [comp_of_r[r]])
        if not (reached[s] and any(c == -1 or (c >= 0 and useful[c]) for c in targets)):
            out[s, r] = False
    return out


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
    progress: bool = False,
) -> pd.DataFrame:
    """Faithfulness of the top-``n`` edges by ``|score|`` for each size ``n`` (module docstring).

    ``scores``: an :func:`interp.analysis.attribute_edges` table or a
    ``[sender, receiver]`` array. ``sizes`` default to ``points`` sizes from 1
    to every edge, spaced geometrically. ``random_draws`` adds that many
    random circuits of each size (seeded) as a baseline; ``cache`` (of the
    clean tokens) is checked against them. Rows: ``kind``
    (``top`` or ``random``), ``draw``, ``n_edges``, ``fraction_of_edges``,
    ``metric``, ``faithfulness``. Circuits are evaluated several to a pass.

    Raises:
        InterpError: as :func:`evaluate_circuit`, for sizes out of range, or
            scores of another graph.
    """
    task = _check(model, tokens, corrupted_tokens, metric, ablation, seed)
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
    prep = _begin(task, cache)
    corrupted = _corrupted(prep)  # refuses runs that agree, before the curve
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
    values = evaluate_masks(prep, masks, progress=progress, desc="faithfulness curve")
    df = pd.DataFrame(rows)
    df["fraction_of_edges"] = df["n_edges"] / graph.n_edges
    df["metric"] = values
    df["faithfulness"] = [_faith(v, prep.base_value, corrupted) for v in values]
    df.attrs.update(_attrs(model, prep, "circuit_curve"))
    df.attrs["seed"] = prep.seed  # the random circuits' draws
    df.attrs.update(clean=prep.base_value, corrupted=corrupted, circuits=len(masks))
    return df


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
    progress: bool = False,
) -> Circuit:
    """The smallest top-``n`` circuit (by ``|score|``, then pruned to edges connected to both
    the input and the logits) whose exact faithfulness reaches ``target``.

    ``n`` is found by doubling, then bisection, every candidate measured
    exactly (faithfulness need not grow with ``n``; the answer is the smallest
    ``n`` this search verified). ``bracket=(lo, hi)`` starts the bisection
    there instead, ``hi`` a size known to reach the target (say the first
    point of a :func:`circuit_curve` that does, ``lo`` the one before), so a
    dip in faithfulness between doublings is not mistaken for the answer.
    ``cache`` (of the clean tokens) is checked.
    The :class:`Circuit`'s ``info`` records its faithfulness, size, fraction
    of all edges, the target, the evaluations and how scores were made;
    ``circuit.save(path)`` writes it as JSON.

    Raises:
        InterpError: as :func:`circuit_curve`, for a target outside (0, 1], or
            when even the whole graph does not reach it, or a ``bracket`` whose
            ``hi`` does not.
    """
    task = _check(model, tokens, corrupted_tokens, metric, ablation, seed)
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
    prep = _begin(task, cache)
    corrupted = _corrupted(prep)
    tried: dict[int, tuple[float, np.ndarray]] = {}

    def faith(n: int) -> float:
        if n not in tried:
            keep = prune(graph, top_edges(sc, n))
            value = evaluate_masks(prep, [graph.valid & ~keep])[0]
            tried[n] = (_faith(value, prep.base_value, corrupted), keep)
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
        "clean": prep.base_value,
        "corrupted": corrupted,
        "ablation": ablation,
        "metric": prep.metric.name,
        "evaluations": {str(n): round(f, 6) for n, (f, _) in sorted(tried.items())},
        "scores": getattr(scores, "attrs", {}).get("method", "given"),
    }
    return Circuit(graph=graph, mask=keep, scores=sc, info=info)

"""The circuits lab: which edges carry a task, found by estimates and decided exactly.

On the shipped induction model (default) the task is the repeated-token
task: BOS, a random segment, the segment again; the corrupted twin replaces
the first copy, so the second cannot be predicted; the metric is the loss on
the repeated half (nats). The graph is small enough to patch every edge
exactly, so the exact effects are the ground truth for the estimates. With
``model="smollm2-135m"`` (or another model with a tokenizer) the task is
indirect-object identification (:func:`interp.datasets.name_mover_prompts`,
logit difference IO - S), the graph has about 70,000 edges, and the exact
effects are computed for the top edges of the best estimate.

1. The graph and its size (:func:`interp.analysis.build_graph`).
2. Every edge scored by EAP and EAP-IG (5 steps), and exactly (all edges, or
   the top ones): ROC AUC of each estimate against the edges whose exact
   effect exceeds 5% of the clean - corrupted difference, Spearman, top-k.
3. Faithfulness curves: the top-n edges by each estimate, exactly evaluated,
   against random circuits of the same sizes.
4. The smallest circuit reaching 80% faithfulness (pruned to edges connected
   to both the input and the logits), verified, and measured on held-out
   prompts; drawn as a layered graph.
5. Path patching into the circuit's receiving heads from every earlier sender.

Example (on a random model: the numbers mean nothing; the lab runs real models):
    >>> from interp.models.hf import random_gpt2
    >>> prompts = circuit_task(random_gpt2(2, vocab=30), n=4, seed=0)
    >>> prompts.name, prompts.clean.shape == prompts.corrupted.shape
    ('name movers', True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.circuits.circuit import Circuit
from interp.analysis.circuits.edge_attribution import attribute_edges, edge_agreement
from interp.analysis.circuits.evaluation import circuit_curve, evaluate_circuit
from interp.analysis.circuits.paths import path_patch
from interp.analysis.circuits.prompts import CircuitPrompts, circuit_task
from interp.analysis.circuits.search import find_circuit
from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, ModelSource
from interp.engine.edges.graph import build_graph
from interp.experiments.common import load, progress_bar

NAME = "circuits"
TITLE = "Circuits: which edges carry the task, found by estimates and decided exactly"
EXACT_ALL = 2000  # graphs up to this many edges are patched edge by edge, all of them
EXACT_TOP = 200  # otherwise the top edges of EAP-IG
MATTERS = 0.05  # an edge matters when its exact effect exceeds this share of the difference
TARGET = 0.8
# Edge effects and path patching: the corrupted run's activations into the clean run.
DIRECTION = "noising"


@dataclasses.dataclass(frozen=True)
class CircuitFindings:
    """Everything the circuits lab computes and its report shows."""

    model_name: str
    n_layers: int
    seed: int
    task: str
    task_description: str
    graph: str
    n_edges: int
    clean: float
    corrupted: float
    unit: str
    scores: pd.DataFrame  # one row per edge: eap, eap_ig, exact (NaN where not computed)
    exact_scope: str
    agreement: pd.DataFrame
    curves: pd.DataFrame
    circuit: pd.DataFrame  # the found circuit's edges
    circuit_info: dict[str, Any]
    held_out: pd.DataFrame
    paths: pd.DataFrame  # path patching into the circuit's receivers


def analyse(
    model: ModelSource = "induction-2l", *, n: int = 16, seed: int = 0, progress: bool = False
) -> CircuitFindings:
    """Run the lab (module docstring) on ``n`` prompt pairs.

    Raises:
        InterpError: for a model whose circuits cannot be evaluated exactly, or a
            task the model does not do (clean and corrupted metrics equal).
    """
    seed, n = check_seed(seed), check_int(n, "n", minimum=2)
    model, name = load(model)
    graph = build_graph(model)
    prompts = circuit_task(model, n=n, seed=seed)
    bar = progress_bar(7, progress, "circuits lab")
    kw = dict(corrupted_tokens=prompts.corrupted, metric=prompts.metric)
    eap = attribute_edges(model, prompts.clean, direction=DIRECTION, **kw)
    bar.update()
    ig = attribute_edges(model, prompts.clean, method="eap-ig", steps=5, direction=DIRECTION, **kw)
    bar.update()
    scores = eap.rename(columns={"estimate": "eap"})
    scores["eap_ig"] = ig["estimate"].to_numpy()
    if graph.n_edges <= EXACT_ALL:
        exact = attribute_edges(
            model, prompts.clean, method="exact", direction=DIRECTION, progress=progress, **kw
        )
        scope = f"every edge ({graph.n_edges})"
    else:
        top = scores.reindex(scores["eap_ig"].abs().sort_values(ascending=False).index)
        picked = top.head(EXACT_TOP)["label"].tolist()
        exact = attribute_edges(
            model, prompts.clean, method="exact", edges=picked, direction=DIRECTION,
            progress=progress, **kw,
        )  # fmt: skip
        scope = f"the top {EXACT_TOP} edges by |EAP-IG| of {graph.n_edges:,}"
    scores = scores.merge(exact[["label", "exact"]], on="label", how="left")
    clean = float(eap.attrs["clean"])
    whole = evaluate_circuit(model, prompts.clean, edges=None, **kw)
    corrupted = float(whole["corrupted"].iloc[0])
    if clean == corrupted:
        raise InterpError(f"{name} gives the same metric on clean and corrupted prompts")
    bar.update()
    agreement = _agreement(scores, abs(clean - corrupted))
    bar.update()
    sizes = _curve_sizes(graph.n_edges)
    curves = []
    for method in ("eap", "eap_ig"):
        c = circuit_curve(
            model, prompts.clean, scores=_matrix(scores, method), sizes=sizes,
            random_draws=3 if method == "eap" else 0, seed=seed, **kw,
        )  # fmt: skip
        c.loc[c["kind"] == "top", "kind"] = method.replace("_", "-")
        curves.append(c if method == "eap" else c[c["kind"] != "random"])
    curve = pd.concat(curves, ignore_index=True)
    bar.update()
    ranking = "exact" if graph.n_edges <= EXACT_ALL else "eap_ig"
    circuit = find_circuit(
        model, prompts.clean, scores=_matrix(scores, ranking), target=TARGET,
        bracket=_bracket(curve, ranking), **kw,
    )  # fmt: skip
    info = {**circuit.info, "ranked_by": ranking.replace("_", "-")}
    held = evaluate_circuit(
        model, prompts.held_clean, corrupted_tokens=prompts.held_corrupted,
        metric=prompts.held_metric, edges=circuit,
    )  # fmt: skip
    bar.update()
    paths = _paths(model, prompts, circuit)
    bar.update()
    bar.close()
    return CircuitFindings(
        model_name=name,
        n_layers=graph.n_layers,
        seed=seed,
        task=prompts.name,
        task_description=prompts.description,
        graph=graph.describe(),
        n_edges=graph.n_edges,
        clean=clean,
        corrupted=corrupted,
        unit=prompts.metric.unit,
        scores=scores,
        exact_scope=scope,
        agreement=agreement,
        curves=curve,
        circuit=circuit.edges(),
        circuit_info=info,
        held_out=held,
        paths=paths,
    )


def _matrix(scores: pd.DataFrame, column: str) -> pd.DataFrame:
    """An ``attribute_edges``-shaped table of one score column (NaN edges never chosen)."""
    out = scores[["sender", "receiver", "receiver_input", "label"]].copy()
    out["estimate"] = scores[column].to_numpy()
    out.attrs["method"] = column.replace("_", "-")
    return out


def _bracket(curve: pd.DataFrame, ranking: str) -> tuple[int, int] | None:
    """The curve's first size reaching the target and the size before it (for the ranking's
    own curve; None when there is none)."""
    c = curve[curve["kind"] == ranking.replace("_", "-")].sort_values("n_edges")
    if c.empty:
        return None
    sizes, faith = c["n_edges"].tolist(), c["faithfulness"].tolist()
    for i, f in enumerate(faith):
        if f >= TARGET:
            return (sizes[i - 1] if i else 0), sizes[i]
    return None


def _curve_sizes(n_edges: int) -> list[int]:
    grid = np.unique(np.round(np.geomspace(1, n_edges, 14 if n_edges < 100 else 20)).astype(int))
    return [int(x) for x in grid]


def _agreement(scores: pd.DataFrame, span: float) -> pd.DataFrame:
    """Each estimate against the exact effects, over the edges that have one."""
    have = scores.dropna(subset="exact").set_index("label")
    rows = []
    for method in ("eap", "eap_ig"):
        try:
            table = edge_agreement(have["exact"], have[method], threshold=MATTERS * span)
        except InterpError as exc:  # every edge above (or none above) the threshold
            table = pd.DataFrame([{"measure": str(exc), "value": float("nan")}])
        table.insert(0, "estimator", method.replace("_", "-"))
        rows.append(table)
    out = pd.concat(rows, ignore_index=True)
    out.attrs["threshold"] = MATTERS * span
    return out


def _paths(model: HookedModel, prompts: CircuitPrompts, circuit: Circuit) -> pd.DataFrame:
    """Path patching from every earlier sender into each of the circuit's receiving heads'
    inputs (the heads it reads into; at most 4, the most connected)."""
    edges = circuit.edges()
    heads = edges[edges["receiver_input"].isin(["q", "k", "v"])]
    if heads.empty:
        return pd.DataFrame(columns=["sender", "receiver", "normalized"])
    counts = heads.groupby("receiver").size().sort_values(ascending=False)
    rows = []
    for receiver in counts.index[:4]:
        df = path_patch(
            model, prompts.clean, corrupted_tokens=prompts.corrupted, metric=prompts.metric,
            direction=DIRECTION, receivers=[receiver],
        )  # fmt: skip
        rows.append(df.assign(receiver=receiver)[["sender", "receiver", "patched", "normalized"]])
    out = pd.concat(rows, ignore_index=True)
    # One path_patch call per receiver: the same direction, metric and model; their work adds.
    out.attrs.update(rows[0].attrs)
    out.attrs["receivers"] = [str(r) for r in counts.index[:4]]
    out.attrs["forward_equivalents"] = round(
        sum(float(r.attrs["forward_equivalents"]) for r in rows), 3
    )
    return out


def tables(f: CircuitFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name."""
    info = pd.DataFrame([{k: v for k, v in f.circuit_info.items() if k != "evaluations"}])
    return {
        "edge_scores": f.scores,
        "agreement": f.agreement,
        "curves": f.curves,
        "circuit": f.circuit,
        "circuit_summary": info,
        "held_out": f.held_out,
        "path_patching": f.paths,
    }

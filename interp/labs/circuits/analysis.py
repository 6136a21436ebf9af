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

1. The graph and its size (:func:`interp.analysis.circuit_graph`).
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
    >>> task = circuit_task(random_gpt2(2, vocab=30), n=4, seed=0)
    >>> task.name, task.clean.shape == task.corrupted.shape
    ('name movers', True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.circuits.circuit import circuit_graph
from interp.analysis.circuits.edge_attribution import attribute_edges, edge_agreement
from interp.analysis.circuits.evaluation import circuit_curve, evaluate_circuit, find_circuit
from interp.analysis.circuits.paths import path_patch
from interp.analysis.circuits.task import Task, circuit_task
from interp.errors import InterpError
from interp.labs.common import load, progress_bar

NAME = "circuits"
TITLE = "Circuits: which edges carry the task, found by estimates and decided exactly"
EXACT_ALL = 2000  # graphs up to this many edges are patched edge by edge, all of them
EXACT_TOP = 200  # otherwise the top edges of EAP-IG
MATTERS = 0.05  # an edge matters when its exact effect exceeds this share of the difference
TARGET = 0.8


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
    model: Any = "induction-2l", *, n: int = 16, seed: int = 0, progress: bool = False
) -> CircuitFindings:
    """Run the lab (module docstring) on ``n`` prompt pairs.

    Raises:
        InterpError: for a model whose circuits cannot be evaluated exactly, or a
            task the model does not do (clean and corrupted metrics equal).
    """
    from interp.checks import check_int, check_seed

    seed, n = check_seed(seed), check_int(n, "n", minimum=2)
    model, name = load(model)
    graph = circuit_graph(model)
    task = circuit_task(model, n=n, seed=seed)
    bar = progress_bar(7, progress, "circuits lab")
    kw = dict(corrupted_tokens=task.corrupted, metric=task.metric)
    eap = attribute_edges(model, task.clean, **kw)
    bar.update()
    ig = attribute_edges(model, task.clean, method="eap-ig", steps=5, **kw)
    bar.update()
    scores = eap.rename(columns={"estimate": "eap"})
    scores["eap_ig"] = ig["estimate"].to_numpy()
    if graph.n_edges <= EXACT_ALL:
        exact = attribute_edges(model, task.clean, method="exact", progress=progress, **kw)
        scope = f"every edge ({graph.n_edges})"
    else:
        top = scores.reindex(scores["eap_ig"].abs().sort_values(ascending=False).index)
        picked = top.head(EXACT_TOP)["label"].tolist()
        exact = attribute_edges(
            model, task.clean, method="exact", edges=picked, progress=progress, **kw
        )
        scope = f"the top {EXACT_TOP} edges by |EAP-IG| of {graph.n_edges:,}"
    scores = scores.merge(exact[["label", "exact"]], on="label", how="left")
    clean = float(eap.attrs["clean"])
    whole = evaluate_circuit(model, task.clean, edges=None, **kw)
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
            model, task.clean, scores=_matrix(scores, method), sizes=sizes,
            random_draws=3 if method == "eap" else 0, seed=seed, **kw,
        )  # fmt: skip
        c.loc[c["kind"] == "top", "kind"] = method.replace("_", "-")
        curves.append(c if method == "eap" else c[c["kind"] != "random"])
    curve = pd.concat(curves, ignore_index=True)
    bar.update()
    ranking = "exact" if graph.n_edges <= EXACT_ALL else "eap_ig"
    circuit = find_circuit(
        model, task.clean, scores=_matrix(scores, ranking), target=TARGET,
        bracket=_bracket(curve, ranking), **kw,
    )  # fmt: skip
    info = {**circuit.info, "ranked_by": ranking.replace("_", "-")}
    held = evaluate_circuit(
        model, task.held_clean, corrupted_tokens=task.held_corrupted, metric=task.held_metric,
        edges=circuit,
    )  # fmt: skip
    bar.update()
    paths = _paths(model, task, circuit)
    bar.update()
    bar.close()
    return CircuitFindings(
        model_name=name,
        n_layers=graph.n_layers,
        seed=seed,
        task=task.name,
        task_description=task.description,
        graph=graph.describe(),
        n_edges=graph.n_edges,
        clean=clean,
        corrupted=corrupted,
        unit=task.metric.unit,
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


def _paths(model: Any, task: Task, circuit: Any) -> pd.DataFrame:
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
            model, task.clean, corrupted_tokens=task.corrupted, metric=task.metric,
            receivers=[receiver],
        )  # fmt: skip
        rows.append(df.assign(receiver=receiver)[["sender", "receiver", "patched", "normalized"]])
    return pd.concat(rows, ignore_index=True)


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


def figures(f: CircuitFindings) -> dict[str, Any]:
    """The circuit as a layered graph, faithfulness curves, estimates against exact effects,
    and path patching into the circuit's receivers."""
    from interp.figures import circuit_figure, heatmap, lines, scatter

    info = f.circuit_info
    out = {
        "circuit": circuit_figure(
            f.circuit.to_dict("records"),
            n_layers=f.n_layers,
            caption=f"The smallest top-n circuit (ranked by {info['ranked_by']}, pruned to "
            f"edges connected to the input and the logits) that keeps {info['faithfulness']:.2f}"
            f" of the clean - corrupted difference (target {info['target']}): "
            f"{info['n_edges']} of {f.n_edges:,} edges ({info['fraction_of_edges']:.2%}). "
            "Width is |score|. Faithfulness is measured with the corrupted prompts as the "
            "replacement; another ablation gives other numbers.",
        )
    }
    curves = f.curves
    series = {}
    xs = sorted(set(curves["n_edges"]))
    for kind in ("eap", "eap-ig"):
        c = curves[curves["kind"] == kind].set_index("n_edges")["faithfulness"]
        series[f"top n by |{kind.upper()}|"] = [float(c.get(x, np.nan)) for x in xs]
    rand = curves[curves["kind"] == "random"].groupby("n_edges")["faithfulness"].median()
    series["random circuits (median of 3)"] = [float(rand.get(x, np.nan)) for x in xs]
    at = {k: v[len(xs) // 2] for k, v in series.items()}
    out["faithfulness"] = lines(
        xs,
        series,
        xlabel="edges kept (log scale)",
        ylabel="faithfulness (1 = clean, 0 = corrupted)",
        markers=True,
        logx=True,
        caption=f"Faithfulness of the top-n edges by each estimate, every point measured "
        f"exactly, against random circuits of the same size. At {xs[len(xs) // 2]} edges: "
        + ", ".join(f"{k} {v:.2f}" for k, v in at.items())
        + ". Estimates rank edges; the exact evaluation decides.",
    )
    have = f.scores.dropna(subset="exact")
    out["estimate_vs_exact"] = scatter(
        have["exact"],
        have["eap_ig"],
        labels=have["label"].tolist(),
        xlabel=f"exact effect of corrupting the edge ({f.unit})",
        ylabel="EAP-IG estimate",
        caption=f"EAP-IG's estimate against the exact effect, for {f.exact_scope}. Points far "
        "from the diagonal are edges where the linear estimate misleads.",
    )
    if not f.paths.empty:
        pivot = f.paths.pivot_table(index="sender", columns="receiver", values="normalized")
        order = [s for s in f.scores["sender"].drop_duplicates() if s in pivot.index]
        pivot = pivot.reindex(order)
        out["path_patching"] = heatmap(
            pivot.to_numpy(),
            row_labels=list(pivot.index),
            col_labels=list(pivot.columns),
            xlabel="receiver (a head's input)",
            ylabel="sender",
            colorbar="share of the corruption's effect carried",
            cmap="RdBu_r",
            vmin=-1,
            vmax=1,
            annotate=pivot.size <= 64,
            caption="Path patching: each sender's corrupted output reaching only this receiver's "
            "input, as a share of the whole corruption's effect; everything downstream runs "
            "as usual. One path at a time: paths that matter only together look small.",
        )
    return out


CAUTIONS = [
    "Faithfulness depends on what replaces an edge: here the corrupted prompts' outputs. Zero "
    "or mean ablation (ablation='zero' / 'mean') gives other numbers (Miller et al. 2024).",
    "EAP and EAP-IG are first-order estimates: they rank edges cheaply; the exact evaluation of "
    "each circuit, and the exact edge effects beside them, are what decide.",
    "An edge that matters on these prompts is a claim about these prompts: the held-out "
    "faithfulness checks it on prompts the circuit was not found on.",
    "Edges from an input that is the same in the clean and corrupted prompts (the positional "
    "embedding, tokens the corruption leaves alone) carry nothing under patching, however "
    "much the model uses them: the corruption defines what a circuit has to explain.",
]


def report(f: CircuitFindings) -> Any:
    """The lab's HTML report."""
    from interp.render import Report
    from interp.tables import styled_html

    plots = figures(f)
    t = tables(f)
    info = f.circuit_info
    held = f.held_out.iloc[0]
    r = Report(TITLE)
    r.text(
        f"Model {f.model_name}: {f.graph}. Task: {f.task} ({f.task_description}). Clean metric "
        f"{f.clean:.3f}, every edge corrupted {f.corrupted:.3f} ({f.unit}). Seed {f.seed}."
    )
    r.cautions(CAUTIONS)
    r.heading("The circuit")
    r.figure(plots["circuit"], "circuit")
    r.text(
        f"{info['n_edges']} edges ({info['fraction_of_edges']:.2%} of the graph) keep "
        f"{info['faithfulness']:.3f} of the clean - corrupted difference on these prompts, "
        f"{float(held['faithfulness']):.3f} on held-out prompts; ranked by {info['ranked_by']}."
    )
    r.table(f.circuit)
    r.heading("Estimates against exact edge effects")
    r.figure(plots["estimate_vs_exact"], "estimate_vs_exact")
    r.text(
        f"Exact effects for {f.exact_scope}; an edge matters when its exact effect exceeds "
        f"{MATTERS:.0%} of the clean - corrupted difference ({f.agreement.attrs['threshold']:.3f})."
    )
    r.table(f.agreement)
    r.heading("Faithfulness curves")
    r.figure(plots["faithfulness"], "faithfulness")
    r.raw(styled_html(t["curves"], colour="faithfulness"))
    if "path_patching" in plots:
        r.heading("Path patching into the circuit's receivers")
        r.figure(plots["path_patching"], "path_patching")
    return r


def summary(f: CircuitFindings) -> list[str]:
    """Lines for the terminal."""
    info = f.circuit_info
    ag = f.agreement
    lines = [
        f"{f.model_name} ({f.task}): {f.graph}; clean {f.clean:.3f}, corrupted {f.corrupted:.3f}",
    ]
    for est in ("eap", "eap-ig"):
        a = ag[ag["estimator"] == est]["value"].tolist()
        lines.append(f"{est}: ROC AUC {a[0]:.3f}, Spearman {a[1]:.3f} ({f.exact_scope})")
    lines.append(
        f"circuit at {info['target']:.0%}: {info['n_edges']} edges "
        f"({info['fraction_of_edges']:.2%}), faithfulness {info['faithfulness']:.3f}, held-out "
        f"{float(f.held_out['faithfulness'].iloc[0]):.3f}: " + ", ".join(f.circuit["label"][:8])
    )
    return lines

"""The circuits lab's figures, HTML report and summary lines.

They lay out the findings of :mod:`.analysis` and compute nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.experiments.circuits.analysis import DIRECTION, MATTERS, TITLE, CircuitFindings, tables
from interp.outputs.figures import circuit_figure, heatmap, lines, scatter
from interp.outputs.render import Report
from interp.outputs.tables import styled_html


def figures(f: CircuitFindings) -> dict[str, Any]:
    """The circuit as a layered graph, faithfulness curves, estimates against exact effects,
    and path patching into the circuit's receivers."""
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


def report(f: CircuitFindings, plots: dict[str, Any] | None = None) -> Report:
    """The lab's HTML report (:class:`interp.outputs.render.Report`)."""
    plots = figures(f) if plots is None else plots  # the writer passes the ones it saves
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
        f" Direction: {DIRECTION}: an edge's effect is the metric of the clean run with that "
        "edge alone carrying the corrupted prompts' sender output, minus the clean metric."
    )
    r.table(f.agreement)
    r.heading("Faithfulness curves")
    r.figure(plots["faithfulness"], "faithfulness")
    r.raw(styled_html(t["curves"], colour="faithfulness"))
    if "path_patching" in plots:
        r.heading("Path patching into the circuit's receivers")
        r.text(
            f"Direction: {DIRECTION}: each sender's output from the corrupted run reaches only "
            "the receiver's input, in the clean run; normalized is the patched metric's change "
            "as a share of the corrupted - clean difference."
        )
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

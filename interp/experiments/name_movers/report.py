"""The name-mover lab's figures, HTML report and summary lines.

They lay out the findings of :mod:`.analysis` and compute nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.components.dla import head_grid
from interp.experiments.common import lens_figure
from interp.experiments.name_movers.analysis import (
    TITLE,
    NameMoverFindings,
    direct_verdicts,
    tables,
)
from interp.outputs.figures import bars, dla_heatmap, grouped_bars, heatmap, lines, scatter
from interp.outputs.render import Report
from interp.outputs.tables import styled_html

NAME_TARGETS = {
    "to_io": "the indirect object",
    "to_s1": "the subject's first occurrence",
    "to_s2": "the subject's second occurrence",
}


def attention_caption(name_attention: pd.DataFrame) -> str:
    """The name-attention figure's caption, stated from its own numbers: where each top head
    puts most of its final-position attention among IO, S1 and S2."""
    cols = list(NAME_TARGETS)
    groups: dict[str, list[str]] = {}
    for r in name_attention.itertuples():
        values = {c: float(getattr(r, c)) for c in cols}
        best = max(values, key=values.__getitem__)
        groups.setdefault(best, []).append(f"{r.label} {values[best]:.2f}")
    said = "; ".join(
        f"{NAME_TARGETS[c]}: {', '.join(heads)}" for c, heads in sorted(groups.items())
    )
    return (
        "Where the top heads look from the final position, averaged over prompts. Each head's "
        f"largest share goes to {said}. Looking is not moving: the patching says the output "
        "matters, the direct logit attribution what it writes."
    )


def figures(f: NameMoverFindings) -> dict[str, Any]:
    """Recovery per head (exact and estimate), estimate vs exact, name attention, ablations."""
    t = tables(f)["patching"]
    out = {}
    span = float(np.nanmax(np.abs(t["normalized"]))) or 1.0
    for col, what in (
        ("normalized", "exact patching"),
        ("estimate_normalized", "attribution estimate"),
    ):
        pivot = t.pivot(index="layer", columns="head", values=col)
        out[f"recovery_{'exact' if col == 'normalized' else 'estimate'}"] = heatmap(
            pivot.to_numpy(),
            row_labels=list(pivot.index),
            col_labels=list(pivot.columns),
            xlabel="head",
            ylabel="layer",
            colorbar="fraction of logit difference restored",
            cmap="RdBu_r",
            vmin=-span,
            vmax=span,
            caption=f"{what.capitalize()} ({f.direction}): each head's clean output patched into "
            "the corrupted run, as a fraction of the clean - corrupted logit difference it "
            "restores. One head at a time: heads that matter only together, or that compensate, "
            "are not visible here.",
        )
    out["estimate_vs_exact"] = scatter(
        t["normalized"],
        t["estimate_normalized"],
        labels=t["label"].tolist(),
        xlabel="exact (fraction restored)",
        ylabel="attribution estimate",
        caption="Attribution patching's first-order estimate against the exact patch, every head. "
        "Points far from the diagonal are heads where the linear estimate misleads.",
    )
    na = f.name_attention
    out["name_attention"] = grouped_bars(
        na["label"].tolist(),
        {
            "to the indirect object": na["to_io"],
            "to the subject (1st)": na["to_s1"],
            "to the subject (2nd)": na["to_s2"],
        },
        xlabel="top heads by exact patching",
        ylabel="attention from the final position",
        caption=attention_caption(na),
    )
    grid, mlp = head_grid(f.dla)
    top3 = direct_verdicts(f)
    named = "; ".join(f"{r.label} {r.dla:+.2f} (rank {r.dla_rank})" for r in top3.itertuples())
    out["dla_heads"] = dla_heatmap(
        grid,
        mlp,
        colorbar="direct share of logit[IO] - logit[S]",
        caption=f"Direct logit attribution of IO - S on the {len(f.prompts)} clean prompts: what "
        "each head (and each layer's MLP, right) writes straight into the answer, the final "
        f"norm's scale frozen (total {f.dla.attrs['total']:.2f}). The top heads by patching: "
        f"{named}. Direct only: a head that moves information for later heads writes little here.",
    )
    lf = f.lens_final
    last = lf.iloc[-1]
    above = (lf["io_above_s"] > 0.5).tolist()  # IO more likely than S in most prompts
    stays = [i for i in range(len(above)) if all(above[i:])]
    first_above = [lf["stage_name"].iloc[stays[0]]] if stays else []
    out["lens_final"] = lines(
        lf["stage"].tolist(),
        {"indirect object (answer)": lf["p_io"].tolist(), "subject": lf["p_s"].tolist()},
        xlabel="stage (0 = embeddings, l + 1 = after block l)",
        ylabel="probability at the final position",
        markers=True,
        caption="The logit lens at the final position, mean over the clean prompts: the "
        "probability of the answer (IO) and of the subject after each block. IO is ahead of "
        f"S in most prompts from {first_above[0] if first_above else 'no stage'} on and ends at "
        f"{last['p_io']:.2f} against {last['p_s']:.2f}. Readable is not used: patching and "
        "ablation test that.",
    )
    out["lens_example"] = lens_figure(
        f.lens_example,
        caption="The logit lens on prompt 0: each cell is the top prediction after a block at "
        "that position, with its probability; colour is the indirect object's rank there (the "
        "answer at the last position).",
    )
    abl = f.group_ablation
    top = abl[abl["kind"] == "top"]["effect"].tolist()
    rand = abl[abl["kind"] == "random"]["effect"].tolist()
    k = len(f.top_heads)
    out["group_ablation"] = bars(
        [f"top {k}", f"random {k} (median)"],
        [top[0], float(np.median(rand))],
        points={f"random {k} (median)": rand},
        highlight=[f"top {k}"],
        xlabel="heads mean-ablated together (clean prompts)",
        ylabel="change of logit difference IO - S",
        caption="Mean-ablating the top heads together against random sets of as many heads "
        "(dots: each draw). Other heads can compensate, so the drop can be smaller than the "
        "single-head patching suggests.",
    )
    return out


CAUTIONS = [
    "The prompts come from a few templates and 30 names; numbers are about these prompts and "
    "this model. Held-out templates are checked for the task, not re-analysed.",
    "Patching one head at a time measures what that head's output alone restores; heads that "
    "act together (or back each other up) can each look small.",
    "Attribution patching is a first-order estimate: it ranks heads cheaply, and can miss heads "
    "whose effect passes through another head's attention. Its rows are marked as estimates; "
    "the exact table is beside it.",
    "Attention to a name is a hypothesis about what a head moves, not a demonstration.",
]


def _listed(rows: pd.DataFrame) -> str:
    return ", ".join(f"{r.component} {r.value:+.2f}" for r in rows.itertuples())


def why_lines(f: NameMoverFindings) -> list[str]:
    """What the QK attribution says about why each explained head prefers S2 to IO, and where
    the interventions bear it out or not, from the numbers."""
    w = f.why
    if not w.heads:
        return [
            "None of the top heads looks mostly at S2, so there is no S2-vs-IO preference to "
            "explain."
        ]
    looks = f.name_attention.set_index("label")
    lines = []
    for h in w.heads:
        c = w.contrast.set_index("label").loc[h]
        sides = w.sides[w.sides["label"] == h]
        key, query = sides[sides["side"] == "key"], sides[sides["side"] == "query"]
        pair = w.pairs[w.pairs["label"] == h].iloc[0]
        checks = w.interventions[w.interventions["label"] == h]
        lines.append(
            f"{h} puts {looks.loc[h, 'to_s2']:.2f} of its final-position attention on S2 and "
            f"{looks.loc[h, 'to_io']:.2f} on IO: its score for S2 exceeds its score for IO by "
            f"{c['difference']:.2f} on average over the {len(f.prompts)} prompts (exact: the rows "
            f"sum to it; largest gap {c['score_gap']:.0e} of the largest score). What S2's key "
            f"carries that IO's lacks (key side): {_listed(key)}. What the final position asks "
            f"(query side): {_listed(query)}. "
            + (
                f"No single pair carries it: the largest by size, (query "
                f"{pair['query_component']}, key {pair['key_component']}), is "
                f"{pair['value']:+.2f} ({pair['share']:+.0%} of the difference)."
                if abs(pair["share"]) < 0.5
                else f"The pair (query {pair['query_component']}, key {pair['key_component']}) "
                f"carries {pair['share']:.0%} of it."
            )
        )
        for r in checks.itertuples():
            lines.append(
                f"{h}: removing {r.component} from its {r.side} input changes the difference by "
                f"{r.measured:+.2f}; the attribution says {r.attribution:+.2f}: {r.verdict}."
            )
        off = checks[checks["verdict"] != "agrees"]
        if len(off):
            named = "; ".join(
                f"{r.component} ({r.side}: attribution {r.attribution:+.2f}, measured "
                f"{r.measured:+.2f})"
                for r in off.itertuples()
            )
            lines.append(
                f"Caveat for {h}: attribution and intervention disagree on {named}. The "
                "attribution holds the norm's scale at its value in the run; removing the piece "
                "really moves it, so these shares are first-order only."
            )
        else:
            lines.append(
                f"For {h}, every checked writer's measured change agrees with its attribution "
                "(same sign, within a quarter of it)."
            )
    return lines


def report(f: NameMoverFindings, plots: dict[str, Any] | None = None) -> Report:
    """The lab's HTML report (:class:`interp.outputs.render.Report`)."""
    plots = figures(f) if plots is None else plots  # the writer passes the ones it saves
    t = tables(f)
    r = Report(TITLE)
    r.text(
        f"Model {f.model_name}: {f.n_layers} layers x {f.n_heads} heads. {len(f.prompts)} prompt "
        f"pairs, seed {f.seed}. Clean logit difference {f.clean_logit_diff:.3f}, corrupted "
        f"{f.corrupted_logit_diff:.3f}."
    )
    r.cautions(CAUTIONS)
    r.heading("Does the model do the task?")
    r.table(f.performance)
    if f.dropped:
        r.text("Dropped (the model fails them): " + "; ".join(f.dropped))
    r.heading("Exact patching and its attribution estimate")
    r.text(
        f"Direction: {f.direction}. Each head's output (hook_z) from the clean run is patched "
        "into the corrupted run, one head at a time; normalized is the fraction of the clean - "
        "corrupted logit difference it restores (effect = patched - corrupted). The attribution "
        "estimate is of the same patch."
    )
    r.figure(plots["recovery_exact"], "recovery_exact")
    r.figure(plots["recovery_estimate"], "recovery_estimate")
    r.figure(plots["estimate_vs_exact"], "estimate_vs_exact")
    r.table(f.agreement)
    r.raw(styled_html(t["patching"].nlargest(15, "normalized"), colour="normalized"))
    r.heading("Where the top heads look")
    r.figure(plots["name_attention"], "name_attention")
    r.table(f.name_attention)
    io = f.example_tokens[int(f.prompts.io_pos[0])]
    r.text(f"Prompt 0: {f.prompts.texts[0]!r}; the answer is the indirect object {io!r}.")
    r.attention(f.example_tokens, f.example_patterns, head_names=f.top_heads, causal=True)
    r.heading("What the top heads write: direct logit attribution")
    r.figure(plots["dla_heads"], "dla_heads")
    verdicts = direct_verdicts(f)
    for v in verdicts.itertuples():
        r.text(
            f"{v.label} restores {v.patching_restored:.2f} of the logit difference when patched; "
            f"it writes {v.dla:+.3f} into logit[IO] - logit[S] directly (rank {v.dla_rank} of "
            f"{f.n_layers * f.n_heads} heads, {v.dla_share:+.0%} of the clean total "
            f"{f.dla.attrs['total']:.2f}): it {v.verdict}."
        )
    r.table(verdicts)
    r.heading("The logit lens: when the answer appears")
    r.figure(plots["lens_final"], "lens_final")
    r.table(f.lens_final)
    r.figure(plots["lens_example"], "lens_example")
    r.heading("Why the heads that look at S2 prefer it to IO: QK attribution, checked")
    r.text(
        "Each head's score difference s[END, S2] - s[END, IO] (each prompt's own positions) split "
        "exactly into (query piece, key piece) pairs, every earlier head and MLP a piece, the "
        "norms' scales frozen from the run; then each side's top writers removed from the head's "
        "query or key input alone (norms recomputed) and the difference measured."
    )
    for line in why_lines(f):
        r.text(line)
    if f.why.heads:
        r.table(f.why.contrast)
        r.table(f.why.sides, caption="each side's largest writers of the S2 - IO difference")
        r.table(f.why.pairs, caption="the (query piece, key piece) pairs with the largest share")
        r.table(
            f.why.interventions,
            caption="each writer removed from the head's query or key "
            "input alone, beside its attribution",
        )
    r.heading("Ablating the top heads together")
    r.figure(plots["group_ablation"], "group_ablation")
    r.raw(styled_html(f.group_ablation))
    return r


def summary(f: NameMoverFindings) -> list[str]:
    """Lines for the terminal."""
    perf = f.performance[f.performance["split"] == "train"]
    ag = f.agreement.set_index("measure")["value"]
    top = f.patching.nlargest(3, "normalized")
    abl = f.group_ablation
    return [
        f"{f.model_name}: logit difference clean {f.clean_logit_diff:.3f}, corrupted "
        f"{f.corrupted_logit_diff:.3f}; {perf['fraction_correct'].mean():.2f} of training prompts "
        f"right, {len(f.dropped)} template(s) dropped",
        f"top heads by exact patching ({f.direction}: fraction restored): "
        + ", ".join(f"{r.label} {r.normalized:.2f}" for r in top.itertuples()),
        f"attribution vs exact: Spearman {ag.iloc[0]:.2f}, exact top 10 in estimate top 10: "
        f"{ag.iloc[1]:.0f}, in top 30: {ag.iloc[2]:.0f}",
        f"mean-ablating the top {len(f.top_heads)} together: {abl['effect'].iloc[0]:+.3f}, random "
        f"(median of {len(abl) - 1}): {abl[abl['kind'] == 'random']['effect'].median():+.3f}",
        "direct logit attribution of the top heads: "
        + "; ".join(
            f"{v.label} {v.dla:+.3f} (rank {v.dla_rank}): {v.verdict}"
            for v in direct_verdicts(f).itertuples()
        ),
        *[_why_summary(f, h) for h in f.why.heads],
    ]


def _why_summary(f: NameMoverFindings, h: str) -> str:
    w = f.why
    diff = float(w.contrast.set_index("label").loc[h, "difference"])
    sides = w.sides[w.sides["label"] == h]
    checks = w.interventions[w.interventions["label"] == h]
    agree = int((checks["verdict"] == "agrees").sum())
    return (
        f"{h} prefers S2 to IO by {diff:.2f} (score): key side "
        f"{_listed(sides[sides['side'] == 'key'].head(2))}; query side "
        f"{_listed(sides[sides['side'] == 'query'].head(2))}; interventions agree on {agree} of "
        f"{len(checks)} writers"
    )

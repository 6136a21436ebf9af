"""The feature-recovery lab's figures, HTML report and summary lines.

They lay out the findings of :mod:`.analysis` and compute nothing.
"""

from __future__ import annotations

from typing import Any

from interp.experiments.feature_recovery import feature_task as fr
from interp.experiments.feature_recovery.analysis import (
    PROBE_COLUMNS,
    TITLE,
    FeatureFindings,
    tables,
)
from interp.outputs.figures import grouped_bars
from interp.outputs.render import Report


def figures(f: FeatureFindings) -> dict[str, Any]:
    """Held-out accuracy per seed; the probes' changes on a log scale."""
    s = f.seeds
    worst = f.probe.groupby("space")[list(PROBE_COLUMNS)].max()
    floor = 1e-9  # a log axis cannot show an exact zero
    inter = f.runs[0].interventions.set_index("intervention")
    cols = ["d_query", "d_attention", "d_receiver_key", "d_receiver_value", "d_output"]
    return {
        "held_out_accuracy": grouped_bars(
            [f"seed {x}" for x in s["seed"]],
            {
                "learned head": s["accuracy"].tolist(),
                "uniform attention": (1 - s["mse_uniform_baseline"].clip(upper=1)).tolist(),
            },
            xlabel="training seed",
            ylabel="held-out score",
            caption="Held-out accuracy of the learned head (attention's argmax on the wanted "
            "source) per seed, beside 1 - MSE of uniform attention (what matching nothing "
            "gives). Three seeds show the solution recurs; they do not prove it always does.",
        ),
        "interventions": grouped_bars(
            cols,
            {
                name.split(" (")[0][:28]: [max(float(inter.loc[name, c]), floor) for c in cols]
                for name in inter.index
            },
            xlabel="what changes (mean over held-out sequences)",
            ylabel="change (log scale)",
            logy=True,
            caption="Interventions on the receiver's input: a relevant direction moves query "
            "and attention; a null-space direction of W_Q leaves the query (about 1e-7) and, "
            "with fixed keys, attention unchanged. Values below 1e-9 are drawn at 1e-9.",
        ),
        "null_space_probe": grouped_bars(
            list(PROBE_COLUMNS),
            {
                f"{sp} space": [max(float(worst.loc[sp, c]), floor) for c in PROBE_COLUMNS]
                for sp in worst.index
            },
            xlabel="relative change (largest over 8 random directions)",
            ylabel="change (log scale)",
            logy=True,
            caption="The induction model's L1H1: directions from the null space of W_Q^T added "
            "to its input change its query and fixed-key pattern by float rounding only; "
            "row-space directions change them by order 1. Other heads and the output may still "
            "move: the null space is this head's, not the model's.",
        ),
    }


def report(f: FeatureFindings, plots: dict[str, Any] | None = None) -> Report:
    """The lab's HTML report (:class:`interp.outputs.render.Report`)."""
    plots = figures(f) if plots is None else plots  # the writer passes the ones it saves
    t = tables(f)
    report = Report(TITLE)
    report.text(fr.__doc__.split("\n\n", 1)[1].replace("``", "").replace("*", ""))
    report.cautions(
        [
            "Keys and output targets are fixed so that feature meanings are identifiable; in a "
            "trained model nothing anchors them, and directions are not named features.",
            "A null-space direction is ignored by one map of one head; it can still change other "
            "heads, this head's keys and values, and the model output.",
        ]
    )
    report.heading("Learned maps (W_V in canonical form)")
    report.heatmap(
        f.maps.set_index("feature"), "rows: input features; columns: query / value coordinates"
    )
    report.heading("Which features each map recovers, and which it ignores")
    report.table(t["alignment"])
    report.table(t["recovered"])
    report.heading("Held-out sequences, several seeds")
    report.figure(plots["held_out_accuracy"], "held_out_accuracy")
    report.table(t["held_out"])
    report.table(t["seeds"])
    report.heading("Interventions on the receiver's input")
    report.figure(plots["interventions"], "interventions")
    report.table(t["interventions"])
    report.heading("Null spaces in a trained head")
    report.figure(plots["null_space_probe"], "null_space_probe")
    report.table(
        f.probe.groupby("space")[list(PROBE_COLUMNS)].max().reset_index(),
        "largest change over the random directions",
    )
    report.table(
        t["read_fraction"], "fraction of each head input's variance in its query read space"
    )
    report.heading("Null-space arithmetic")
    report.table(t["null_space_3d"], "M = [[1,0,1],[0,1,1]], e = (1,2,3)")
    report.table(t["query_map_arithmetic"], "a random 12,288 x 128 query map")
    return report


def summary(f: FeatureFindings) -> list[str]:
    """Lines for the terminal."""
    held = f.runs[0].held_out
    worst = f.probe.groupby("space")["d_query"].max()
    return [
        f"seed {f.seed}: held-out accuracy {held['accuracy']:.3f}, MSE {held['mse']:.4f} "
        f"(zero baseline {held['mse_zero_baseline']:.3f}, uniform attention "
        f"{held['mse_uniform_baseline']:.3f})",
        "recovered: "
        + ", ".join(f"{k}: {v}" for k, v in fr.recovered(f.runs[0].alignment).items()),
        f"seeds {f.seeds['seed'].tolist()}: accuracy {f.seeds['accuracy'].min():.3f}-"
        f"{f.seeds['accuracy'].max():.3f}",
        f"null-space probe on L1H1: query change {worst['null_space']:.1e} (null space) vs "
        f"{worst['row_space']:.2f} (row space)",
    ]

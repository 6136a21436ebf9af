"""The feature-recovery lab: what two 9 x 3 maps learn, read and ignore; null spaces in a real head.

Part one trains the synthetic task of :mod:`interp.labs.feature_task` (only
``W_Q`` and ``W_V`` learn; keys and output targets are fixed so feature
meanings are identifiable) on three seeds, and checks which features each
map recovers, held-out accuracy against baselines, and interventions on
relevant and irrelevant input directions. Part two runs the null-space probe
(:func:`interp.analysis.null_space_probe`) on the induction head of the
shipped two-layer model: directions in the null space of its ``W_Q^T`` leave
its queries and (keys held fixed) its attention unchanged, while row-space
controls move them; and the article's count, the nullity of a random
12,288 x 128 query map.

Example (the article's count, small; :func:`analyse` runs the lab):
    >>> query_map_arithmetic(d_in=64, d_out=8)[["rank", "nullity"]].values.tolist()
    [[8, 56]]
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pandas as pd

from interp.labs import feature_task as fr
from interp.labs.common import progress_bar

NAME = "feature-recovery"
TITLE = "Feature recovery: what two 9 x 3 maps learn, read and ignore"
N_SEEDS = 3


@dataclasses.dataclass(frozen=True)
class FeatureFindings:
    """Everything the feature-recovery lab computes and its report shows."""

    seed: int
    runs: list[fr.Recovery]
    seeds: pd.DataFrame
    maps: pd.DataFrame
    null_space: dict[str, Any]
    query_map: pd.DataFrame
    probe: pd.DataFrame
    read: pd.DataFrame


def query_map_arithmetic(d_in: int = 12_288, d_out: int = 128, seed: int = 0) -> pd.DataFrame:
    """The article's count: a random ``d_in x d_out`` query map has ``d_in - d_out`` null dims."""
    from interp.analysis.heads.subspace import null_space_dimension

    W = np.random.default_rng(seed).standard_normal((d_in, d_out)).astype(np.float32)
    t = time.perf_counter()
    nullity = null_space_dimension(W, convention="row")
    return pd.DataFrame(
        [
            {
                "d_in": d_in,
                "d_out": d_out,
                "rank": d_in - nullity,
                "nullity": nullity,
                "seconds": time.perf_counter() - t,
            }
        ]
    )


def analyse(*, seed: int = 0, progress: bool = False) -> FeatureFindings:
    """Train seeds ``seed .. seed + 2``, evaluate them, and probe the induction head's null space.

    Raises:
        InterpError: for a bad seed.
    """
    from interp.analysis.heads.null_probe import null_space_probe, read_fraction
    from interp.analysis.heads.scores import probe_tokens
    from interp.checks import check_seed
    from interp.labs.toy_heads import null_space_example
    from interp.models.checkpoints import load_induction_model

    seed = check_seed(seed)
    bar = progress_bar(N_SEEDS + 2, progress, "feature-recovery lab")
    runs = []
    for s in range(seed, seed + N_SEEDS):
        runs.append(fr.run(s))
        bar.update()
    Wq, Wv = fr.canonical_maps(runs[0].model)
    maps = pd.DataFrame(
        np.concatenate([Wq, Wv], 1),
        columns=[f"W_Q[:, {i}]" for i in range(3)] + [f"W_V[:, {i}]" for i in range(3)],
    )
    maps.insert(0, "feature", list(fr.FEATURES))
    model = load_induction_model()
    tokens = probe_tokens(model, n=8, seed=seed)
    probe = null_space_probe(model, tokens, layer=1, head=1, component="Q", seed=seed)
    read = read_fraction(model, tokens)
    bar.update()
    query_map = query_map_arithmetic(seed=seed)
    bar.update()
    bar.close()
    return FeatureFindings(
        seed=seed,
        runs=runs,
        seeds=fr.summarise(runs),
        maps=maps,
        null_space=null_space_example(),
        query_map=query_map,
        probe=probe,
        read=read,
    )


PROBE_COLUMNS = (
    "d_query",
    "d_pattern_fixed_keys",
    "d_pattern",
    "d_key",
    "d_other_queries",
    "d_output",
)


def tables(f: FeatureFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name."""
    main = f.runs[0]
    ns = f.null_space
    return {
        "alignment": main.alignment,
        "recovered": pd.DataFrame(
            [{"claim": k, "holds": v} for k, v in fr.recovered(main.alignment).items()]
        ),
        "held_out": pd.DataFrame([main.held_out]),
        "interventions": main.interventions,
        "seeds": f.seeds,
        "learned_maps": f.maps,
        "null_space_3d": pd.DataFrame(
            {
                "vector": ["n", "Mn", "Me", "M(e+n)"],
                "value": [
                    str(np.round(ns[k], 6).tolist()) for k in ("n", "Mn", "Me", "M_e_plus_n")
                ],
            }
        ),
        "query_map_arithmetic": f.query_map,
        "null_space_probe": f.probe,
        "read_fraction": f.read,
    }


def figures(f: FeatureFindings) -> dict[str, Any]:
    """Held-out accuracy per seed; the probes' changes on a log scale."""
    from interp.figures import grouped_bars

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


def report(f: FeatureFindings) -> Any:
    """The lab's HTML report."""
    from interp.render import Report

    plots = figures(f)
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

"""Write the feature-recovery lab's report: ``interp lab feature-recovery``.

``OUT/report.html`` plus one CSV per table, all written atomically.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from interp._export import export
from interp.analysis.subspace import null_space_dimension
from interp.labs import feature_recovery as fr
from interp.labs._output import LabOutput, prepare_out_dir
from interp.labs.bank_sense import null_space_example
from interp.render import Report

DEFAULT_OUT = Path("reports") / "feature-recovery"


def query_map_arithmetic(d_in: int = 12_288, d_out: int = 128, seed: int = 0) -> pd.DataFrame:
    """The article's count: a random ``d_in x d_out`` query map has ``d_in - d_out`` null dims."""
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


def run(out_dir: str | os.PathLike[str] = DEFAULT_OUT, *, seeds=(0, 1, 2)) -> LabOutput:
    """Train the seed-0 head, evaluate it, summarise other seeds, and write the report."""
    out = prepare_out_dir(out_dir)
    runs = [fr.run(s) for s in seeds]
    main, summary = runs[0], fr.summarise(runs)
    Wq, Wv = fr.canonical_maps(main.model)
    maps = pd.DataFrame(
        np.concatenate([Wq, Wv], 1),
        index=pd.Index(fr.FEATURES, name="feature"),
        columns=[f"W_Q[:, {i}]" for i in range(3)] + [f"W_V[:, {i}]" for i in range(3)],
    )
    ns = null_space_example()
    tables = {
        "alignment": main.alignment,
        "recovered": pd.DataFrame(
            [{"claim": k, "holds": v} for k, v in fr.recovered(main.alignment).items()]
        ),
        "held_out": pd.DataFrame([main.held_out]),
        "interventions": main.interventions,
        "seeds": summary,
        "learned_maps": maps.reset_index(),
        "null_space_3d": pd.DataFrame(
            {
                "vector": ["n", "Mn", "Me", "M(e+n)"],
                "value": [
                    str(np.round(ns[k], 6).tolist()) for k in ("n", "Mn", "Me", "M_e_plus_n")
                ],
            }
        ),
        "query_map_arithmetic": query_map_arithmetic(),
    }
    paths = {name: export(df, out / f"{name}.csv") for name, df in tables.items()}
    report = Report("Feature recovery: what two 9 x 3 maps learn, read and ignore")
    report.text(fr.__doc__.split("\n\n", 1)[1].replace("``", "").replace("*", ""))
    report.heading("Learned maps (W_V in canonical form)")
    report.heatmap(maps, "rows: input features; columns: query / value coordinates")
    report.heading("Which features each map recovers, and which it ignores")
    report.table(tables["alignment"])
    report.table(tables["recovered"])
    report.heading("Held-out sequences")
    report.table(tables["held_out"])
    report.heading("Interventions on the receiver's input")
    report.table(tables["interventions"])
    report.heading("Several seeds")
    report.text(
        "One seed's solution is an observation, not a law: the table shows how often "
        "the same solution recurs."
    )
    report.table(tables["seeds"])
    report.heading("Null-space arithmetic")
    report.table(tables["null_space_3d"], "M = [[1,0,1],[0,1,1]], e = (1,2,3)")
    report.table(tables["query_map_arithmetic"], "a random 12,288 x 128 query map")
    report_path = report.write(out / "report.html")
    held = main.held_out
    lines = [
        f"seed {seeds[0]}: held-out accuracy {held['accuracy']:.3f}, MSE {held['mse']:.4f} "
        f"(zero baseline {held['mse_zero_baseline']:.3f}, uniform attention "
        f"{held['mse_uniform_baseline']:.3f})",
        "recovered: " + ", ".join(f"{k}: {v}" for k, v in fr.recovered(main.alignment).items()),
        f"seeds {list(seeds)}: accuracy {summary['accuracy'].min():.3f}-"
        f"{summary['accuracy'].max():.3f}",
        f"wrote {report_path} and {len(paths)} CSV tables",
    ]
    return LabOutput(out_dir=out, report=report_path, tables=paths, summary=lines)

"""Run every benchmark script in turn: ``make bench``."""

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
for name in (
    "train_backends",
    "time_to_induction",
    "score_functions",
    "ablation_sweep",
    "attribution",
    "components",
    "qk_attribution",
    "composition",
    "atlas",
    "load",
    "precision",
    "generation",
    "runner_overhead",
    "bridge_overhead",
):
    print(f"\n== {name} ==")
    runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")

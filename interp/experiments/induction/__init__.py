"""The induction lab: find, and test, the induction circuit of a trained two-layer model.

:mod:`.analysis` computes the findings and their tables (:mod:`.why_attend`: why the
induction head attends, by QK attribution; :mod:`.features`: the same question over a
layer-0 dictionary's features); :mod:`.report` lays them out as figures, an
HTML report and summary lines.
"""

from interp.experiments.induction.analysis import (
    EVAL_SEED,
    NAME,
    TITLE,
    InductionFindings,
    analyse,
    eval_data,
    lens_by_half,
    tables,
)
from interp.experiments.induction.features import feature_sentence
from interp.experiments.induction.report import figures, lens_lines, report, summary, why_lines

__all__ = [
    "EVAL_SEED",
    "NAME",
    "TITLE",
    "InductionFindings",
    "analyse",
    "eval_data",
    "feature_sentence",
    "figures",
    "lens_by_half",
    "lens_lines",
    "report",
    "summary",
    "tables",
    "why_lines",
]

"""The name-mover lab: which heads move the indirect object's name to the answer, in SmolLM2.

:mod:`.analysis` computes the findings and their tables (:mod:`.why_attend`: why the top
heads that look at S2 prefer it to IO, by QK attribution); :mod:`.report` lays them out as
figures, an HTML report and summary lines.
"""

from interp.experiments.name_movers.analysis import (
    DIRECTION,
    NAME,
    TITLE,
    NameMoverFindings,
    analyse,
    check_performance,
    direct_verdicts,
    logit_diffs,
    tables,
)
from interp.experiments.name_movers.report import (
    attention_caption,
    figures,
    report,
    summary,
    why_lines,
)

__all__ = [
    "DIRECTION",
    "NAME",
    "TITLE",
    "NameMoverFindings",
    "analyse",
    "attention_caption",
    "check_performance",
    "direct_verdicts",
    "figures",
    "logit_diffs",
    "report",
    "summary",
    "tables",
    "why_lines",
]

"""The pretrained-heads lab (``interp lab pretrained``): induction and word sense in real models.

:mod:`.analysis` computes the findings and their tables; :mod:`.report` lays them out as
figures, an HTML report and summary lines.
"""

from interp.experiments.pretrained_heads.analysis import (
    DEFAULT_MODELS,
    NAME,
    TITLE,
    InductionInModel,
    ModelFindings,
    PretrainedFindings,
    SenseInModel,
    analyse,
    induction_in,
    sense_in,
    sense_steps,
    strong_heads,
    tables,
    top_by_kind,
)
from interp.experiments.pretrained_heads.report import figures, report, summary

__all__ = [
    "DEFAULT_MODELS",
    "NAME",
    "TITLE",
    "InductionInModel",
    "ModelFindings",
    "PretrainedFindings",
    "SenseInModel",
    "analyse",
    "figures",
    "induction_in",
    "report",
    "sense_in",
    "sense_steps",
    "strong_heads",
    "summary",
    "tables",
    "top_by_kind",
]

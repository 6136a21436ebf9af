"""The circuits lab: which edges carry a task, found by estimates and decided exactly.

:mod:`.analysis` computes the findings and their tables; :mod:`.report` lays them out
as figures, an HTML report and summary lines. The lab's task (:func:`circuit_task`)
lives in :mod:`interp.analysis.circuits.prompts`.
"""

from interp.analysis.circuits.prompts import CircuitPrompts, circuit_task
from interp.core.moved import renamed
from interp.experiments.circuits.analysis import (
    DIRECTION,
    EXACT_ALL,
    EXACT_TOP,
    MATTERS,
    NAME,
    TARGET,
    TITLE,
    CircuitFindings,
    analyse,
    tables,
)
from interp.experiments.circuits.report import figures, report, summary

__all__ = [
    "DIRECTION",
    "EXACT_ALL",
    "EXACT_TOP",
    "MATTERS",
    "NAME",
    "TARGET",
    "TITLE",
    "CircuitFindings",
    "CircuitPrompts",
    "analyse",
    "circuit_task",
    "figures",
    "report",
    "summary",
    "tables",
]


def __getattr__(name: str) -> object:
    return renamed(__name__, name)  # an old name warns and names the new one

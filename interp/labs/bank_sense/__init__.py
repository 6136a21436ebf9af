"""The bank-sense lab: every experiment of the article "How an attention head mixes information".

:mod:`.toy_heads` and :mod:`.causal_masking` (the hand-set toy heads) and
:mod:`.sense_training` (the trained classifiers) hold the experiments;
:mod:`.analysis` runs them into findings and tables; :mod:`.report` lays them out as
figures, an HTML report and summary lines.
"""

from interp.labs.bank_sense import causal_masking, sense_training, toy_heads
from interp.labs.bank_sense.analysis import (
    NAME,
    SGD_STEPS,
    TITLE,
    BankSenseFindings,
    analyse,
    tables,
)
from interp.labs.bank_sense.report import figures, report, summary

__all__ = [
    "NAME",
    "SGD_STEPS",
    "TITLE",
    "BankSenseFindings",
    "analyse",
    "causal_masking",
    "figures",
    "report",
    "sense_training",
    "summary",
    "tables",
    "toy_heads",
]

"""The bank-sense lab: every experiment of the article "How an attention head mixes information".

:mod:`.toy_heads`, :mod:`.causal_masking` and :mod:`.qk_split` (the hand-set toy heads,
their scores split into query-side and key-side pieces) and
:mod:`.sense_training` (the trained classifiers) hold the experiments;
:mod:`.analysis` runs them into findings and tables; :mod:`.report` lays them out as
figures, an HTML report and summary lines.
"""

from interp.experiments.bank_sense import causal_masking, qk_split, sense_training, toy_heads
from interp.experiments.bank_sense.analysis import (
    NAME,
    SGD_STEPS,
    TITLE,
    BankSenseFindings,
    analyse,
    tables,
)
from interp.experiments.bank_sense.report import figures, report, split_lines, summary

__all__ = [
    "NAME",
    "SGD_STEPS",
    "TITLE",
    "BankSenseFindings",
    "analyse",
    "causal_masking",
    "figures",
    "qk_split",
    "report",
    "sense_training",
    "split_lines",
    "summary",
    "tables",
    "toy_heads",
]

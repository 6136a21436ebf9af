"""The feature-recovery lab: what two 9 x 3 maps learn, read and ignore; null spaces in a real head.

:mod:`.feature_task` is the synthetic task; :mod:`.analysis` trains and probes it into
findings and tables; :mod:`.report` lays them out as figures, an HTML report and summary lines.
"""

from interp.experiments.feature_recovery import feature_task
from interp.experiments.feature_recovery.analysis import (
    N_SEEDS,
    NAME,
    PROBE_COLUMNS,
    TITLE,
    FeatureFindings,
    analyse,
    query_map_arithmetic,
    tables,
)
from interp.experiments.feature_recovery.report import figures, report, summary

__all__ = [
    "N_SEEDS",
    "NAME",
    "PROBE_COLUMNS",
    "TITLE",
    "FeatureFindings",
    "analyse",
    "feature_task",
    "figures",
    "query_map_arithmetic",
    "report",
    "summary",
    "tables",
]

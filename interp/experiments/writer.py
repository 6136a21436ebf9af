"""One writer for every lab: its tables through :func:`interp.export`, its figures, its report.

A lab's output folder is built as a temporary sibling and swapped in at the
end (:func:`interp.outputs.files.atomic_dir`): an interrupted run leaves the previous
complete output or the new complete one, and a failed run leaves no folder.

Layout: ``report.html`` (self-contained, renders offline), one table per
name as ``<name>.<format>`` (each recording how it was computed: its own
``attrs`` plus the lab, seed and models; CSV tables in ``<name>.meta.json``
beside them), one figure per name as ``figures/<name>.svg``, and
``interp-lab.json`` (which lab, seed, models, files). Identical runs write
identical bytes.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path
from typing import Any

from interp.core.errors import InterpError
from interp.outputs.files import atomic_dir

TABLE_FORMATS = ("csv", "parquet", "md", "json")


def check_format(fmt: str) -> str:
    """``fmt`` if it is a table format (:data:`TABLE_FORMATS`).

    Raises:
        InterpError: for any other format.
    """
    if fmt not in TABLE_FORMATS:
        raise InterpError(f"unknown table format {fmt!r}; choose one of {', '.join(TABLE_FORMATS)}")
    return fmt


@dataclasses.dataclass(frozen=True)
class LabOutput:
    """What a lab run wrote: the report, tables and figures, and summary lines for the terminal."""

    out_dir: Path
    report: Path
    tables: dict[str, Path]
    figures: dict[str, Path]
    summary: list[str]


def findings_meta(findings: Any) -> dict[str, Any]:
    """What every lab output records from its findings: the seed and the models' names, so a
    notebook and ``interp lab`` write the same files for the same run."""
    meta: dict[str, Any] = {}
    if hasattr(findings, "seed"):
        meta["seed"] = findings.seed
    if hasattr(findings, "model_name"):
        meta["models"] = [findings.model_name]
    elif isinstance(getattr(findings, "models", None), dict):
        meta["models"] = list(findings.models)
    return meta


def write_lab(
    lab: Any,
    findings: Any,
    out_dir: str | os.PathLike[str],
    *,
    fmt: str = "csv",
    meta: dict[str, Any] | None = None,
) -> LabOutput:
    """Write ``lab``'s tables, figures and report of ``findings`` into ``out_dir`` atomically.

    Raises:
        InterpError: for an unknown format, or an output folder that cannot be
            written or holds files that are not an earlier lab output.
    """
    from interp.outputs.tables import export

    check_format(fmt)
    meta = {**findings_meta(findings), **(meta or {})}
    out = Path(out_dir)
    tables = lab.tables(findings)
    plots = lab.figures(findings)
    # the figures drawn once, for the report and the files, where the report takes them
    takes = "plots" in inspect.signature(lab.report).parameters
    report = lab.report(findings, plots=plots) if takes else lab.report(findings)
    marker = {"lab": lab.NAME, **(meta or {}), "tables": sorted(tables), "figures": sorted(plots)}
    with atomic_dir(out, marker=marker) as tmp:
        for name, df in tables.items():
            export(df, tmp / f"{name}.{fmt}", meta={"lab": lab.NAME, "table": name, **(meta or {})})
        (tmp / "figures").mkdir()
        for name, plot in plots.items():
            (tmp / "figures" / f"{name}.svg").write_text(plot.svg(), encoding="utf-8")
        report.write(tmp / "report.html")
    lines = [
        *lab.summary(findings),
        f"wrote {out / 'report.html'}, {len(tables)} {fmt} tables and {len(plots)} figures",
    ]
    return LabOutput(
        out_dir=out,
        report=out / "report.html",
        tables={n: out / f"{n}.{fmt}" for n in tables},
        figures={n: out / "figures" / f"{n}.svg" for n in plots},
        summary=lines,
    )

"""Export a results table, choosing the format from the file extension.

============ =========================================================
extension    format
============ =========================================================
``.csv``     CSV, full float precision (``repr`` round-trip)
``.parquet`` Parquet (pyarrow), full precision
``.json``    JSON records, full precision; NaN and infinities become ``null``
``.md``      Markdown table, floats rounded to 4 decimals
``.html``    pandas-styled HTML table, colour scale on ``delta``
============ =========================================================

Every format is written atomically (temporary file beside the target, then
rename), and the destination is checked before anything is written.

Example:
    >>> import pandas as pd, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.json"
    >>> _ = export(pd.DataFrame({"layer": [0], "delta": [float("nan")]}), path)
    >>> path.read_text().split()
    ['[', '{', '"layer":', '0,', '"delta":', 'null', '}', ']']
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from interp.errors import InterpError
from interp.files import check_output_file, write_text, write_with

FORMATS = (".csv", ".parquet", ".json", ".md", ".html")


def check_export_path(path: str | os.PathLike[str]) -> Path:
    """Validate an export path before any heavy work: known extension, writable folder.

    Raises:
        InterpError: for an unknown extension, a path that is a folder, or a
            folder that does not exist or cannot be written.
    """
    p = Path(path)
    if p.is_dir():
        raise InterpError(f"output {str(p)!r} is a folder; pass a file path such as table.csv")
    if p.suffix.lower() not in FORMATS:
        raise InterpError(
            f"unknown output extension {p.suffix or '(none)'!r} for {str(p)!r}; "
            f"use one of {', '.join(FORMATS)}"
        )
    return check_output_file(p)


def diverging_colour(value: float, lo: float, hi: float) -> str:
    """A white-to-red (positive) / white-to-blue (negative) CSS background for ``value``."""
    if pd.isna(value):
        return ""
    span = max(abs(lo), abs(hi)) or 1.0
    t = min(1.0, abs(value) / span)
    light = int(round(100 - 45 * t))
    hue = 0 if value >= 0 else 220
    return f"background-color: hsl({hue}, 80%, {light}%)"


def _plain(v: Any) -> Any:
    """A JSON-safe Python value: numpy scalars unwrapped, NaN and infinities as None."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts of plain Python values (floats keep all 17 significant digits)."""
    return [
        {str(k): _plain(v) for k, v in zip(df.columns, row)}
        for row in df.itertuples(index=False, name=None)
    ]


def styled_html(df: pd.DataFrame, *, colour: str | None = "delta", decimals: int = 4) -> str:
    """A pandas-styled HTML table with a colour scale on column ``colour`` (if present)."""
    floats = df.select_dtypes("floating").columns
    styler = df.style.format(f"{{:.{decimals}f}}", subset=floats).hide(axis="index")
    if colour and colour in df.columns:
        lo, hi = float(df[colour].min()), float(df[colour].max())
        styler = styler.map(lambda v: diverging_colour(v, lo, hi), subset=[colour])
    return styler.to_html()


def export(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    colour: str | None = "delta",
    decimals: int = 4,
) -> Path:
    """Write ``df`` to ``path`` in the format its extension names (see module docstring).

    ``colour`` and ``decimals`` style the ``.html`` format.

    Raises:
        InterpError: for a non-DataFrame, an unknown extension, a path that is
            a folder, or a folder that does not exist or cannot be written.
    """
    if not isinstance(df, pd.DataFrame):
        raise InterpError(f"export needs a pandas DataFrame, got {type(df).__name__}")
    p = check_export_path(path)
    ext = p.suffix.lower()
    if ext == ".csv":
        return write_with(p, lambda t: df.to_csv(t, index=False, float_format="%.17g"))
    if ext == ".parquet":
        return write_with(p, lambda t: df.to_parquet(t, index=False))
    if ext == ".json":
        return write_text(p, json.dumps(records(df), indent=1, allow_nan=False) + "\n")
    if ext == ".md":
        return write_text(p, df.to_markdown(index=False, floatfmt=".4f") + "\n")
    body = styled_html(df, colour=colour, decimals=decimals)
    return write_text(
        p, f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>\n"
    )

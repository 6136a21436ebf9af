"""Export a results table with how it was computed, and read it back.

============ ================================================================
extension    format
============ ================================================================
``.csv``     CSV (shortest round-trip floats) + sidecar ``<stem>.meta.json``
``.parquet`` Parquet (pyarrow); the metadata in the file's schema (key ``interp``)
``.json``    ``{"meta": {...}, "rows": [...]}``; NaN and infinities are ``null``
``.md``      Markdown table, floats rounded to 4 decimals, the metadata as its caption
``.html``    pandas-styled HTML table, colour scale on ``effect``, the metadata as caption
============ ================================================================

The metadata is the table's ``df.attrs`` (every analysis records its
``method``, ``metric`` and ``unit``, ``model``, ``positions``, ``seed``...)
plus the ``interp_version`` that wrote it: a number read off a file says how
it was computed. :func:`read_table` reads CSV, Parquet and JSON back with
their ``attrs``; the CSV sidecar holds the CSV's SHA-256, so metadata left
beside another version of the table is refused rather than believed.

Floats are written with the fewest digits that read back to the same double
(Python's ``repr``), not a fixed 17. Every file is written atomically
(temporary file beside the target, then rename), and the destination is
checked before anything is written. Styled HTML is byte-identical between
runs (its element ids come from the table's content, not a random uuid).

Example:
    >>> import pandas as pd, tempfile, pathlib
    >>> df = pd.DataFrame({"layer": [0], "effect": [0.1]})
    >>> df.attrs.update(method="exact", ablation="zero", seed=0)
    >>> path = export(df, pathlib.Path(tempfile.mkdtemp()) / "t.csv")
    >>> back = read_table(path)
    >>> back["effect"].tolist(), back.attrs["ablation"], "interp_version" in back.attrs
    ([0.1], 'zero', True)
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from interp.core.errors import InterpError
from interp.core.version import VERSION
from interp.outputs.files import check_output_file, write_text, write_with

FORMATS = (".csv", ".parquet", ".json", ".md", ".html")
READABLE = (".csv", ".parquet", ".json")
PARQUET_KEY = b"interp"
# The order the caption names the metadata in; other keys follow alphabetically.
CAPTION_ORDER = (
    "method",
    "ablation",
    "direction",
    "metric",
    "unit",
    "model",
    "inputs",
    "positions",
    "seed",
)


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


def plain(v: Any) -> Any:
    """A JSON-safe Python value: numpy/torch scalars unwrapped, NaN and infinities as None,
    containers converted recursively, anything else as its ``str``."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        v = v.tolist()
    elif hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [plain(x) for x in v]
    return str(v)


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts of plain Python values (floats keep their full precision)."""
    return [
        {str(k): plain(v) for k, v in zip(df.columns, row)}
        for row in df.itertuples(index=False, name=None)
    ]


def table_meta(df: pd.DataFrame, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a table file records about how it was computed: ``df.attrs`` (JSON-safe), then
    ``extra`` for keys the table does not set itself, then ``interp_version``."""

    meta = {str(k): plain(v) for k, v in df.attrs.items()}
    for k, v in (extra or {}).items():
        meta.setdefault(str(k), plain(v))
    meta["interp_version"] = VERSION
    return meta


def caption(meta: dict[str, Any]) -> str:
    """One line naming the metadata, in :data:`CAPTION_ORDER` first (for Markdown and HTML)."""
    keys = [k for k in CAPTION_ORDER if k in meta]
    keys += sorted(k for k in meta if k not in CAPTION_ORDER and k != "interp_version")
    parts = [f"{k}: {_show(meta[k])}" for k in keys if meta[k] not in (None, "", [], {})]
    parts.append(f"interp {meta.get('interp_version', '?')}")
    return "; ".join(parts)


def _show(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def styler(df: pd.DataFrame, *, decimals: int | None = 4, caption_text: str | None = None) -> Any:
    """``df.style`` with floats rounded, the index hidden and *deterministic* element ids.

    pandas gives every Styler a random uuid, so the same table rendered twice
    differs; the uuid here is a hash of the table's content and caption.
    """
    key = hashlib.sha256(
        (df.to_csv(index=False) + (caption_text or "") + str(decimals)).encode()
    ).hexdigest()[:10]
    s = df.style
    s.set_uuid(key)
    if decimals is not None:
        s = s.format(f"{{:.{decimals}f}}", subset=df.select_dtypes("floating").columns)
    s = s.hide(axis="index")
    if caption_text:
        s = s.set_caption(html.escape(caption_text))
    return s


def styled_html(
    df: pd.DataFrame,
    *,
    colour: str | None = "effect",
    decimals: int = 4,
    caption_text: str | None = None,
) -> str:
    """A pandas-styled HTML table with a colour scale on column ``colour`` (if present)."""
    s = styler(df, decimals=decimals, caption_text=caption_text)
    if colour and colour in df.columns:
        lo, hi = float(df[colour].min()), float(df[colour].max())
        s = s.map(lambda v: diverging_colour(v, lo, hi), subset=[colour])
    return s.to_html()


def sidecar(path: str | os.PathLike[str]) -> Path:
    """The metadata file beside a CSV table: ``<stem>.meta.json``."""
    p = Path(path)
    return p.with_name(f"{p.stem}.meta.json")


def export(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    colour: str | None = "effect",
    decimals: int = 4,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write ``df`` and how it was computed to ``path``, in the format its extension names.

    The metadata is ``df.attrs`` plus ``meta`` and ``interp_version``; the module docstring
    says where each format keeps it. The destination is checked before anything is
    written, and the file is written atomically.

    Args:
        df: The table (an analysis's, with its ``attrs``, or any DataFrame).
        path: The file to write; its extension picks the format: ``.csv`` (with a
            ``<stem>.meta.json`` sidecar), ``.parquet``, ``.json``, ``.md`` or ``.html``.
        colour: The column the ``.html`` colour scale shades, when the table has it
            (default ``"effect"``; ``None``: no colour).
        decimals: Digits after the point in the ``.html`` format (default 4).
        meta: Keys to record that the table's own ``df.attrs`` do not set (a lab adds its
            name, seed and models); ``df.attrs`` win where both set a key.

    Returns:
        The path written.

    Raises:
        InterpError: for a non-DataFrame, an unknown extension, a path that is
            a folder, or a folder that does not exist or cannot be written.
    """
    if not isinstance(df, pd.DataFrame):
        raise InterpError(f"export needs a pandas DataFrame, got {type(df).__name__}")
    p = check_export_path(path)
    ext = p.suffix.lower()
    info = table_meta(df, meta)
    if ext == ".csv":
        write_with(p, lambda t: df.to_csv(t, index=False))
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        side = {"table": p.name, "table_sha256": digest, "meta": info}
        write_text(sidecar(p), json.dumps(side, indent=1, allow_nan=False) + "\n")
        return p
    if ext == ".parquet":
        return write_with(p, lambda t: _write_parquet(df, t, info))
    if ext == ".json":
        doc = {"meta": info, "rows": records(df)}
        return write_text(p, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    if ext == ".md":
        body = df.to_markdown(index=False, floatfmt=".4f")
        return write_text(p, f"Table: {caption(info)}\n\n{body}\n")
    body = styled_html(df, colour=colour, decimals=decimals, caption_text=caption(info))
    return write_text(
        p, f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>\n"
    )


def _write_parquet(df: pd.DataFrame, target: Path, info: dict[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain_df = df.copy()
    plain_df.attrs = {}  # ours go under PARQUET_KEY, JSON-safe (pandas' own copy warns on numpy)
    table = pa.Table.from_pandas(plain_df, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[PARQUET_KEY] = json.dumps(info, allow_nan=False).encode()
    pq.write_table(table.replace_schema_metadata(metadata), target)


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A table written by :func:`export` (CSV, Parquet or JSON), with its ``attrs`` restored.

    A CSV's sidecar holds the CSV's SHA-256, so metadata left beside another version of the
    table is refused rather than believed.

    Args:
        path: A ``.csv`` (with its sidecar, when there is one), ``.parquet`` or ``.json``
            file written by :func:`export`.

    Returns:
        The table, its ``attrs`` restored (how it was computed, and ``interp_version``).

    Raises:
        InterpError: for a missing file, another format, a file that is not
            such a table, or a CSV whose sidecar describes another version of it.
    """
    p = Path(path)
    if not p.is_file():
        raise InterpError(f"table {str(p)!r} not found")
    ext = p.suffix.lower()
    if ext not in READABLE:
        raise InterpError(
            f"read_table reads {', '.join(READABLE)}; {str(p)!r} is {ext or 'extensionless'} "
            "(Markdown and HTML are for reading by eye)"
        )
    try:
        if ext == ".csv":
            df = pd.read_csv(p)
            side = sidecar(p)
            info: dict[str, Any] = {}
            if side.is_file():
                doc = json.loads(side.read_text())
                if doc.get("table_sha256") != hashlib.sha256(p.read_bytes()).hexdigest():
                    raise InterpError(
                        f"{side.name} describes another version of {p.name} (its SHA-256 "
                        "differs): the table was changed after it was written; re-export it"
                    )
                info = doc.get("meta", {})
        elif ext == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(p)
            raw = (table.schema.metadata or {}).get(PARQUET_KEY)
            info = json.loads(raw) if raw else {}
            df = table.to_pandas()
        else:
            doc = json.loads(p.read_text())
            if not isinstance(doc, dict) or "rows" not in doc:
                raise InterpError(f"{str(p)!r} is JSON but not an interp table (no 'rows')")
            df = pd.DataFrame(doc["rows"])
            info = doc.get("meta", {})
    except InterpError:
        raise
    except Exception as exc:  # noqa: BLE001 - pandas, pyarrow and json each raise their own
        raise InterpError(
            f"cannot read {str(p)!r} as a table ({type(exc).__name__}: {exc})"
        ) from None
    df.attrs.update(info)
    return df

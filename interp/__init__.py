"""interp: open up attention heads.

Hooked toy heads, attention-only transformers and TransformerBridge models
share TransformerLens hook names and weights, so each analysis is written
once. ``import interp`` is cheap: torch, TransformerLens and circuitsvis load
only when a submodule that needs them is used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from interp.errors import CheckpointError, InterpError

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import pandas as pd

__version__ = "0.3.0"
__all__ = ["CheckpointError", "InterpError", "__version__", "export", "read_table"]


def export(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    colour: str | None = "effect",
    decimals: int = 4,
    meta: dict | None = None,
) -> Path:
    """Export a table and how it was computed, format chosen by extension.

    ``.csv`` (with a ``<stem>.meta.json`` sidecar), ``.parquet``, ``.json``,
    ``.md``, ``.html``: see :func:`interp.tables.export` (``colour`` and
    ``decimals`` style HTML; ``meta`` adds keys the table's ``attrs`` lack);
    pandas loads only when this is called.

    Raises:
        InterpError: for an unknown extension or a destination that cannot be written.
    """
    from interp.tables import export as _export

    return _export(df, path, colour=colour, decimals=decimals, meta=meta)


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a table written by :func:`export` (CSV, Parquet, JSON) with its ``attrs``.

    See :func:`interp.tables.read_table`.

    Raises:
        InterpError: for a missing or unreadable file, or a CSV whose metadata
            sidecar describes another version of it.
    """
    from interp.tables import read_table as _read

    return _read(path)

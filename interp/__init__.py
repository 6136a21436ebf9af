"""interp: open up attention heads.

Hooked toy heads, attention-only transformers and TransformerBridge models
share TransformerLens hook names and weights, so each analysis is written
once. ``import interp`` is cheap: torch, TransformerLens and circuitsvis load
only when a submodule that needs them is used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from interp.core.errors import CheckpointError, InterpError
from interp.core.moved import install as _install_old_paths
from interp.core.version import VERSION as __version__

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import pandas as pd

__all__ = ["CheckpointError", "InterpError", "__version__", "export", "read_table"]

# Old module paths (interp.errors, interp.labs, ...) import again, warning with the new place.
_install_old_paths()


def export(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    colour: str | None = "effect",
    decimals: int = 4,
    meta: dict | None = None,
) -> Path:
    """Export a table and how it was computed, format chosen by extension.

    ``.csv`` (with a ``<stem>.meta.json`` sidecar), ``.parquet``, ``.json``, ``.md``,
    ``.html``: :func:`interp.outputs.tables.export`, which this calls; pandas loads only when this
    is called.

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
        InterpError: for a non-DataFrame, an unknown extension, or a destination that
            cannot be written.
    """
    from interp.outputs.tables import export as _export

    return _export(df, path, colour=colour, decimals=decimals, meta=meta)


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a table written by :func:`export` (CSV, Parquet, JSON) with its ``attrs``.

    :func:`interp.outputs.tables.read_table`, which this calls.

    Args:
        path: A ``.csv`` (with its sidecar, when there is one), ``.parquet`` or ``.json``
            file written by :func:`export`.

    Returns:
        The table, its ``attrs`` restored (how it was computed, and ``interp_version``).

    Raises:
        InterpError: for a missing file, another format, an unreadable file, or a CSV
            whose metadata sidecar describes another version of it.
    """
    from interp.outputs.tables import read_table as _read

    return _read(path)

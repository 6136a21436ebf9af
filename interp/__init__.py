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

__version__ = "0.2.0"
__all__ = ["CheckpointError", "InterpError", "__version__", "export"]


def export(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    colour: str | None = "delta",
    decimals: int = 4,
) -> Path:
    """Export a table, format chosen by extension (.csv .parquet .json .md .html).

    See :func:`interp.tables.export` (``colour`` and ``decimals`` style HTML);
    pandas loads only when this is called.

    Raises:
        InterpError: for an unknown extension or a destination that cannot be written.
    """
    from interp.tables import export as _export

    return _export(df, path, colour=colour, decimals=decimals)

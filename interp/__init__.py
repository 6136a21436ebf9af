"""interp: open up attention heads.

Hooked toy heads, attention-only transformers and TransformerBridge models
share TransformerLens hook names and weights, so each analysis is written
once. ``import interp`` is cheap: torch, TransformerLens and circuitsvis load
only when a submodule that needs them is used.
"""

from __future__ import annotations

from interp.errors import CheckpointError, InterpError

__version__ = "0.1.0"
__all__ = ["CheckpointError", "InterpError", "__version__", "export"]


def export(df, path, **kwargs):  # noqa: ANN001, ANN201 - a lazy wrapper, typed in interp._export
    """Export a table, format chosen by extension (.csv .parquet .json .md .html).

    See :func:`interp._export.export`; pandas loads only when this is called.
    """
    from interp._export import export as _export

    return _export(df, path, **kwargs)

"""What every ``interp`` command writes: output paths checked first, files written all or none.

Example:
    >>> check_svg(None) is None
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from interp.core.errors import InterpError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd


def check_out(path: str) -> Path:
    """A table path checked before any work (:func:`interp.outputs.tables.check_export_path`)."""
    from interp.outputs.tables import check_export_path

    return check_export_path(path)


def check_svg(path: str | None) -> Path | None:
    """A ``--figure`` path (``.svg``) checked before any work; ``None`` when not asked for."""
    if path is None:
        return None
    p = Path(path)
    if p.suffix.lower() != ".svg":
        raise InterpError(f"--figure {path!r} must end in .svg")
    from interp.outputs.files import check_output_file

    return check_output_file(p, "--figure")


def check_distinct(outputs: dict[str, Path | None]) -> None:
    """Every output (``{option: path}``) its own file, a CSV table's sidecar included.

    Raises:
        InterpError: for two options that would write the same file.
    """
    from interp.outputs.tables import sidecar

    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        files = [path, sidecar(path)] if path.suffix.lower() == ".csv" else [path]
        for f in files:
            key = os.path.realpath(f)
            if key in seen:
                raise InterpError(
                    f"{option} {str(path)!r} and {seen[key]} would write the same file "
                    f"{str(f)!r}; give each output its own path"
                )
            seen[key] = f"{option} {str(path)!r}"


def write_outputs(writers: dict[Path, Callable[[Path], object]]) -> None:
    """Write every output of a command together, after all the work is done: each to a
    temporary sibling, then all moved into place at once (:func:`interp.outputs.files.write_files`),
    so Ctrl-C or a failure leaves every old file or every new one."""
    from interp.outputs.files import write_files

    write_files(writers)


def export_to(df: pd.DataFrame) -> Callable[[Path], object]:
    """A writer (for :func:`write_outputs`) exporting ``df`` as its path's format."""
    from interp import export

    return lambda path: export(df, path)


def text_to(text: str) -> Callable[[Path], object]:
    """A writer (for :func:`write_outputs`) of ``text``."""
    from interp.outputs.files import write_text

    return lambda path: write_text(path, text)


def print_top(df: pd.DataFrame, column: str, top: int) -> None:
    """The ``top`` rows by ``|column|``."""
    if top:
        show = df.reindex(df[column].abs().sort_values(ascending=False).index).head(top)
        print(show.to_string(index=False, float_format=lambda v: f"{v:.4f}"))

"""What a lab run returns, and where it writes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from interp._io import check_out_dir


@dataclass
class LabOutput:
    """What a lab run wrote: the report, the tables, and summary lines for the terminal."""

    out_dir: Path
    report: Path
    tables: dict[str, Path] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)


def prepare_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Create ``out_dir`` (and parents); refuse a path that is an existing file."""
    out = check_out_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out

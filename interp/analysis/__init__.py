"""Analyses written once for every hooked model (loaded lazily, one module each)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Subspaces": "interp.analysis.subspace",
    "subspaces": "interp.analysis.subspace",
    "null_space_dimension": "interp.analysis.subspace",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp.analysis' has no attribute {name!r}")

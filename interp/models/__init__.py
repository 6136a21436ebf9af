"""Hooked models: toy heads, attention-only transformers, pretrained bridges (loaded lazily).

:func:`load_model` is the one entry for every model name, folder or hub id.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AttnOnlyConfig": "interp.models.attn_only",
    "AttnOnlyTransformer": "interp.models.attn_only",
    "attention": "interp.models.toy",
    "toy_model": "interp.models.toy",
    "OneHeadSense": "interp.models.toy",
    "load_induction_model": "interp.models.checkpoints",
    "load_checkpoint": "interp.models.checkpoints",
    "save_checkpoint": "interp.models.checkpoints",
    "load_model": "interp.models.loader",
    "list_models": "interp.models.loader",
    "ALIASES": "interp.models.loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp.models' has no attribute {name!r}")

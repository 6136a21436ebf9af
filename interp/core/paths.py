"""Where `interp` finds its shipped data: ``$INTERP_DATA`` or the repository's ``data/``."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """The data folder (``INTERP_DATA`` overrides the repository's ``data/``)."""
    env = os.environ.get("INTERP_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data"


INDUCTION_CHECKPOINT = "induction-2l"


def cache_dir() -> Path:
    """``$INTERP_CACHE``, else ``$XDG_CACHE_HOME/interp``, else ``~/.cache/interp``."""
    env = os.environ.get("INTERP_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "interp"

"""The package's version, below everything: tables, circuits and ``interp.__version__`` read it.

Example:
    >>> import interp
    >>> VERSION == interp.__version__
    True
"""

from __future__ import annotations

VERSION = "0.3.0"

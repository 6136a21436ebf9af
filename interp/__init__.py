"""interp: open up attention heads.

Hooked toy heads, attention-only transformers and TransformerBridge models
share TransformerLens hook names and weights, so each analysis is written
once. ``import interp`` is cheap: torch, TransformerLens and circuitsvis load
only when a submodule that needs them is used.
"""

from __future__ import annotations

from interp.errors import CheckpointError, InterpError

__version__ = "0.1.0"
__all__ = ["CheckpointError", "InterpError", "__version__"]

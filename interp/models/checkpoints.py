"""Loading the shipped, trained checkpoints."""

from __future__ import annotations

import os
from typing import Any

from interp.models.attn_only import AttnOnlyTransformer
from interp.paths import INDUCTION_CHECKPOINT, data_dir


def load_induction_model(
    path: str | os.PathLike[str] | None = None, *, with_meta: bool = False
) -> AttnOnlyTransformer | tuple[AttnOnlyTransformer, dict[str, Any]]:
    """The shipped two-layer attention-only induction model (``data/induction-2l``).

    Example:
        >>> model = load_induction_model()                 # doctest: +SKIP
        >>> model.cfg.n_layers, model.cfg.n_heads          # doctest: +SKIP
        (2, 2)

    Raises:
        CheckpointError: if the checkpoint is missing, truncated, corrupt or
            does not match its config.
    """
    from interp.training import load_checkpoint

    model, meta = load_checkpoint(path or data_dir() / INDUCTION_CHECKPOINT)
    return (model, meta) if with_meta else model

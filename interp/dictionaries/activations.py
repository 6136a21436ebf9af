"""A hook's activations, read chunk by chunk with the forward stopped after the hook.

Training a dictionary needs only what enters its hook: each pass is cut off there (a hook
that records the activation and raises, so no later block runs and no logits are made),
and the prompts run in chunks planned under the memory budget
(:func:`interp.engine.chunks.plan`) so that any number of them streams through.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> x = hook_activations(model, torch.zeros(2, 5, dtype=torch.long), "blocks.1.hook_resid_pre")
    >>> tuple(x.shape)
    (2, 5, 128)
"""

from __future__ import annotations

from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.runtime import runtime_of


class _Stop(Exception):  # noqa: N818 - control flow, never seen by a caller
    """Raised by the recording hook to end a pass once the hook's activation is read."""


def hook_activations(model: HookedModel, tokens: torch.Tensor, hook: str) -> torch.Tensor:
    """The activation at ``hook`` on ``tokens``, per position flattened over heads.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids.
        hook: a hook name the model has.

    Returns:
        ``[batch, pos, width]`` (a per-head hook's ``[batch, pos, head, d_head]`` as
        ``[batch, pos, head * d_head]``), detached.

    Raises:
        InterpError: a hook that never fires on this model's forward pass.
    """
    box: dict[str, torch.Tensor] = {}

    def record(x: torch.Tensor, hook: Any = None) -> None:
        box["x"] = x.detach()
        raise _Stop

    with torch.no_grad():
        try:
            runtime_of(model).run(tokens, hooks=[(hook, record)])
        except _Stop:
            pass
    if "x" not in box:
        raise InterpError(f"hook {hook!r} did not fire in a forward pass: pick another hook")
    x = box["x"]
    return x.reshape(*x.shape[:2], -1) if x.ndim > 3 else x

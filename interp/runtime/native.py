"""Our attention-only models (:class:`interp.models.attn_only.AttnOnlyTransformer`).

They resume a forward pass themselves: ``forward_from(resid, layer)`` runs the
blocks after ``layer`` on the residual stream ``resid`` (hooks on those blocks
fire as usual), so the state entering block ``l`` is its ``hook_resid_pre``.
They always unembed every position.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.runtime import runtime_of
    >>> model = load_model("induction-2l")
    >>> rt = runtime_of(model)
    >>> tokens = torch.tensor([[0, 5, 6, 7]])
    >>> logits, kept = rt.block_inputs(tokens, {1})
    >>> bool(torch.allclose(rt.run(tokens, start=1, state=kept[1]), logits))
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel
from interp.runtime.base import Hooks, Runtime, repeat_copies


class NativeRuntime(Runtime):
    """Models with ``forward_from`` (module docstring)."""

    kind = "native"
    can_resume = True

    @classmethod
    def matches(cls, model: HookedModel) -> bool:
        return callable(getattr(model, "forward_from", None))

    def run(
        self,
        tokens: torch.Tensor,
        *,
        hooks: Hooks = (),
        rows: Sequence[int] | None = None,
        start: int = 0,
        state: Any = None,
        copies: int = 1,
    ) -> torch.Tensor:
        if start == 0:
            return super().run(tokens, hooks=hooks, copies=copies)
        if not hooks:  # no hook context: entering and leaving one walks every hook point
            return self.model.forward_from(repeat_copies(state, copies), start - 1)
        with self.model.hooks(fwd_hooks=list(hooks)):
            return self.model.forward_from(repeat_copies(state, copies), start - 1)

    def block_inputs(
        self,
        tokens: torch.Tensor,
        layers: set[int] | Sequence[int],
        *,
        rows: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, dict[int, Any]]:
        kept: dict[int, Any] = {}

        def keep(x: torch.Tensor, hook: Any) -> None:
            kept[int(hook.name.split(".")[1])] = x

        hooks = [(hook_name("resid_pre", l), keep) for l in sorted(layers)]
        return self.model.run_with_hooks(tokens, fwd_hooks=hooks), kept

    @property
    def kv_cache(self) -> bool:
        return True

    def extend(
        self,
        tokens: torch.Tensor,
        *,
        attention_mask: torch.Tensor,
        past: Any = None,
        hooks: Hooks = (),
        keep: bool = True,
        last: bool = True,
    ) -> tuple[torch.Tensor, Any]:
        """As :meth:`Runtime.extend`, by the model's own ``decode`` and its
        :class:`~interp.models.kv_cache.KVCache`; a whole unpadded sequence without a cache
        is the model's ordinary forward pass."""
        with self.model.hooks(fwd_hooks=list(hooks)):
            if past is None and not keep and bool(attention_mask.bool().all()):
                logits = self.model(tokens)
                return (logits[:, -1:] if last else logits), None
            return self.model.decode(
                tokens, attention_mask=attention_mask, past=past, keep=keep, last=last
            )

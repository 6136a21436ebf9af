"""A pass's hooks attached to the model's hook points, and removed when it ends.

What TransformerLens's ``model.hooks(fwd_hooks=hooks)`` does (each hook one context level
above the model's, removed at that level), without its per-call work: a
``TransformerBridge`` builds its map of hook aliases anew on every call (about 2 ms on
SmolLM2, a third of a cached generation step's overhead) and a ``HookedTransformer`` walks
every hook point at exit. The runtimes look their hook points up once
(:meth:`interp.runtime.native.NativeRuntime.hooked`,
:meth:`interp.runtime.bridge.BridgeRuntime.hooked`).

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> seen = []
    >>> hook = ("blocks.0.hook_resid_pre", lambda x, hook: seen.append(x.shape))
    >>> with attached(model, model.mod_dict, [hook]):
    ...     _ = model(torch.tensor([[1, 2, 3]]))
    >>> seen, model.mod_dict["blocks.0.hook_resid_pre"].fwd_hooks
    ([torch.Size([1, 3, 128])], [])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from interp.core.protocol import HookedModel

__all__ = ["attached"]


@contextlib.contextmanager
def attached(
    model: HookedModel, points: Mapping[str, Any], hooks: Sequence[tuple[Any, Callable]]
) -> Iterator[None]:
    """``hooks`` on ``points`` (the model's hook points by name) for the duration, each one
    context level above the model's and removed at that level on exit (an exception
    included). A hook given by a name filter, or a name not in ``points``, goes through
    TransformerLens's own context instead.

    Args:
        model: The TransformerLens-hooked model (its ``context_level`` is raised by one).
        points: ``{hook name: HookPoint}``, looked up once by the runtime.
        hooks: ``[(hook name, hook)]``.

    Raises:
        KeyError: as TransformerLens's context, for a name the model does not have.
    """
    if not hooks:
        yield
        return
    if not all(isinstance(name, str) and name in points for name, _ in hooks):
        with model.hooks(fwd_hooks=list(hooks)):
            yield
        return
    model.context_level = getattr(model, "context_level", 0) + 1  # type: ignore[attr-defined]
    level = model.context_level
    added = []
    try:
        for name, hook in hooks:
            point = points[name]
            point.add_hook(hook, dir="fwd", level=level)
            added.append(point)
        yield
    finally:
        for point in added:
            point.remove_hooks("fwd", including_permanent=False, level=level)
        model.context_level -= 1

"""What generation asks of a bridge: Hugging Face's own key/value cache, with hooks that still fire.

A ``TransformerBridge`` replaces the modules of the Hugging Face model it wraps
by its own components (an attention that recomputes scores so that
``hook_pattern`` fires, hook points on every input and output), and the Hugging
Face model then calls them. Two things follow for generation with a cache:

* **The cache reaches every attention.** Hugging Face 5.x hands each attention
  its cache as ``cache=``; the bridge's attention components read
  ``past_key_values=`` (or ``layer_past=``), so without :func:`cache_alias` a
  bridge's attention never stores a key and every cached step attends to itself
  alone (the garbage TransformerLens's own ``generate`` gave on SmolLM2).
* **Only components that carry a hook need to run as components.**
  :func:`unbridged` puts the wrapped Hugging Face module back in place of every
  component whose subtree holds none of the hooks a pass uses, for that pass
  only: a block whose heads are ablated runs as the bridge's block, every other
  block as the model's own layer (a bridge's components cost several times a
  layer's own work in Python on a one-token step). The components stay bridged
  where a hook lives, so the hooks fire with the shapes they have in a full
  pass; the runtime checks once per model that both ways give the model's own
  logits (:meth:`interp.runtime.bridge.BridgeRuntime.kv_cache`).

Positions are counted the way Hugging Face's ``generate`` counts them: a token's
position is the number of real (unmasked) tokens before it, so left padding moves
no real token (:func:`positions_of`).

Example:
    >>> import torch
    >>> positions_of(torch.tensor([[0, 0, 1, 1, 1]]), held=3).tolist()
    [[1, 2]]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from interp.core.precision import tolerance, within, worst
from interp.core.protocol import HookedModel


def positions_of(attention_mask: torch.Tensor, held: int = 0) -> torch.Tensor:
    """``[batch, new]`` positions of the columns after the first ``held``: the count of real
    tokens before each (padding columns get 0, as in Hugging Face's ``generate``)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp(min=0)[:, held:]


def is_component(module: Any) -> bool:
    """Whether ``module`` is a bridge component wrapping a Hugging Face module."""
    return "_original_component" in getattr(module, "_modules", {})


def component_slots(hf_model: Any) -> list[tuple[Any, str, Any, frozenset[int]]]:
    """Every place in the Hugging Face model's tree where a bridge component sits: ``(parent,
    name, component, ids of the hook points that fire only if it runs)``, parents being the
    model's own modules (a component's references to its sub-components are left alone).

    A component's own hook points are those in its subtree but not in the wrapped module's:
    a hook point of a nested component that the wrapped module itself calls (the output
    projection inside an attention: ``hook_z`` is its input) fires whichever of the two runs,
    so a pass with a hook at ``hook_z`` runs the attention as the model's own and only the
    projection as the bridge's."""
    from transformer_lens.hook_points import HookPoint

    def points(module: Any) -> frozenset[int]:
        return frozenset(id(m) for m in module.modules() if isinstance(m, HookPoint))

    slots = []
    for parent in {id(m): m for m in hf_model.modules()}.values():
        if is_component(parent):
            continue
        for name, child in parent._modules.items():
            if child is not None and is_component(child):
                own = points(child) - points(child._modules["_original_component"])
                slots.append((parent, name, child, own))
    return slots


@contextlib.contextmanager
def unbridged(
    slots: Iterable[tuple[Any, str, Any, frozenset[int]]], keep: set[int]
) -> Iterator[None]:
    """Within the block, each component of ``slots`` whose subtree holds none of the hook
    points ``keep`` (ids) is replaced in its parent by the Hugging Face module it wraps; every
    one is put back on exit (an exception included)."""
    swapped = []
    try:
        for parent, name, child, hooks in slots:
            if hooks.isdisjoint(keep):
                parent._modules[name] = child._modules["_original_component"]
                swapped.append((parent, name, child))
        yield
    finally:
        for parent, name, child in reversed(swapped):
            parent._modules[name] = child


def _alias(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    if kwargs.get("cache") is not None and kwargs.get("past_key_values") is None:
        if "layer_past" not in kwargs:
            return args, {**kwargs, "past_key_values": kwargs["cache"]}
    return None


def attentions(model: HookedModel) -> list[Any]:
    """The bridge's attention components that store keys and values themselves."""
    return [m for m in model.modules() if callable(getattr(m, "_update_kv_cache", None))]


@contextlib.contextmanager
def cache_alias(modules: Iterable[Any]) -> Iterator[None]:
    """Within the block, each of ``modules`` (:func:`attentions`), which store keys under
    ``past_key_values``, also receives the cache Hugging Face passes as ``cache=`` (module
    docstring)."""
    handles = [m.register_forward_pre_hook(_alias, with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def check_decoding(rt: Any, extend: Callable[..., Any]) -> str:
    """How a bridge's cached passes run, checked against a whole pass on a fixed probe (a
    prompt of 4 tokens, then two cached steps; logits to 1e-4 relative), with a hook at every
    block's ``hook_z`` and with none (:meth:`interp.runtime.bridge.BridgeRuntime.decoding`).

    Args:
        rt: The bridge's runtime.
        extend: Its pass (``BridgeRuntime._extend``).

    Returns:
        ``"unbridged"`` (components without a hook run as the wrapped modules),
        ``"bridged"`` (every component runs) or ``"none"`` (no cache: every pass whole).
    """
    vocab = int(rt.cfg.d_vocab)
    device = rt.head_device()
    probe = torch.randint(0, vocab, (1, 6), generator=torch.Generator().manual_seed(0))
    probe, mask = probe.to(device), torch.ones(1, 6, dtype=torch.long, device=device)
    with torch.no_grad():
        whole, _ = extend(probe, mask, None, (), False, False, False)
        scale = max(1.0, float(whole.abs().max()))
        tol = tolerance(whole.dtype, scale, float32=1e-4)
        names = [f"blocks.{l}.attn.hook_z" for l in range(rt.n_layers)]
        every = [(n, _same) for n in names if n in rt.hook_points()]

        def agrees(hooks: Sequence[tuple[str, Callable]], swap: bool) -> bool:
            got, past = extend(probe[:, :4], mask[:, :4], None, hooks, True, True, swap)
            rows = [got[:, -1]]
            for j in (4, 5):
                got, past = extend(
                    probe[:, j : j + 1], mask[:, : j + 1], past, hooks, True, True, swap
                )
                rows.append(got[:, -1])
            gap = worst(float((r - whole[:, j]).abs().max()) for r, j in zip(rows, (3, 4, 5)))
            return within(gap, tol)  # NaN is a failure

        if agrees(every, True) and agrees((), True):  # hooked blocks bridged, the rest not
            return "unbridged"
        return "bridged" if agrees(every, False) else "none"


def _same(x: torch.Tensor, hook: Any) -> torch.Tensor:
    return x

"""The batched engine behind head ablations and activation patching.

A sweep evaluates a metric under many *edits*, each edit replacing some heads'
``hook_z`` (``[batch, pos, head, d_head]``) by zero or by a given tensor. It is
exact (every edit sees the forward pass it would see alone, up to float
rounding) and fast by construction.

Single-layer edits (one head, as in a head sweep, or heads of one layer) use a
*growing batch*: one forward pass carries the unedited batch through every
layer, and at layer ``l`` the copies for that layer's edits join it. A head's
output enters the residual stream only as ``z_h @ W_O[l, h]``, so an edited copy
starts as the residual after layer ``l``'s attention (``hook_resid_mid``; after
the block on attention-only models) plus ``(z_new - z_h) @ W_O[l, h]``. Layers
before ``l``, and layer ``l``'s attention itself, are never recomputed for it:
each edit costs only the layers after it. The linearity this relies on is
checked once per model against a plain hooked run; if it fails (an
architecture that normalises attention output, say), or an edit spans several
layers, edits are packed ``k`` at a time and replicated at the earliest
edited layer's ``hook_resid_pre`` instead, with ``hook_z`` edited per copy.

Models that can resume a forward pass from a residual stream (our
``AttnOnlyTransformer.forward_from``) skip the growing batch: one hooked clean
pass keeps each edited layer's ``hook_z`` and ``hook_resid_post``, and each
edit runs only the blocks after its layer, at the original batch size. On
CPUs a grown batch falls out of the caches and costs more per copy than
these small separate runs.

Hugging Face attention with a per-sequence mask cannot change batch size
mid-forward; such models are swept one sequence at a time (copies of one
sequence broadcast against its mask), which keeps everything exact.

``k`` (edits per forward) fits a memory budget (default: a quarter of the
available RAM), or is given as ``batch_size``. Both apply to the batched
paths; the resume path needs neither, since it runs one edit at a time at the
original batch size and keeps only one layer's ``z`` and residual per edited layer.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from interp.errors import InterpError
from interp.hooks import hook_name

Heads = Sequence[tuple[int, int]]
# Per model, the outcome of each one-time capability check (by check name).
_CHECKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
MAX_EDITS_PER_PASS = 32


def available_memory() -> int:
    """Available physical memory in bytes (falls back to 4 GiB if unknown)."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 4 << 30


def bytes_per_copy(model: Any, tokens: torch.Tensor) -> int:
    """Rough peak activation bytes of one forward copy of ``tokens`` (no grad).

    Counts the logits (kept for the metric), a few residual-width tensors, the
    MLP hidden layer and the attention scores and pattern of one layer.
    """
    cfg = model.cfg
    b, n = tokens.shape
    d_mlp = int(getattr(cfg, "d_mlp", 0) or 0) if not getattr(cfg, "attn_only", False) else 0
    per_pos = int(cfg.d_vocab) + 8 * int(cfg.d_model) + 2 * d_mlp + 3 * int(cfg.n_heads) * n
    return 4 * b * n * per_pos


def _checked(model: Any, name: str, check: Callable[[], bool]) -> bool:
    """Run ``check()`` once per live model and remember its answer (weakly keyed)."""
    try:
        cached = _CHECKS.setdefault(model, {})
    except TypeError:  # pragma: no cover - model not weak-referenceable
        return check()
    if name not in cached:
        cached[name] = check()
    return cached[name]


def _expand_supported(model: Any, tokens: torch.Tensor) -> bool:
    """Can this model's forward continue with a larger batch from a hook? (cached per model)"""
    return _checked(model, "expand", lambda: _probe_expand(model, tokens))


def _probe_expand(model: Any, tokens: torch.Tensor) -> bool:
    probe = tokens[:2, : min(tokens.shape[1], 4)]
    if probe.shape[0] < 2:
        probe = probe.repeat(2, 1)
    name = hook_name("resid_pre", model.cfg.n_layers - 1)
    try:
        with torch.no_grad():
            ref = model(probe)
            out = model.run_with_hooks(probe, fwd_hooks=[(name, lambda x, hook: x.repeat(2, 1, 1))])
        ok = tuple(out.shape[:1]) == (4,) and torch.allclose(out[2:], ref, atol=1e-5, rtol=1e-4)
    except Exception:  # noqa: BLE001 - any failure means "not supported"
        ok = False
    return ok


def _chunk_size(model, tokens, n_edits, batch_size, memory_budget) -> int:
    if batch_size is not None:
        if batch_size < 1:
            raise InterpError(f"batch_size must be >= 1, got {batch_size}")
        return min(batch_size, n_edits)
    budget = available_memory() // 4 if memory_budget is None else int(memory_budget)
    if budget <= 0:
        raise InterpError(f"memory_budget must be positive, got {memory_budget}")
    # Beyond a few dozen copies per pass the activations outgrow the CPU caches and a pass
    # costs more per copy, so the default also caps the pack size.
    return max(1, min(n_edits, MAX_EDITS_PER_PASS, budget // max(1, bytes_per_copy(model, tokens))))


def _inject_name(model: Any, layer: int) -> str:
    return hook_name("resid_post" if getattr(model.cfg, "attn_only", False) else "resid_mid", layer)


def _run_growing(model, tokens, chunk_edits, replacement, positions, w_o) -> torch.Tensor:
    """One forward: the unedited batch plus, per layer, that layer's edited copies.

    Returns logits ``[k, batch, pos, vocab]`` for the ``k`` single-layer edits.
    """
    b = tokens.shape[0]
    by_layer: dict[int, list[int]] = {}
    for i, e in enumerate(chunk_edits):
        by_layer.setdefault(e[0][0], []).append(i)
    slots: dict[int, int] = {}  # edit index -> copy slot in the final batch (after the clean one)
    clean_z: dict[int, torch.Tensor] = {}
    pos_m = None if positions is None else positions.view(1, -1, 1, 1)

    def z_hook(layer):
        def hook(z: torch.Tensor, hook: Any) -> None:
            clean_z[layer] = z[:b]  # the unedited copy is always the first b rows

        return hook

    def inject(layer):
        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor:
            z = clean_z.pop(layer)  # [b, pos, head, d_head]
            W = w_o[layer].to(z.dtype)  # [head, d_head, d_model]
            new = []
            for i in by_layer[layer]:
                delta = _edit_delta(z, chunk_edits[i], replacement, pos_m, W)
                slots[i] = (x.shape[0] + b * len(new)) // b - 1
                new.append(x[:b] + delta.to(x.dtype))
            return torch.cat([x, *new], dim=0)

        return hook

    hooks = []
    for layer in sorted(by_layer):
        hooks.append((hook_name("z", layer), z_hook(layer)))
        hooks.append((_inject_name(model, layer), inject(layer)))
    logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
    copies = logits.view(-1, b, *logits.shape[1:])
    return copies[0], torch.stack([copies[1:][slots[i]] for i in range(len(chunk_edits))])


def _edit_delta(z, edit, replacement, pos_m, W) -> torch.Tensor:
    """``[b, pos, d_model]``: what replacing ``edit``'s heads' ``z`` adds to the residual."""
    layer = edit[0][0]
    hs = [h for _, h in edit]
    target = (
        torch.zeros_like(z[:, :, hs])
        if replacement is None
        else replacement[layer][:, :, hs].to(z.dtype)
    )
    diff = target - z[:, :, hs]  # [b, pos, n_edit_heads, d_head]
    if pos_m is not None:
        diff = diff * pos_m
    return torch.einsum("bphe,hed->bpd", diff, W[hs].to(z.dtype))


def _run_resume(model, tokens, edits, replacement, positions, w_o, on_edit) -> torch.Tensor:
    """Clean pass once, then each single-layer edit resumed after its layer (``forward_from``).

    One hooked forward keeps, for each edited layer, ``hook_z`` and the residual
    after the block; each edit then runs only the later blocks, at the
    original batch size (small tensors stay in cache, unlike a grown batch).
    ``on_edit(i, logits)`` receives each edit's logits ``[batch, pos, vocab]``.
    Returns the clean logits.
    """
    layers = sorted({e[0][0] for e in edits})
    kept: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, hook: Any) -> None:
        kept[hook.name] = x

    hooks = [(n, keep) for l in layers for n in (hook_name("z", l), hook_name("resid_post", l))]
    clean = model.run_with_hooks(tokens, fwd_hooks=hooks)
    pos_m = None if positions is None else positions.view(1, -1, 1, 1)
    for i, e in enumerate(edits):
        layer = e[0][0]
        z, resid = kept[hook_name("z", layer)], kept[hook_name("resid_post", layer)]
        delta = _edit_delta(z, e, replacement, pos_m, w_o[layer])
        on_edit(i, model.forward_from(resid + delta.to(resid.dtype), layer))
    return clean


def _resume_supported(model: Any, tokens: torch.Tensor) -> bool:
    """Does ``forward_from`` after a linear injection equal a hooked run? (checked once)"""
    if not (callable(getattr(model, "forward_from", None)) and getattr(model.cfg, "attn_only", 0)):
        return False
    return _checked(model, "resume", lambda: _probe_resume(model, tokens))


def _probe_resume(model: Any, tokens: torch.Tensor) -> bool:
    layer = 0
    probe = tokens[:1, : min(tokens.shape[1], 6)]
    got: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            w_o = {layer: model.W_O[layer].detach()}
            _run_resume(model, probe, [[(layer, 0)]], None, None, w_o, lambda i, x: got.append(x))

            def zero(z, hook):
                z = z.clone()
                z[:, :, 0] = 0.0
                return z

            ref = model.run_with_hooks(probe, fwd_hooks=[(hook_name("z", layer), zero)])
        return torch.allclose(got[0], ref, atol=1e-4, rtol=1e-4)
    except Exception:  # noqa: BLE001 - any failure means "use another path"
        return False


def _growing_supported(model: Any, tokens: torch.Tensor) -> bool:
    """Is the growing-batch path exact on this model? Checked once against a hooked run."""
    return _checked(model, "grow", lambda: _probe_growing(model, tokens))


def _probe_growing(model: Any, tokens: torch.Tensor) -> bool:
    ok = False
    names = set(getattr(model, "hook_dict", {}) or {})
    layer = model.cfg.n_layers - 1
    if _inject_name(model, layer) in names and hook_name("z", layer) in names:
        probe = tokens[:1, : min(tokens.shape[1], 6)]
        try:
            with torch.no_grad():
                w_o = {layer: model.W_O[layer].detach()}
                got = _run_growing(model, probe, [[(layer, 0)]], None, None, w_o)[1][0]

                def zero(z, hook):
                    z = z.clone()
                    z[:, :, 0] = 0.0
                    return z

                ref = model.run_with_hooks(probe, fwd_hooks=[(hook_name("z", layer), zero)])
            ok = torch.allclose(got, ref, atol=1e-4, rtol=1e-4)
        except Exception:  # noqa: BLE001 - any failure means "use the general path"
            ok = False
    return ok


def sweep(
    model: Any,
    tokens: torch.Tensor,
    edits: Sequence[Heads],
    metric: Callable[[torch.Tensor, torch.Tensor], Any],
    *,
    replacement: dict[int, torch.Tensor] | None = None,
    positions: torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
    desc: str = "sweep",
    return_clean: bool = False,
) -> list[Any] | tuple[list[Any], Any]:
    """Metric values, one per edit, in the order given (and the unedited run's, if asked).

    ``replacement[layer]`` (``[batch, pos, head, d_head]``) is spliced in for the
    edited heads of that layer; missing layers are zeroed. ``positions`` (a
    ``[pos]`` bool mask) restricts the edit to those positions. The caller
    runs this in eval mode under no_grad.

    Raises:
        InterpError: for an empty edit list or a bad batch size or budget.
    """
    from tqdm.auto import tqdm

    if not edits:
        raise InterpError("nothing to sweep: no edits given")
    if _expand_supported(model, tokens):
        groups = [(tokens, replacement)]
    else:  # one sequence at a time, so per-sequence masks still broadcast
        groups = [
            (
                tokens[b : b + 1],
                None if replacement is None else {l: r[b : b + 1] for l, r in replacement.items()},
            )
            for b in range(tokens.shape[0])
        ]
    single = all(len({l for l, _ in e}) == 1 for e in edits)
    if single and _resume_supported(model, tokens):
        return _sweep_resume(
            model, tokens, edits, metric, replacement, positions, progress, desc, return_clean
        )
    grow = single and _growing_supported(model, groups[0][0])
    w_o = {l: model.W_O[l].detach() for l in {e[0][0] for e in edits}} if grow else None
    k = _chunk_size(model, tokens, len(edits), batch_size, memory_budget)
    order = sorted(range(len(edits)), key=lambda i: min(l for l, _ in edits[i]))
    chunks = [order[i : i + k] for i in range(0, len(order), k)]
    values: dict[int, Any] = {}
    clean = None
    bar = tqdm(total=len(chunks) * len(groups), disable=not progress, desc=desc, unit="pass")
    try:
        for chunk in chunks:
            cleans, parts = [], []  # per group: [group batch, ...] and [k, group batch, ...]
            chunk_edits = [edits[i] for i in chunk]
            for toks, repl in groups:
                c, p = (
                    _run_growing(model, toks, chunk_edits, repl, positions, w_o)
                    if grow
                    else _run_chunk(model, toks, chunk_edits, repl, positions)
                )
                cleans.append(c)
                parts.append(p)
                bar.update(1)
            if clean is None:  # every pass carries the unedited batch; score it once
                clean = metric(torch.cat(cleans, dim=0), tokens)
            logits = torch.cat(parts, dim=1)  # [k, batch, pos, vocab]
            for j, i in enumerate(chunk):
                values[i] = metric(logits[j], tokens)
            del parts, cleans, logits
    finally:
        bar.close()
    out = [values[i] for i in range(len(edits))]
    return (out, clean) if return_clean else out


def _sweep_resume(model, tokens, edits, metric, replacement, positions, progress, desc, with_clean):
    """:func:`sweep` on models with ``forward_from``: see :func:`_run_resume`."""
    from tqdm.auto import tqdm

    w_o = {l: model.W_O[l].detach() for l in {e[0][0] for e in edits}}
    values: list[Any] = [None] * len(edits)
    with tqdm(total=len(edits), disable=not progress, desc=desc, unit="edit") as bar:

        def on_edit(i: int, logits: torch.Tensor) -> None:
            values[i] = metric(logits, tokens)
            bar.update(1)

        clean = metric(
            _run_resume(model, tokens, edits, replacement, positions, w_o, on_edit), tokens
        )
    return (values, clean) if with_clean else values


def _run_chunk(model, tokens, chunk_edits, replacement, positions) -> torch.Tensor:
    """General path: a growing batch with ``hook_z`` edited per copy.

    The unedited batch runs through every layer; an edit's copy joins at the
    ``hook_resid_pre`` of its earliest layer (a copy of the unedited residual
    there) and has its heads' ``z`` replaced at each edited layer. Returns
    logits ``[k, batch, pos, vocab]``.
    """
    b = tokens.shape[0]
    joins: dict[int, list[int]] = {}
    for i, e in enumerate(chunk_edits):
        joins.setdefault(min(l for l, _ in e), []).append(i)
    slot: dict[int, int] = {}  # edit -> copy index (the unedited batch is copy 0)
    pos_m = None if positions is None else positions.view(1, -1, 1, 1)

    def join(layer):
        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor:
            new = joins[layer]
            for i in new:
                slot[i] = len(slot) + 1
            return torch.cat([x, x[:b].repeat(len(new), *([1] * (x.ndim - 1)))], dim=0)

        return hook

    def edit_z(layer):
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            z = z.clone()
            for i, e in enumerate(chunk_edits):
                hs = [h for l, h in e if l == layer]
                if not hs or i not in slot:
                    continue
                rows = slice(slot[i] * b, (slot[i] + 1) * b)
                cur = z[rows][:, :, hs]
                target = (
                    torch.zeros_like(cur)
                    if replacement is None
                    else replacement[layer][:, :, hs].to(z.dtype)
                )
                z[rows, :, hs] = target if pos_m is None else torch.where(pos_m, target, cur)
            return z

        return hook

    hooks = [(hook_name("resid_pre", l), join(l)) for l in sorted(joins)]
    hooks += [
        (hook_name("z", l), edit_z(l)) for l in sorted({l for e in chunk_edits for l, _ in e})
    ]
    logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
    copies = logits.view(-1, b, *logits.shape[1:])
    return copies[0], torch.stack([copies[slot[i]] for i in range(len(chunk_edits))])

"""A dictionary spliced into a model at its hook, with its error term kept as a node.

At the dictionary's hook the activation ``x`` is replaced by

``x' = decode(encode(x)) + error``,  ``error = x - decode(encode(x))``

so the model computes what it did (to float rounding), but through the dictionary's
features: an edit of the feature activations (``edit_acts``) moves ``x'`` by the decoder
rows it changes, and an edit of the error (``edit_error``; ``keep_error=False`` drops it)
shows what the features alone carry. The error is computed from the unedited
activations, as sae-lens' ``use_error_term`` does, and :class:`Splice` keeps the last pass's
feature activations and error for the caller to read.

A hook whose activation is per head (``hook_z``, ``hook_q`` ...: ``[batch, pos, head,
d_head]``) is read as the heads' concatenation, ``[batch, pos, head * d_head]`` (sae-lens'
``reshape_activations: hook_z``).

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=model.cfg.d_model, d_sae=64, architecture="topk", k=4,
    ...                       hook_name="blocks.1.hook_resid_pre")
    >>> g = torch.Generator().manual_seed(0)
    >>> tokens = torch.randint(0, model.cfg.d_vocab, (2, 12), generator=g)
    >>> s = Splice(model, D)
    >>> out = model.run_with_hooks(tokens, fwd_hooks=s.hooks)
    >>> bool((out - model(tokens)).abs().max() < 1e-5), tuple(s.acts.shape)
    (True, (2, 12, 64))
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, hook_names, model_cfg, model_device
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.inputs import check_finite_weight
from interp.runtime import runtime_of

Edit = Callable[[torch.Tensor], torch.Tensor]
CHANGED = (
    "its weights were changed since it was made or loaded (a diverged training step, an "
    "edit), and every score through it would be NaN: reload or retrain it"
)


def hook_width(model: HookedModel, hook: str) -> int:
    """The width a dictionary at ``hook`` reads: the last axis, or heads x d_head per head.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        hook: a hook name the model has.

    Returns:
        The number of values per position.
    """
    shape = runtime_of(model).activation_shape(hook, 1)
    if hook.rsplit(".", 1)[-1] in ("hook_pattern", "hook_attn_scores"):
        return int(shape[0])  # a dictionary does not read patterns; check_dictionary refuses
    return int(math.prod(shape[1:]))


def check_hook(
    model: HookedModel,
    hook: Any,
    *,
    fix: str = "the dictionary was made for another model, or set D.hook_name",
) -> str:
    """Refuse a hook a dictionary cannot sit at: one the model lacks, or a pattern.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        hook: the hook name.
        fix: what the message tells the caller to do about a hook the model lacks.

    Returns:
        ``hook``.

    Raises:
        InterpError: not a hook of the model, or one that holds attention patterns.
    """
    model_cfg(model)
    names = hook_names(model)
    if not isinstance(hook, str) or hook not in names:
        leaf = str(hook).rsplit(".", 1)[-1]
        near = sorted(n for n in names if n.endswith(leaf))[:3] or sorted(names)[:3]
        raise InterpError(
            f"hook {hook!r} is not a hook of this model (e.g. {', '.join(near)}): {fix}"
        )
    if hook.rsplit(".", 1)[-1] in ("hook_pattern", "hook_attn_scores"):
        raise InterpError(
            f"hook {hook!r} holds attention patterns: a dictionary reads a "
            "residual, MLP or per-head vector hook"
        )
    return hook


def check_dictionary(model: HookedModel, D: Any) -> Dictionary:
    """Refuse a dictionary that cannot sit in ``model``: a hook it lacks, another width.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        D: the dictionary.

    Returns:
        ``D``.

    Raises:
        InterpError: no model, not a :class:`Dictionary`, no hook name, a hook the model
            does not have or that holds attention patterns, a ``d_in`` other than the hook's
            width, tensors on another device than the model's, or a tensor holding NaN
            or infinite values (set after the dictionary was made: every score through it
            would be NaN).
    """
    model_cfg(model)
    if not isinstance(D, Dictionary):
        raise InterpError(
            f"expected a Dictionary, got {type(D).__name__}: load one with "
            "interp.dictionaries.load_dictionary(path)"
        )
    if not D.hook_name:
        raise InterpError(
            "the dictionary names no hook: set D.hook_name (e.g. 'blocks.1.hook_resid_pre') or "
            "pass hook_name= to load_dictionary"
        )
    check_hook(model, D.hook_name)
    width = hook_width(model, D.hook_name)
    if D.d_in != width:
        raise InterpError(
            f"d_in is {D.d_in}, but hook {D.hook_name!r} of this model is {width} wide: the "
            "dictionary was made for another model or hook"
        )
    if D.device != model_device(model):
        raise InterpError(
            f"the dictionary is on {D.device} and the model on {model_device(model)}: "
            "move it with D.to(device)"
        )
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold"):
        t = getattr(D, name)
        if t is not None:
            check_finite_weight(t, f"the dictionary's {name}", fix=CHANGED)
    return D


class Splice:
    """Hooks that splice a dictionary at its hook, its error kept as a node of its own.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        D: the dictionary (checked by :func:`check_dictionary`).
        keep_error: add the error term back (the model then computes what it did).
        edit_acts: ``acts -> acts``, applied to the feature activations before decoding.
        edit_error: ``error -> error``, applied to the error before it is added back.

    Attributes:
        hooks: ``[(hook_name, fn)]`` for ``run_with_hooks(fwd_hooks=...)``.
        acts: the last pass's feature activations ``[batch, pos, d_sae]`` (edited).
        error: the last pass's error ``[batch, pos, d_in]``, before ``edit_error``.

    Raises:
        InterpError: as :func:`check_dictionary`; an edit that changes a shape or dtype, or
            returns NaN or infinity; a splice whose output is NaN or infinite where the
            model's activation is finite (the dictionary overflows), during the pass.
    """

    def __init__(
        self,
        model: HookedModel,
        D: Dictionary,
        *,
        keep_error: bool = True,
        edit_acts: Edit | None = None,
        edit_error: Edit | None = None,
    ) -> None:
        self.D = check_dictionary(model, D)
        self.keep_error = bool(keep_error)
        self.edit_acts, self.edit_error = edit_acts, edit_error
        self.acts: torch.Tensor | None = None
        self.error: torch.Tensor | None = None
        self.hooks = [(D.hook_name, self._hook)]

    def _hook(self, x: torch.Tensor, hook: Any = None) -> torch.Tensor:
        D = self.D
        flat = x.reshape(*x.shape[:2], -1) if x.ndim > 3 else x
        if flat.shape[-1] != D.d_in:
            raise InterpError(
                f"hook {D.hook_name!r} gave activations of shape {tuple(x.shape)}, but the "
                f"dictionary reads {D.d_in} values per position"
            )
        acts = D.encode(flat)
        recon = D.decode(acts)
        error = flat.to(D.dtype) - recon
        if self.edit_acts is not None:
            acts = _edited(self.edit_acts, acts, "edit_acts")
            recon = D.decode(acts)
        self.acts, self.error = acts, error
        out = recon
        if self.keep_error:
            out = recon + (
                error if self.edit_error is None else _edited(self.edit_error, error, "edit_error")
            )
        out = out.to(x.dtype).reshape(x.shape)
        bad = ~torch.isfinite(out) & torch.isfinite(x)
        if bool(bad.any()):  # finite weights whose products overflow: never NaN logits
            raise InterpError(
                f"the splice at {D.hook_name!r} gives {int(bad.sum())} NaN or infinite "
                f"value(s) where the model's activation is finite: the dictionary's encoder or "
                f"decoder overflows {out.dtype} on these activations; check its weights' scale"
            )
        return out


def _edited(fn: Edit, t: torch.Tensor, what: str) -> torch.Tensor:
    """``fn(t)``, checked: a tensor of ``t``'s shape and dtype, finite where ``t`` is."""
    new = fn(t)
    if not isinstance(new, torch.Tensor) or new.shape != t.shape:
        got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
        raise InterpError(
            f"{what} returned {got}; it must return a tensor of shape {tuple(t.shape)}"
        )
    if new.dtype != t.dtype:
        raise InterpError(
            f"{what} returned dtype {new.dtype}; it must return {t.dtype}, the dtype it was "
            "given (.to(t.dtype))"
        )
    bad = ~torch.isfinite(new) & torch.isfinite(t)
    if bool(bad.any()):
        raise InterpError(
            f"{what} returned {int(bad.sum())} NaN or infinite value(s) (of {new.numel()}) "
            "where it was given finite ones: every logit after the splice would be NaN; "
            "return finite values"
        )
    return new


@contextlib.contextmanager
def spliced(
    model: HookedModel,
    D: Dictionary,
    *,
    keep_error: bool = True,
    edit_acts: Edit | None = None,
    edit_error: Edit | None = None,
) -> Iterator[Splice]:
    """Every forward pass of ``model`` inside the block runs with ``D`` spliced in.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        D: the dictionary.
        keep_error: add the error term back.
        edit_acts: ``acts -> acts``, applied before decoding.
        edit_error: ``error -> error``, applied before it is added back.

    Yields:
        The :class:`Splice` (its ``acts`` and ``error`` are the last pass's).

    Raises:
        InterpError: as :func:`check_dictionary`; in a pass, an edit that changes a shape
            or dtype or returns NaN or infinity, or a splice that overflows (as
            :class:`Splice`).

    Example:
        >>> from interp.models import load_model
        >>> model = load_model("induction-2l")
        >>> D = Dictionary.random(d_in=128, d_sae=8, hook_name="blocks.1.hook_resid_pre")
        >>> with spliced(model, D, keep_error=False) as s:
        ...     logits = model(torch.zeros(1, 4, dtype=torch.long))
        >>> tuple(s.acts.shape)
        (1, 4, 8)
    """
    s = Splice(model, D, keep_error=keep_error, edit_acts=edit_acts, edit_error=edit_error)
    with model.hooks(fwd_hooks=s.hooks):
        yield s

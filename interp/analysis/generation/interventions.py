"""Edits during generation, applied the same way to the prompt and to every new token.

An intervention is a description (a small frozen dataclass) that becomes hooks
for each forward pass of a generation. A pass computes some columns of the
sequence (:class:`Window`): the whole prompt on the first pass with a key/value
cache, then one new column per pass; every column on each pass without a cache.
Each edit is a function of a column's own activation and of *where* the column
is (``positions``), never of the columns a pass happens to compute, so the
cached generation and a loop of whole forward passes with the same hooks apply
the same edit to every column; and because the cache stores the keys and values
computed from edited activations, every later token reads the edited prompt.

``positions`` says where an edit applies: ``"prompt"`` (the prompt's columns),
``"new"`` (the generated ones), ``"all"`` (both), or ints (columns of the
prompt, negative from its end: with left padding every prompt ends in the same
column, so ``-1`` is each prompt's last token).

* :class:`Steering`: add ``scale * vector`` to the activation at ``hook``;
* :class:`UserHook`: your own ``fn(activation, hook)``, its result kept at
  ``positions``; the cached and uncached loops agree when ``fn`` treats each
  column on its own (query rows, for ``hook_pattern``);
* :class:`~interp.analysis.generation.head_edits.HeadAblation` and
  :class:`~interp.analysis.generation.head_edits.Patch` (heads removed, or an
  activation copied from another run) read another run before generation starts.

Example:
    >>> import torch
    >>> w = Window(start=3, stop=5, prompt=4, pads=torch.tensor([0]), rows=torch.tensor([0]))
    >>> [w.selected(p).tolist() for p in ("prompt", "new", [-1])]
    [[True, False], [False, True], [True, False]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from interp.core.checks import check_finite, check_int
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, hook_names
from interp.runtime import runtime_of

Positions = Literal["prompt", "new", "all"] | Sequence[int]
POSITION_WORDS = ("prompt", "new", "all")
# Hooks with a key axis that grows as tokens are generated: no fixed-width vector fits them.
KEYED = ("hook_pattern", "hook_attn_scores")


@dataclasses.dataclass(frozen=True)
class Window:
    """The columns ``start .. stop - 1`` one pass computes; the first ``prompt`` columns of the
    sequence are the prompts', ``pads`` ``[batch]`` of them padding; ``rows`` ``[batch]`` are
    the prompts' indices in the whole batch (a chunk's rows)."""

    start: int
    stop: int
    prompt: int
    pads: torch.Tensor
    rows: torch.Tensor

    def columns(self) -> torch.Tensor:
        return torch.arange(self.start, self.stop)

    def selected(self, positions: Positions) -> torch.Tensor:
        """``[stop - start]`` bool: the columns ``positions`` names."""
        cols = self.columns()
        if positions == "all":
            return torch.ones_like(cols, dtype=torch.bool)
        if positions == "prompt":
            return cols < self.prompt
        if positions == "new":
            return cols >= self.prompt
        wanted = torch.tensor(sorted({int(p) % self.prompt for p in positions}))
        return torch.isin(cols, wanted)

    def position_ids(self) -> torch.Tensor:
        """``[batch, stop - start]``: each column's position in its own prompt (real tokens
        before it; padding columns 0)."""
        return (self.columns()[None, :] - self.pads.cpu()[:, None]).clamp(min=0)


Hooks = list[tuple[str, Callable]]


class Intervention:
    """An edit a generation applies (module docstring): checked, then bound, then hooks.

    Attributes:
        positions: Where an intervention *edits*: ``'prompt'``, ``'new'``, ``'all'`` or ints
            of the prompt's columns (negative from its end).
        ablation: What replaces an activation, for tables' ``attrs`` (``None``: not an
            ablation).
    """

    positions: Any = "all"
    ablation: str | None = None

    def check(self, model: HookedModel, prompts: Any) -> None:
        """Refuse a bad edit before any work.

        Args:
            model: A hooked model: the one the generation runs.
            prompts: The generation's left-padded batch
                (:class:`~interp.analysis.generation.prompts.Prompts`).

        Raises:
            InterpError: for positions, hooks, heads or values that do not fit the model or
                the prompts.
        """
        check_positions(self.positions, prompts.length)

    def describe(self) -> str:
        """The edit in a few words, for tables and pages.

        Returns:
            A phrase such as ``"zero-ablate L1H1 (all positions)"``.

        Raises:
            NotImplementedError: on the base class.
        """
        raise NotImplementedError

    def bind(self, model: HookedModel, prompts: Any, n_new: int, **context: Any) -> Any:
        """What the edit's hooks need, from passes before generation (none by default).

        Args:
            model: A hooked model: the one the generation runs.
            prompts: The generation's left-padded batch.
            n_new: The most tokens each prompt gets.
            **context: ``cache`` (the prompts' checked cache, or None) and ``chunks`` (the
                generation's chunks of prompts, for the passes it runs).

        Returns:
            An object with ``hooks(window)``.
        """
        return self

    def passes(self, prompts: Any, *, cache: Any = None) -> float:
        """Forward passes over the prompts that :meth:`bind` runs (for the estimate).

        Args:
            prompts: The generation's left-padded batch.
            cache: The prompts' cache, checked (it is read only after its earliest
                token-dependent activation is recomputed on them and matches), which a mean
                or resample ablation reads instead of a pass (None: none).

        Returns:
            Forward-equivalents, in passes over the prompts.
        """
        return 0.0

    def work(self, model: HookedModel, prompts: Any, *, cache: Any = None) -> float:
        """The FLOPs of the passes :meth:`bind` runs, over one plain pass of the prompts.

        Counted by :mod:`interp.engine.cost`: :meth:`passes` whole passes unless an edit
        counts its own (a pass stopped at the hooks it reads).

        Args:
            model: A hooked model: the one the generation runs.
            prompts: The generation's left-padded batch.
            cache: The prompts' cache, checked (it is read only after its earliest
                token-dependent activation is recomputed on them and matches), which a mean
                or resample ablation reads instead of a pass (None: none).

        Returns:
            Forward-equivalents, in plain passes over the prompts.
        """
        return self.passes(prompts, cache=cache)

    def hooks(self, window: Window) -> Hooks:
        """The ``(hook name, function)`` pairs of one pass.

        Args:
            window: The columns the pass computes (:class:`Window`).

        Returns:
            The hooks to run with the pass (none where the edit does not apply there).

        Raises:
            NotImplementedError: on the base class.
        """
        raise NotImplementedError


def check_positions(positions: Any, prompt_length: int) -> None:
    """``positions`` of an intervention (module docstring).

    Raises:
        InterpError: for anything but the three words or ints inside the prompt.
    """
    if isinstance(positions, str):
        if positions not in POSITION_WORDS:
            raise InterpError(
                f"positions {positions!r} is not one of {', '.join(POSITION_WORDS)} (or ints of "
                "the prompt's columns, negative from its end)"
            )
        return
    if isinstance(positions, torch.Tensor):
        positions = positions.reshape(-1).tolist()
    if not isinstance(positions, Sequence) or not positions:
        raise InterpError(
            "positions must be 'prompt', 'new', 'all' or a non-empty list of ints, got "
            f"{positions!r}"
        )
    for p in positions:
        i = check_int(p, "each position")
        if not -prompt_length <= i < prompt_length:
            raise InterpError(
                f"position {i} is outside the prompt's {prompt_length} columns "
                f"(0..{prompt_length - 1}, or -{prompt_length}..-1 from its end); use "
                "positions='new' for generated tokens"
            )


def check_hook(model: HookedModel, name: Any, *, what: str) -> str:
    """A hook name the model has.

    Raises:
        InterpError: for a name the model lacks (the message lists a few of the ones it has).
    """
    names = hook_names(model)
    if not isinstance(name, str) or name not in names:
        near = (
            sorted(n for n in names if str(name).rsplit(".", 1)[-1] in n)[:3] or sorted(names)[:3]
        )
        raise InterpError(
            f"{what} hook {name!r} is not a hook of this model (e.g. {', '.join(near)})"
        )
    return name


def position_axis(name: str) -> int:
    """The axis of a hook's activation that holds the columns (queries, for patterns)."""
    return 2 if name.rsplit(".", 1)[-1] in KEYED else 1


def along(sel: torch.Tensor, ndim: int, axis: int, device: Any) -> torch.Tensor:
    """``sel`` ``[n]`` shaped to broadcast along ``axis`` of an ``ndim``-dimensional tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return sel.to(device).view(shape)


@dataclasses.dataclass(frozen=True)
class Steering(Intervention):
    """Add ``scale * vector`` to the activation at ``hook``, at ``positions``.

    Args:
        hook: A hook name with a position axis: a residual stream such as
            ``blocks.3.hook_resid_pre`` takes a ``[d_model]`` vector, ``hook_z`` a ``[head,
            d_head]`` one (any hook: its per-position shape).
        vector: The direction: a tensor, array or list of finite numbers.
        scale: How much of it to add (finite; negative subtracts).
        positions: Where an intervention *edits*: ``'prompt'`` (the prompt's tokens),
            ``'new'`` (the generated ones), ``'all'`` (both; the default) or ints of the
            prompt's columns.
    """

    hook: str
    vector: Any
    scale: float = 1.0
    positions: Positions = "all"

    def check(self, model: HookedModel, prompts: Any) -> None:

        super().check(model, prompts)
        check_hook(model, self.hook, what="steering")
        if self.hook.rsplit(".", 1)[-1] in KEYED:
            raise InterpError(
                f"steering adds a fixed vector, and {self.hook}'s key axis grows with every token; "
                "steer a hook with a position axis (a residual stream, hook_z, hook_q ...)"
            )
        check_finite(self.scale, "steering scale")
        vec = steering_vector(self.vector)
        want = tuple(runtime_of(model).activation_shape(self.hook, 1)[1:])
        if tuple(vec.shape) != want:
            raise InterpError(
                f"the steering vector has shape {tuple(vec.shape)}, but {self.hook} carries "
                f"{want} per position; give a vector of that shape"
            )

    def describe(self) -> str:
        return f"add {self.scale:g} x a vector at {self.hook} ({self.positions} positions)"

    def hooks(self, window: Window) -> Hooks:
        sel = window.selected(self.positions)
        if not bool(sel.any()):
            return []
        delta = steering_vector(self.vector) * float(self.scale)

        def steer(x: torch.Tensor, hook: Any) -> torch.Tensor:
            at = along(sel, x.ndim, 1, x.device).to(x.dtype)  # [1, n, 1, ...]
            return x + at * delta.to(x.device, x.dtype)

        return [(self.hook, steer)]


def steering_vector(vector: Any) -> torch.Tensor:
    """A steering vector as a finite float tensor.

    Raises:
        InterpError: for something that is not numbers, or has NaN or infinite entries.
    """
    try:
        vec = torch.as_tensor(vector).detach()
    except (TypeError, ValueError, RuntimeError):
        raise InterpError(
            f"the steering vector must be numbers, got {type(vector).__name__}"
        ) from None
    if not (vec.dtype.is_floating_point or vec.dtype in (torch.int32, torch.int64)):
        raise InterpError(f"the steering vector must be numbers, got dtype {vec.dtype}")
    vec = vec.float()
    if vec.numel() == 0 or not bool(torch.isfinite(vec).all()):
        raise InterpError("the steering vector is empty or holds NaN or infinite entries")
    return vec


@dataclasses.dataclass(frozen=True)
class UserHook(Intervention):
    """Your own hook at ``hook``, its edit kept at ``positions``.

    The cached generation and a loop of whole passes agree when ``fn`` treats each column
    on its own (each query row, for ``hook_pattern``). Where a bridge's adapter computes
    attention inside the wrapped module, as GPT-J's does, TransformerLens discards edits of
    ``hook_pattern`` and warns.

    Args:
        hook: A hook name of the model.
        fn: ``fn(activation, hook)``, TransformerLens's signature: it returns the new
            activation, or None after editing it in place.
        positions: Where an intervention *edits*: ``'prompt'``, ``'new'``, ``'all'`` (the
            default) or ints of the prompt's columns.
    """

    hook: str
    fn: Callable
    positions: Positions = "all"

    def check(self, model: HookedModel, prompts: Any) -> None:
        super().check(model, prompts)
        check_hook(model, self.hook, what="user")
        if not callable(self.fn):
            raise InterpError(f"a user hook needs a callable fn(activation, hook), got {self.fn!r}")

    def describe(self) -> str:
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return f"user hook {name} at {self.hook} ({self.positions} positions)"

    def hooks(self, window: Window) -> Hooks:
        sel = window.selected(self.positions)
        if not bool(sel.any()):
            return []
        axis = position_axis(self.hook)
        every = bool(sel.all())

        def kept(x: torch.Tensor, hook: Any) -> torch.Tensor:
            original = x.clone()  # the check compares with it (fn may edit x in place)
            edited = x if every else original.clone()
            out = self.fn(edited, hook)
            edited = checked_return(self, original, edited if out is None else out)
            if every:
                return edited
            return torch.where(along(sel, x.ndim, axis, x.device), edited, original)

        return [(self.hook, kept)]


def checked_return(edit: UserHook, x: torch.Tensor, new: Any) -> torch.Tensor:
    """A user hook's new activation, checked as the splice checks its edits: a tensor of the
    activation's shape and dtype, without NaN or infinity where the activation had none
    (``-inf`` in ``hook_attn_scores`` is a mask, allowed).

    Raises:
        InterpError: naming the hook's function, its hook and what it returned.
    """
    who = edit.describe()  # "user hook fn at hook (... positions)"
    if not isinstance(new, torch.Tensor):
        raise InterpError(
            f"{who} returned {type(new).__name__}; return a tensor of shape {tuple(x.shape)} "
            "(or None after editing the activation in place)"
        )
    if new.shape != x.shape:
        raise InterpError(
            f"{who} returned shape {tuple(new.shape)}, but the activation is {tuple(x.shape)}; "
            "return a tensor of the activation's shape (broadcasting would change every "
            "position silently)"
        )
    if new.dtype != x.dtype:
        raise InterpError(
            f"{who} returned dtype {new.dtype}, but the activation is {x.dtype}; return "
            "x's dtype (.to(x.dtype))"
        )
    if new.dtype.is_floating_point:
        was = torch.isfinite(x)
        nan = torch.isnan(new) & ~torch.isnan(x)
        inf = torch.isinf(new) & was
        if edit.hook.rsplit(".", 1)[-1] == "hook_attn_scores":
            inf = inf & (new > 0)  # -inf scores mask keys
        if bool(nan.any()) or bool(inf.any()):
            kind = "NaN" if bool(nan.any()) else "infinity"
            n = int((nan | inf).sum())
            raise InterpError(
                f"{who} returned {kind} in {n} of {new.numel()} entries where the model's "
                "activation is finite; a generation cannot sample from it: return finite values"
            )
    return new

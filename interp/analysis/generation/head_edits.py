"""Edits that read another run first: heads ablated, and activations patched from a source run.

:class:`HeadAblation` replaces heads' outputs at ``blocks.{l}.attn.hook_z``
(``[batch, pos, head, d_head]``, before ``W_O``), as
:func:`interp.analysis.ablate_heads` does, with one change that generation forces:
a generated column has no counterpart in a reference batch, so mean and resample
ablation draw from a pool of the head's outputs at *every* real position of the
reference (``reference_tokens``, else the prompts' own clean run, or ``cache=``
of the prompts), fixed before generation starts:

* ``zero``: ``z = 0``;
* ``mean``: ``z`` = the head's mean output over the pool (one vector per head);
* ``resample``: ``z`` at each prompt's position ``p`` = the head's output at one
  pool entry, drawn by NumPy's generator seeded with ``(seed, prompt index)``, one
  draw per position (the same draw for every ablated head of a layer).

So the edit at a column depends only on which prompt and position it is: the
cached generation and a loop of whole forward passes with the same hooks
replace it by the same vector.

:class:`Patch` copies the activation at a hook (or at chosen heads' ``hook_z``)
from a source run: ``source`` is a prompt of the same tokens' shape and padding
(``corrupted_tokens`` of a patching pair), run once, clean. Only the prompt's
columns can be patched (the source run generates nothing), but a patched prompt's
keys and values are what every new token reads.

Example:
    >>> from interp.models import load_model
    >>> from interp.analysis.generation import generate
    >>> model = load_model("induction-2l")
    >>> prompt = [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10]]
    >>> clean = generate(model, prompt, max_new_tokens=2).new_tokens.tolist()
    >>> edited = generate(model, prompt, max_new_tokens=2,
    ...                   interventions=[HeadAblation(heads=["L1H1"])]).new_tokens.tolist()
    >>> clean, clean != edited
    ([[41, 50]], True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from interp.analysis.generation.interventions import (
    KEYED,
    Hooks,
    Intervention,
    Positions,
    Window,
    along,
    check_hook,
)
from interp.analysis.generation.prompts import prompts_of
from interp.core.checks import check_seed, check_tokens
from interp.core.errors import InterpError
from interp.core.head_checks import parse_heads
from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel
from interp.engine.ablations import check_ablation
from interp.engine.cache import StopForward
from interp.engine.cost import Flops, cache_pass_work
from interp.runtime import runtime_of


def capture(
    model: HookedModel, tokens: torch.Tensor, mask: torch.Tensor, names: Sequence[str]
) -> dict[str, torch.Tensor]:
    """The activations ``names`` of one clean pass over ``tokens`` (padding masked), the pass
    stopped once the last of them has fired."""
    got: dict[str, torch.Tensor] = {}

    def grab(name: str) -> Any:  # by the name asked for (a bridge's hook.name is the alias's)
        def keep(x: torch.Tensor, hook: Any) -> None:
            got[name] = x.detach()
            if len(got) == len(names):
                raise StopForward

        return keep

    try:
        with torch.no_grad():
            runtime_of(model).extend(
                tokens, attention_mask=mask, keep=False, hooks=[(n, grab(n)) for n in names]
            )
    except StopForward:
        pass
    missing = [n for n in names if n not in got]
    if missing:
        raise InterpError(f"the model's hook {missing[0]} never fired")
    return got


def captured_work(
    model: HookedModel, names: Sequence[str], batch: int, pos: int, prompts: Any
) -> float:
    """The forward-equivalents (over one plain pass of ``prompts``) of :func:`capture` on
    ``[batch, pos]`` tokens: a pass stopped once the last of ``names`` has fired."""
    fl = Flops.of(model)
    mine = batch * fl.plain(pos) / (prompts.batch * fl.plain(prompts.length))
    return cache_pass_work(model, pos, names) * mine


def _by_layer(model: HookedModel, heads: Any) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for layer, head in parse_heads(model, heads):
        out.setdefault(layer, []).append(head)
    return dict(sorted(out.items()))


@dataclasses.dataclass(frozen=True)
class HeadAblation(Intervention):
    """Replace heads' outputs at ``hook_z`` (module docstring), at ``positions``.

    Args:
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head.
        ablation: What replaces an activation: ``'zero'`` (default), ``'mean'`` (the head's
            mean output over every real position of the reference) or ``'resample'`` (its
            output at a seeded draw of them, one per prompt and position).
        positions: Where an intervention *edits*: ``'prompt'``, ``'new'``, ``'all'`` (the
            default) or ints of the prompt's columns.
        reference_tokens: The sequences a mean or resample ablation draws from (default:
            the tokens, here the prompts' own clean run).
        seed: Resample ablation's draws; the same seed gives the same numbers.
    """

    heads: Iterable[Any]
    ablation: Literal["zero", "mean", "resample"] = "zero"
    positions: Positions = "all"
    reference_tokens: Any = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.heads is not None and not isinstance(self.heads, (str, bytes)):
            object.__setattr__(self, "heads", tuple(self.heads))  # a generator is read once

    def check(self, model: HookedModel, prompts: Any) -> None:
        super().check(model, prompts)
        check_ablation(self.ablation, ("zero", "mean", "resample"))
        _by_layer(model, self.heads)
        check_seed(self.seed)
        if self.reference_tokens is not None:
            if self.ablation == "zero":
                raise InterpError("reference_tokens are for mean and resample ablation, not zero")
            check_tokens(model, self.reference_tokens, name="reference_tokens")

    def describe(self) -> str:
        return f"{self.ablation}-ablate {_labels_of(self.heads)} ({self.positions} positions)"

    def passes(self, prompts: Any, *, cache: Any = None) -> float:
        if self.ablation == "zero":
            return 0.0
        if self.reference_tokens is None:
            return 0.0 if cache is not None else 1.0
        ref = torch.as_tensor(self.reference_tokens)
        return ref.numel() / max(1, int(prompts.mask.sum()))

    def work(self, model: HookedModel, prompts: Any, *, cache: Any = None) -> float:
        if self.ablation == "zero" or (self.reference_tokens is None and cache is not None):
            return 0.0
        names = [hook_name("z", l) for l in _by_layer(model, self.heads)]
        if self.reference_tokens is None:  # the prompts' own pass, stopped at the last hook_z
            return cache_pass_work(model, prompts.length, names)
        ref = torch.as_tensor(self.reference_tokens)
        ref = ref.reshape(1, -1) if ref.ndim == 1 else ref
        return captured_work(model, names, ref.shape[0], ref.shape[1], prompts)

    def bind(self, model: HookedModel, prompts: Any, n_new: int, **context: Any) -> Any:
        by_layer = _by_layer(model, self.heads)
        if self.ablation == "zero":
            return _Ablated(self, by_layer, {}, None)
        names = {l: hook_name("z", l) for l in by_layer}
        pools: dict[int, list[torch.Tensor]] = {l: [] for l in by_layer}
        cache = context.get("cache")
        if self.reference_tokens is not None:
            ref = check_tokens(model, self.reference_tokens, name="reference_tokens")
            sources: list[tuple[Any, torch.Tensor]] = [
                (ref, torch.ones_like(ref, dtype=torch.bool))
            ]
        elif cache is not None:
            sources = [(cache, prompts.mask)]
        else:
            chunks = context.get("chunks") or [slice(0, prompts.batch)]
            sources = [(prompts.tokens[c], prompts.mask[c]) for c in chunks]
        for tokens, mask in sources:
            if isinstance(tokens, torch.Tensor):
                acts = capture(model, tokens, mask, list(names.values()))
            else:
                acts = {n: tokens[n] for n in names.values()}
            for l, hs in by_layer.items():
                pools[l].append(acts[names[l]][:, :, hs][mask.to(acts[names[l]].device)].float())
        pool = {l: torch.cat(p) for l, p in pools.items()}  # [entries, head, d_head]
        if self.ablation == "mean":
            return _Ablated(self, by_layer, {l: p.mean(0) for l, p in pool.items()}, None)
        entries = next(iter(pool.values())).shape[0]
        positions = prompts.length + n_new
        draws = [np.random.default_rng([self.seed, r]).integers(entries, size=positions)
                 for r in range(prompts.batch)]  # fmt: skip
        return _Ablated(self, by_layer, pool, torch.tensor(np.stack(draws), dtype=torch.long))


def _labels_of(heads: Any) -> str:
    """Checked heads (labels or pairs) as labels, for descriptions."""
    if heads is None:
        return "every head"
    return ", ".join(
        h.upper() if isinstance(h, str) else f"L{int(h[0])}H{int(h[1])}" for h in heads
    )


@dataclasses.dataclass
class _Ablated:
    """A bound :class:`HeadAblation`: the replacement values, per layer."""

    spec: HeadAblation
    by_layer: dict[int, list[int]]
    values: dict[int, torch.Tensor]  # mean: [head, d_head]; resample: the pool
    draws: torch.Tensor | None  # resample: [prompt, position] -> pool entry

    def hooks(self, window: Window) -> Hooks:
        sel = window.selected(self.spec.positions)
        if not bool(sel.any()):
            return []
        picks = None
        if self.draws is not None:
            picks = self.draws[window.rows.cpu()[:, None], window.position_ids()]  # [batch, n]
        return [
            (hook_name("z", l), self._hook(l, hs, sel, picks)) for l, hs in self.by_layer.items()
        ]

    def _hook(self, layer: int, hs: list[int], sel: torch.Tensor, picks: Any) -> Any:
        kind, value = self.spec.ablation, self.values.get(layer)

        def ablate(z: torch.Tensor, hook: Any) -> torch.Tensor:
            part = z[:, :, hs]  # [batch, n, k, d_head]
            if kind == "zero":
                new = torch.zeros((), dtype=z.dtype, device=z.device)
            elif kind == "mean":
                new = value.to(z.device, z.dtype)
            else:
                new = value.to(z.device, z.dtype)[picks.to(z.device)]  # [batch, n, k, d_head]
            out = z.clone()
            out[:, :, hs] = torch.where(along(sel, 4, 1, z.device), new, part)
            return out

        return ablate


@dataclasses.dataclass(frozen=True)
class Patch(Intervention):
    """Copy an activation from a clean run of ``source`` into the prompt's ``positions``.

    Args:
        source: The prompt whose run the activations come from (the other prompt of a
            patching pair): the prompt's tokens' shape and padding, as a ``prompt`` is given.
        heads: The heads whose ``hook_z`` is copied: an iterable of ``(layer, head)`` pairs
            or ``'L1H4'`` labels; ``None`` is every head (unless ``hook`` is given).
        hook: A hook name whose whole activation is copied instead (one with a position
            axis); not with ``heads``.
        positions: Where an intervention *edits*: ``'prompt'`` (default) or ints of the
            prompt's columns; the source generates nothing, so ``'new'`` and ``'all'`` are
            refused.
    """

    source: Any
    heads: Iterable[Any] | None = None
    hook: str | None = None
    positions: Positions = "prompt"
    ablation = "patch"

    def __post_init__(self) -> None:
        if self.heads is not None and not isinstance(self.heads, (str, bytes)):
            object.__setattr__(self, "heads", tuple(self.heads))

    def check(self, model: HookedModel, prompts: Any) -> None:

        if self.positions in ("new", "all"):
            raise InterpError(
                f"a patch copies from the source run, which has no generated tokens, so "
                f"positions={self.positions!r} cannot be patched; use 'prompt' or prompt columns"
            )
        super().check(model, prompts)
        if self.heads is not None and self.hook is not None:
            raise InterpError("a patch copies heads= (their hook_z) or one hook=, not both")
        if self.hook is None:
            _by_layer(model, self.heads)
        else:
            check_hook(model, self.hook, what="patched")
            if self.hook.rsplit(".", 1)[-1] in KEYED:
                raise InterpError(f"patch an activation with a position axis, not {self.hook}")
        src = prompts_of(model, self.source, name="source")
        if src.tokens.shape != prompts.tokens.shape or not torch.equal(src.mask, prompts.mask):
            raise InterpError(
                f"the source prompt has shape {tuple(src.tokens.shape)} and the prompt "
                f"{tuple(prompts.tokens.shape)}: patching needs the same tokens' shape (and "
                "padding), so that positions correspond"
            )

    def describe(self) -> str:
        what = self.hook if self.hook is not None else f"hook_z of {_labels_of(self.heads)}"
        return f"patch {what} from the source run ({self.positions} positions)"

    def passes(self, prompts: Any, *, cache: Any = None) -> float:
        return 1.0

    def work(self, model: HookedModel, prompts: Any, *, cache: Any = None) -> float:
        # the source run (the prompts' shape), stopped once the hooks it copies have fired
        by_layer = _by_layer(model, self.heads) if self.hook is None else {}
        names = [hook_name("z", l) for l in by_layer] if by_layer else [str(self.hook)]
        return cache_pass_work(model, prompts.length, names)

    def bind(self, model: HookedModel, prompts: Any, n_new: int, **context: Any) -> Any:

        src = prompts_of(model, self.source, name="source")
        by_layer = _by_layer(model, self.heads) if self.hook is None else {}
        names = [hook_name("z", l) for l in by_layer] if by_layer else [str(self.hook)]
        parts = [
            capture(model, src.tokens[c], src.mask[c], names)
            for c in context.get("chunks") or [slice(0, src.batch)]
        ]  # the source run in the generation's chunks
        values = {n: torch.cat([p[n] for p in parts]) for n in names}
        return _Patched(self, by_layer, values)


@dataclasses.dataclass
class _Patched:
    spec: Patch
    by_layer: dict[int, list[int]]
    values: dict[str, torch.Tensor]  # the source run's activations, [batch, prompt, ...]

    def hooks(self, window: Window) -> Hooks:
        sel = window.selected(self.spec.positions) & (window.columns() < window.prompt)
        if not bool(sel.any()):
            return []
        cols, rows = window.columns()[sel], window.rows.cpu()
        if not self.by_layer:
            return [(str(self.spec.hook), self._hook(str(self.spec.hook), None, sel, cols, rows))]
        return [
            (hook_name("z", l), self._hook(hook_name("z", l), hs, sel, cols, rows))
            for l, hs in self.by_layer.items()
        ]

    def _hook(self, name: str, hs: Any, sel: torch.Tensor, cols: Any, rows: Any) -> Any:
        source = self.values[name]

        def patch(x: torch.Tensor, hook: Any) -> torch.Tensor:
            src = source[rows.to(source.device)][:, cols.to(source.device)].to(x.device, x.dtype)
            out = x.clone()
            at = sel.nonzero().flatten().to(x.device)
            if hs is None:
                out[:, at] = src
            else:
                part = out[:, :, hs]
                part[:, at] = src[:, :, hs]
                out[:, :, hs] = part
            return out

        return patch

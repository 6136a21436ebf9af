"""Edits of single activations: a :class:`Site` is the slice of an activation an edit replaces.

An *edit* is a few sites changed together in one forward pass (one head's
``hook_z``; a position of ``hook_resid_pre``; a group of MLP neurons; every
head of a layer). Each site's slice is replaced by zero or by the same slice of
a given tensor (the source run's activation in a patch, a mean, a resampled one).
:func:`edit_hooks` turns edits into hooks; a pass carrying several edits holds
one copy of the batch per edit.

Example:
    >>> site("z", 1, head=2).hook, site("pattern", 0, head=1, positions=[3]).pos_dim
    ('blocks.1.attn.hook_z', 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from interp.core.hooks import hook_name


@dataclasses.dataclass(frozen=True)
class Site:
    """A slice of one hooked activation that an edit replaces.

    ``hook`` is the full hook name and ``layer`` the block it belongs to (a
    resumed pass must start there). ``head`` indexes the head axis
    (``head_dim``), ``positions`` the position axis (``pos_dim``; for an
    attention pattern, the query rows), ``channels`` a ``(start, stop)`` range
    of the last axis (MLP neurons); ``None`` means all of that axis.
    """

    hook: str
    layer: int
    head: int | None = None
    positions: tuple[int, ...] | None = None
    channels: tuple[int, int] | None = None
    head_dim: int = 2
    pos_dim: int = 1

    def index(self, ndim: int, device: Any = None) -> tuple:
        """The index of this slice in an activation with ``ndim`` axes (batch first)."""
        sel: list[Any] = [slice(None)] * ndim
        if self.head is not None:
            sel[self.head_dim] = self.head
        if self.positions is not None:
            sel[self.pos_dim] = torch.tensor(self.positions, dtype=torch.long, device=device)
        if self.channels is not None:
            sel[-1] = slice(*self.channels)
        return tuple(sel)

    def at(self, positions: tuple[int, ...] | None) -> Site:
        """This site restricted to ``positions`` (``None``: every position)."""
        return dataclasses.replace(self, positions=positions)


Edit = Sequence[Site]


def site(kind: str, layer: int, *, head: int | None = None, positions: Any = None) -> Site:
    """The :class:`Site` of activation ``kind`` (:func:`interp.core.hooks.hook_name`'s kinds) in
    ``layer``; attention patterns and scores index heads on axis 1 and query rows on axis 2."""
    pos = None if positions is None else tuple(int(p) for p in positions)
    if kind == "pattern" or kind == "attn_scores":
        return Site(hook_name(kind, layer), layer, head, pos, head_dim=1, pos_dim=2)
    return Site(hook_name(kind, layer), layer, head, pos)


def mask_positions(positions: torch.Tensor | None) -> tuple[int, ...] | None:
    """A ``[pos]`` bool mask (or None) as the sorted positions a site takes."""
    if positions is None:
        return None
    return tuple(int(i) for i in torch.nonzero(positions.cpu()).flatten())


def head_edits(
    heads: Sequence[tuple[int, int]], positions: Sequence[int] | None = None
) -> list[list[Site]]:
    """One edit per head: its ``hook_z``, at ``positions`` (every position if ``None``)."""
    return [[site("z", l, head=h, positions=positions)] for l, h in heads]


def edit_start(edit: Edit) -> int:
    """The first block an edit changes (a resumed pass starts there)."""
    return min(s.layer for s in edit)


def edit_hooks(
    edits: Sequence[Edit], values: dict[str, torch.Tensor] | None, b: int
) -> list[tuple[str, Callable]]:
    """Hooks applying ``edits[i]`` to batch rows ``i*b .. (i+1)*b``: one hook per activation,
    replacing each site's slice by the same slice of ``values[hook]`` (zero without values)."""
    by_hook: dict[str, list[tuple[int, Site]]] = {}
    for i, edit in enumerate(edits):
        for st in edit:
            by_hook.setdefault(st.hook, []).append((i, st))

    def make(name: str, sites: list[tuple[int, Site]]) -> Callable:
        target_all = None if values is None else values[name]

        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor:
            x = x.clone()
            for i, st in sites:
                sel = st.index(x.ndim, x.device)
                rows = x[i * b : (i + 1) * b]  # a view: writing into it writes into x
                if target_all is None:
                    rows[sel] = 0.0
                else:
                    rows[sel] = target_all[sel].to(x.device, x.dtype)
            return x

        return hook

    return [(name, make(name, sites)) for name, sites in by_hook.items()]

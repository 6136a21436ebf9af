"""The sums an edge pass adds to its receivers' inputs.

For copy ``c`` of a batched pass and receiver ``r`` (:mod:`interp.engine.edges.run`):

    delta_r = sum_s mask[c, s, r] * (alt_s - ref_s)

:class:`EdgeSums` computes them for :class:`~interp.engine.edges.run.EdgeRun` (the hooks of
such a pass), over whichever is fewer, the edited edges or the unedited ones, as matrix
products that read each sender's output once (a few senders gathered :data:`GATHER` at a
time).

Example:
    >>> import torch
    >>> x = torch.zeros(2, 3)
    >>> _product(torch.ones(2, 1), torch.ones(1, 3), None, 1, x, 1.0)
    >>> x.tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import torch

from interp.core.errors import InterpError

GATHER = 16  # senders gathered at a time when a sum reads only a few (EdgeRun._sum)


def _product(
    mt: torch.Tensor,
    src: torch.Tensor,
    used: torch.Tensor | None,
    n: int,
    out: torch.Tensor,
    sign: float,
) -> None:
    """``out (+)= sign * mt @ src[senders]`` in place: ``mt`` ``[receiver, sender]`` (over
    ``used`` when given, else the first ``n`` senders), ``src`` ``[sender, ...]``, ``out``
    ``[receiver, ...]`` (written when ``sign`` is 1, subtracted from when -1)."""
    flat = out.view(out.shape[0], -1)
    if used is None:
        rows = src[:n].reshape(n, -1)
        if sign > 0:
            torch.mm(mt, rows, out=flat)
        else:
            flat.addmm_(mt, rows, alpha=sign)
        return
    if sign > 0:
        flat.zero_()
    for lo in range(0, used.numel(), GATHER):
        part = used[lo : lo + GATHER]
        rows = src.index_select(0, part).reshape(part.numel(), -1)
        flat.addmm_(mt[:, lo : lo + GATHER], rows, alpha=sign)


class EdgeSums:
    """The edit of an :class:`~interp.engine.edges.run.EdgeRun`: which receivers its copies
    edit, and by how much (module docstring). The run sets ``masks``, ``alt``, ``ref``,
    ``k``, ``by_pos``, ``pos``, ``cum``, ``senders`` and, in a running pass, ``running``,
    ``run_total`` and ``n_stored``."""

    masks: torch.Tensor  # [k, sender, receiver] (or [k, sender, receiver, pos]) float
    alt: torch.Tensor  # [sender, batch, pos, d_model]
    ref: torch.Tensor | None  # fixed reference outputs, or None: this pass's own
    k: int
    by_pos: bool
    pos: torch.Tensor | None
    running: torch.Tensor | None
    run_total: torch.Tensor | None
    n_stored: int
    cum: dict[str, torch.Tensor]
    senders: list[int] | None  # the graph senders the sender axis holds, sorted (None: all)

    def edited(self, receivers: Sequence[int]) -> torch.Tensor:
        """``[k, receiver]`` bool: which of these receivers any edge of each copy edits."""
        m = self.masks[:, :, receivers]
        return (m.flatten(3).any(-1) if self.by_pos else m).any(1)

    def delta(self, receivers: Sequence[int], n_senders: int) -> torch.Tensor | None:
        """``[k, receiver, batch, pos, d_model]`` added to these receivers' inputs, or None.

        Summed over whichever is fewer: the edited edges, or the unedited ones subtracted
        from the edit of every edge (``sum over all s < n of (alt_s - ref_s)``, one prefix
        sum). A circuit of a few edges then costs a few edges' work per receiver, not the
        whole graph's, and so does editing nearly every edge."""
        if self.senders is not None:  # the senders held that come before the n-th
            n_senders = bisect.bisect_left(self.senders, n_senders)
        m = self.masks[:, :n_senders][:, :, receivers]  # [k, sender, receiver]
        edited = int(torch.count_nonzero(m))
        if edited == 0:
            return None
        if edited <= m.numel() - edited:
            out = self._sum(m)
        else:
            total = self._all_edited(n_senders)  # [k, batch, pos, d_model]
            out = total[:, None].expand(m.shape[0], m.shape[2], *total.shape[1:]).clone()
            rest = self._sum(1.0 - m)
            if rest is not None:
                out -= rest
        if self.pos is not None:
            out.mul_(self.pos.to(out.device)[:, None])  # in place: out is this call's own
        return out

    def _sum(self, m: torch.Tensor) -> torch.Tensor | None:
        """``sum_s m[k, s, r] * (alt_s - ref_s)`` over the senders ``m`` covers, as matrix
        products that read each sender's output once, written into the result. In a running
        pass the store already holds ``alt_s - running_s`` (one product per copy); with a fixed
        ``ref``, two products (no ``alt - ref`` is built). A few senders (under a quarter) are
        gathered :data:`GATHER` at a time, so no copy of the store grows with the graph."""
        k, n, R = m.shape[:3]
        used = torch.nonzero(m.flatten(2).sum(dim=(0, 2)) != 0).flatten()
        if used.numel() == 0:
            return None
        few = used.numel() < n // 4  # a few senders: gather them; else read the prefix in place
        if few:
            m = m[:, used]
        if self.by_pos:
            return self._sum_by_position(m, used if few else None, n)
        mt = m.transpose(1, 2)  # [k, receiver, sender]
        if self.ref is None:  # this pass's differences, [sender, k, batch, pos, d_model]
            src = self.running
            out = src.new_empty((k, R, *src.shape[2:]))
            for c in range(k):
                _product(mt[c].to(src.dtype), src[:, c], used if few else None, n, out[c], 1.0)
            return out
        out = self.alt.new_empty((k, R, *self.alt.shape[1:]))
        mt = mt.reshape(k * R, -1).to(self.alt.dtype)  # every copy in one product
        flat = out.view(k * R, *self.alt.shape[1:])
        _product(mt, self.alt, used if few else None, n, flat, 1.0)
        _product(mt, self.ref, used if few else None, n, flat, -1.0)
        return out

    def _sum_by_position(self, m: torch.Tensor, used: torch.Tensor | None, n: int) -> Any:
        """``_sum`` for masks with a position axis: ``sum_s m[k, s, r, p] * (alt_s - ref_s)[p]``,
        one batched product over positions per copy."""
        if self.ref is None:
            diff = self.running.index_select(0, used) if used is not None else self.running[:n]
            mm = m.to(diff.dtype)
            return torch.stack(
                [torch.einsum("srp,sbpd->rbpd", mm[c], diff[:, c]) for c in range(m.shape[0])]
            )
        alt = self.alt.index_select(0, used) if used is not None else self.alt[:n]
        ref = self.ref.index_select(0, used) if used is not None else self.ref[:n]
        mm = m.to(alt.dtype)
        return torch.einsum("ksrp,sbpd->krbpd", mm, alt) - torch.einsum("ksrp,sbpd->krbpd", mm, ref)

    def _all_edited(self, n: int) -> torch.Tensor:
        """``sum over s < n of (alt_s - ref_s)``, ``[k, batch, pos, d_model]``."""
        alt = self._prefix("alt", self.alt, n)
        if self.ref is None:
            if self.n_stored != n:  # senders arrive in graph order; a hook fired out of it
                raise InterpError(f"edge engine: {self.n_stored} senders seen, {n} expected")
            return self.run_total
        return (alt - self._prefix("ref", self.ref, n))[None].expand(self.k, *alt.shape)

    def _prefix(self, key: str, x: torch.Tensor, n: int) -> torch.Tensor:
        if key not in self.cum:
            self.cum[key] = x.cumsum(0)  # [sender, batch, pos, d_model], once per run
        return self.cum[key][n - 1]

"""``resume-suffix``: a patch whose source shares the base run's first tokens runs only the rest.

In a causal model a position's activations depend only on the tokens up to it. When the
base run and the source run of a patch agree on their first ``shared`` tokens in every
prompt (an indirect-object prompt and its corrupted twin differ from the second subject
on), every activation at those positions is the same in both runs, so splicing the
source's values in changes nothing there. Each edited pass then needs only the later
positions: their keys and values are computed against the base run's keys and values of
the first ``shared`` positions, kept once (Hugging Face's own cache,
:meth:`interp.runtime.bridge.BridgeRuntime.run_shared`), and the pass resumes at the
edit's first block as ``resume-blocks`` does. It applies when the metric reads only later
rows and the runtime's cache passed its check; the sweep checks the path once per model
against the plain loop, as every path.

Example:
    >>> import torch
    >>> shared_prefix(torch.tensor([[1, 2, 3], [1, 2, 4]]), torch.tensor([[1, 2, 5], [1, 9, 4]]))
    1
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from interp.engine.cost import Cost
from interp.engine.sweeps.sites import Edit, Site, edit_hooks, edit_start
from interp.runtime import Runtime
from interp.runtime.rows import kept_rows


def shared_prefix(tokens: torch.Tensor, source: torch.Tensor | None) -> int:
    """How many leading positions ``tokens`` and ``source`` (``[batch, pos]``) hold alike in
    every prompt (0 without a source or for other shapes).

    Args:
        tokens: The base run's ids, ``[batch, pos]``.
        source: The source run's ids, or None.

    Returns:
        The length of the prefix every prompt shares with its source.
    """
    if source is None or source.shape != tokens.shape:
        return 0
    differ = (tokens != source.to(tokens.device)).any(0).nonzero()
    return int(differ[0]) if len(differ) else tokens.shape[1]


def fits(rt: Runtime, edits: Sequence[Edit], rows: Any, shared: int, n: int) -> bool:
    """Whether ``resume-suffix`` applies: a runtime that shares a prefix, a prefix of at least
    one position short of the whole prompt, a metric that reads only later rows, and edits
    whose positions (if any) are counted from the start.

    Args:
        rt: The model's runtime.
        edits: The sweep's edits.
        rows: The positions the metric reads (None: every one).
        shared: The shared prefix (:func:`shared_prefix`).
        n: Positions per prompt.

    Returns:
        Whether the path applies (its exactness check still runs before it is used).
    """
    keep = kept_rows(rows, n)
    if not (0 < shared < n) or keep is None or keep[0] < shared:
        return False
    if any(p < 0 for e in edits for st in e for p in (st.positions or ())):
        return False
    from interp.core.protocol import is_causal

    return is_causal(rt.model) and rt.shares_prefix


def _later(site: Site, shared: int) -> Site:
    """``site`` in a pass over the positions from ``shared`` on (its earlier positions dropped:
    they hold the base run's values)."""
    if site.positions is None:
        return site
    return dataclasses.replace(site, positions=tuple(p - shared for p in site.positions
                                                     if p >= shared))  # fmt: skip


def _cut(x: Any, shared: int, dim: int = 1) -> Any:
    """The positions from ``shared`` on of a tensor (or of each tensor of a block's tuple)."""
    if isinstance(x, torch.Tensor):
        return x.narrow(dim, shared, x.shape[dim] - shared) if x.dim() > dim else x
    if isinstance(x, tuple):
        return tuple(_cut(v, shared, dim) for v in x)
    return x


class ResumeSuffix:
    """``resume-suffix`` (module docstring): the base run's keys and values of its first
    ``shared`` positions kept once; each pass runs the later positions from its first block."""

    name = "resume-suffix"

    def __init__(self, rt: Runtime, tokens: torch.Tensor, starts: set[int], rows: Any,
                 shared: int):  # fmt: skip
        self.rt = rt
        self.tokens = tokens
        self.shared = shared
        self.base_logits, kept = rt.block_inputs(tokens, starts - {0}, rows=rows)
        self.kept = {l: _cut(v, shared) for l, v in kept.items()}
        self.past = rt.prefix(tokens[:, :shared])  # type: ignore[attr-defined]

    def run(self, packed, values, rows, cost: Cost | None = None) -> torch.Tensor:
        """The metric's logits of each edit in ``packed``, ``len(packed)`` copies in one pass,
        stacked along the batch (copy ``i`` in rows ``i * batch ..``)."""
        k, (b, n) = len(packed), self.tokens.shape
        s = self.shared
        start = min(edit_start(edit) for edit in packed)
        later = [[_later(st, s) for st in edit] for edit in packed]
        if values is not None:
            dims = {st.hook: st.pos_dim for edit in packed for st in edit}
            values = {h: _cut(values[h], s, d) for h, d in dims.items()}
        logits = self.rt.run_shared(  # type: ignore[attr-defined]
            self.tokens, self.past, hooks=edit_hooks(later, values, b), rows=rows, start=start,
            state=self.kept.get(start), copies=k,
        )  # fmt: skip
        if cost is not None:
            cost.forward(k * (n - s) / n, start=start)
        return logits  # [k * batch, ...]: copy i in rows i * batch ..


def check(rt: Runtime, tokens: torch.Tensor) -> tuple[bool, str]:
    """Does ``resume-suffix`` give the plain loop's logits? On the first prompt (at most 8
    tokens): a patch of one head in the middle layer whose values are the base run's on the
    first half and zero after, one pass each way, to 1e-5 of the logits' scale (the kept
    keys and values enter later positions through other matrix shapes, so the two agree to
    rounding, not bit for bit).

    Args:
        rt: The model's runtime.
        tokens: The sweep's base tokens (the probe is cut from the first prompt).

    Returns:
        ``(agrees, why not)``: a failure or a gap past the tolerance is ``(False, reason)``.
    """
    probe = tokens[:1, : min(tokens.shape[1], 8)]
    n = probe.shape[1]
    shared, layer = max(1, n // 2), rt.n_layers // 2
    edit = [Site(f"blocks.{layer}.attn.hook_z", layer, head=0)]
    kept: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, hook: Any) -> None:
        kept[edit[0].hook] = x.clone()

    try:
        with torch.no_grad():
            rt.run(probe, hooks=[(edit[0].hook, keep)])
            values = {h: v.clone() for h, v in kept.items()}
            values[edit[0].hook][:, shared:] = 0.0
            ref = rt.run(probe, hooks=edit_hooks([edit], values, 1))[:, -1]
            path = ResumeSuffix(rt, probe, {layer}, [n - 1], shared)
            got = path.run([edit], values, [n - 1])[:, -1]
        gap = float((got.float() - ref.float()).abs().max())
        scale = max(1.0, float(ref.float().abs().max()))
        if not gap <= 1e-5 * scale:  # NaN fails too
            return False, f"{ResumeSuffix.name} differed from the plain loop by {gap:.2e}"
        return True, ""
    except Exception as exc:  # noqa: BLE001 - any failure means "this path does not apply"
        return False, f"{ResumeSuffix.name} failed its check ({type(exc).__name__}: {exc})"

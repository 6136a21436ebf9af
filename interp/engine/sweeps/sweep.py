"""Sweeps: a metric under many single-activation edits, exactly, in few forward passes.

A sweep evaluates a metric under many *edits* (:mod:`interp.engine.sweeps.sites`).
Every path gives what one ``run_with_hooks`` per edit gives (the "plain loop"),
and each is checked against that loop once per model (on a slice of the
tokens, to 1e-5; in float16 / bfloat16 to the precision's rule,
:mod:`interp.core.precision`) before it is trusted; the table says which path ran.

``resume-after-block`` (attention-only models, edits of one layer's ``hook_z``
only). A head's output enters the residual stream only as ``z_h @ W_O[l, h]``,
and an attention-only block adds nothing after its attention, so the edited
residual after block ``l`` is the base run's plus ``(z_new - z_h) @ W_O[l, h]``.
One hooked pass of the base run keeps ``hook_z`` and ``hook_resid_post`` of each edited
layer; each edit then runs only the blocks after ``l``.

``resume-blocks`` (any model whose runtime resumes). One base pass keeps what
enters each block; an edit starting in layer ``l`` then runs only blocks
``l ..`` (:meth:`interp.runtime.base.Runtime.run`).

``resume-suffix`` (:mod:`interp.engine.sweeps.suffix`): a patch whose source run shares
the base run's first tokens; each pass resumes at its first edited block and computes only
the later positions, against the base run's keys and values of the shared ones.

``loop``: one ``run_with_hooks`` per edit, for models neither path fits, or
when a path's exactness check fails (the result's ``note`` says so).

Edits that start in the same layer share a pass (:mod:`interp.engine.batching`).
When the metric says which positions' logits it reads (``Metric.rows``), a
runtime that can unembeds only there.

Example:
    >>> import torch
    >>> from interp.core.metrics import loss_metric
    >>> from interp.models import load_model
    >>> from interp.engine.sweeps.sites import head_edits
    >>> model = load_model("induction-2l")
    >>> tokens = torch.tensor([[0, 5, 6, 7, 5, 6, 7]])
    >>> result = sweep(model, tokens, head_edits([(1, 1)]), loss_metric())
    >>> result.path, result.values[0] > result.base
    ('resume-after-block', True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.metrics import Metric, scalar
from interp.core.protocol import HookedModel
from interp.engine.batching import check_work, copies_per_pass, pack
from interp.engine.cost import ALL_ROWS, Cost
from interp.engine.sweeps import suffix
from interp.engine.sweeps.cost import sweep_copy_bytes
from interp.engine.sweeps.paths import (
    ATOL,
    RTOL,
    AfterBlock,
    ResumeBlocks,
    choose_path,
    likely_path,
    loop_pass,
    projection_flops,
)
from interp.engine.sweeps.sites import Edit, edit_start
from interp.runtime import runtime_of

__all__ = ["ATOL", "RTOL", "SweepResult", "choose_path", "likely_path", "sweep", "sweep_copies",
           "sweep_outline", "sweep_work"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Metric values, one per edit in the order given; the unedited (base) run's value; which
    path ran. The base run is the run the edits edit: the clean run, or the corrupted one
    when denoising (:mod:`interp.engine.direction`)."""

    values: list[float]
    base: float
    path: str
    note: str = ""
    passes: int = 0
    cost: float = 0.0  # forward-equivalents (interp.engine.batching.Cost)


def sweep_copies(
    model: HookedModel,
    tokens: torch.Tensor,
    edits: Sequence[Edit],
    requested: Any,
    memory_budget: Any,
    rows: Sequence[int] | None = None,
) -> int:
    """How many edits share one forward pass (:func:`interp.engine.batching.copies_per_pass`,
    each copy :func:`sweep_copy_bytes` per prompt).

    Raises:
        InterpError: for a non-positive or non-integer ``batch_size`` or ``memory_budget``.
    """
    from interp.core.protocol import model_device

    b, pos = tokens.shape
    return copies_per_pass(
        tokens.numel(),
        model_device(model),
        per_copy=b * sweep_copy_bytes(model, pos, edits, rows),
        n=len(edits),
        requested=requested,
        memory_budget=memory_budget,
    )


def sweep_outline(
    model: HookedModel, tokens: torch.Tensor, edits: Sequence[Edit], batch_size: Any = None
) -> dict:
    """What a sweep will do: ``path``, ``note``, ``edits``, ``edits_per_pass``, ``passes``."""
    path, note = choose_path(model, tokens, edits)
    k = sweep_copies(model, tokens, edits, batch_size, None)
    n_passes = len(pack([edit_start(e) for e in edits], k, mixed=path == "loop"))
    return {
        "path": path,
        "note": note,
        "edits": len(edits),
        "edits_per_pass": k,
        "passes": n_passes + 1,
    }


def sweep_work(
    model: HookedModel,
    edits: Sequence[Edit],
    path: str | None = None,
    *,
    pos: int | None = None,
    rows: Sequence[int] | None = None,
    shared: int = 0,
) -> float:
    """The forward-equivalents a sweep of ``edits`` on ``path`` (default :func:`likely_path`)
    runs, as its :class:`~interp.engine.cost.Cost` counts them: the base pass, then per
    edit the blocks it reruns: those after its layer (``resume-after-block``), from its first
    layer on (``resume-blocks``; ``resume-suffix``: at the positions after the ``shared``
    ones, after one pass of those), or every block (``loop``); each pass then unembeds the
    metric's ``rows`` (a loop pass every row). Without ``pos``, blocks only (a pass of every
    block is 1).

    Example:
        >>> from interp.models import load_model
        >>> from interp.engine.sweeps.sites import head_edits
        >>> sweep_work(load_model("induction-2l"), head_edits([(0, 0), (1, 0)]))  # 1 + 1/2 + 0
        1.5
    """
    rt = runtime_of(model)
    L = rt.n_layers
    path = likely_path(model, edits, rows=rows, shared=shared, pos=pos) if path is None else path
    cost = Cost(L) if pos is None else Cost.of(model, pos, rows)
    cost.forward()
    if path == "loop":
        cost.forward(len(edits), rows=ALL_ROWS)
        return cost.total
    if path == suffix.ResumeSuffix.name and pos is not None:
        cost.forward(shared / pos, stop=L)  # the kept prefix's pass
        for e in edits:
            cost.forward((pos - shared) / pos, start=edit_start(e))
        return cost.total
    after = 1 if path == AfterBlock.name else 0
    shape = rt.activation_shape(hook_name("z", 0), 1)[1:] + (rt.d_model,) if after else ()
    for e in edits:
        if after:
            cost.per_token(projection_flops(e, shape))
        cost.forward(start=min(L, edit_start(e) + after))
    return cost.total


def check_sweep_work(
    model: HookedModel,
    edits: Sequence[Edit],
    *,
    also: float = 0.0,
    pos: int | None = None,
    rows: Sequence[int] | None = None,
    parts: Sequence[tuple[float, Sequence[int] | None]] | None = None,
    shared: int = 0,
) -> float:
    """The forward-equivalents of a sweep of ``edits`` (:func:`sweep_work`) and ``also`` (the
    caller's other passes: a source run, the values an ablation splices in), refused past the
    work limit before any pass; returns them. ``parts`` (a run in chunks): ``(share of the
    prompts, rows its metric reads)`` per chunk, each chunk's sweep unembedding its own rows;
    ``shared``: as :func:`sweep` takes it.

    Raises:
        InterpError: past :func:`interp.engine.batching.work_limit`, with the estimate.
    """
    parts = [(1.0, rows)] if parts is None else parts
    sweeps = sum(share * sweep_work(model, edits, pos=pos, rows=r, shared=shared)
                 for share, r in parts)  # fmt: skip
    return check_work(
        sweeps + also,
        what=f"an exact sweep of {len(edits):,} edits",
        fix="sweep fewer heads, components or positions, or estimate them first (attribute_heads)",
    )


def sweep(
    model: HookedModel,
    tokens: torch.Tensor,
    edits: Sequence[Edit],
    metric: Metric,
    *,
    values: dict[str, torch.Tensor] | None = None,
    batch_size: Any = None,
    memory_budget: Any = None,
    progress: bool = False,
    desc: str = "sweep",
    score_tokens: torch.Tensor | None = None,
    shared: int = 0,
    checked: bool = False,
) -> SweepResult:
    """Metric values, one per edit in the order given, and the unedited value.

    ``values[hook]`` (the full activation of that hook, batch first) supplies
    each edited slice; without ``values`` the slices are zeroed. The metric is
    scored against ``score_tokens`` (default ``tokens``). ``shared``: the first positions
    where ``values`` are the base run's own (a patch from a run whose tokens agree there,
    :func:`interp.engine.sweeps.suffix.shared_prefix`); passes then compute only the later
    positions where the runtime can (``resume-suffix``). ``checked``: the caller has already
    refused work past the limit (:func:`check_sweep_work`, as the pipeline's plan does for
    every chunk), so it is not counted again. The caller runs this in eval mode under
    no_grad and has validated its inputs.

    Raises:
        InterpError: for an empty edit list, work past the work limit
            (:func:`interp.engine.batching.check_work`), a bad batch size or budget, or a
            metric that returns a non-scalar or non-finite value.
    """
    if not edits:
        raise InterpError("nothing to sweep: no edits given")
    rt = runtime_of(model)
    starts = [edit_start(e) for e in edits]
    if not checked:
        check_sweep_work(model, edits)
    rows = metric.rows
    k = sweep_copies(model, tokens, edits, batch_size, memory_budget, rows)
    path, note = choose_path(model, tokens, edits, rows=rows, shared=shared)
    passes = pack(starts, k, mixed=path == "loop")  # the edits each pass carries
    cost = Cost.of(model, tokens.shape[1], rows)
    bar = _bar(len(passes) + 1, progress, desc)
    results: dict[int, float] = {}
    try:
        if path == suffix.ResumeSuffix.name:
            engine = suffix.ResumeSuffix(rt, tokens, set(starts), rows, shared)
            base_logits, run = engine.base_logits, engine.run
            cost.forward(shared / tokens.shape[1], stop=rt.n_layers)  # the kept prefix's pass
        elif path == AfterBlock.name:
            engine: Any = AfterBlock(rt, tokens, set(starts), rows)
            base_logits, run = engine.base_logits, engine.run
        elif path == ResumeBlocks.name:
            engine = ResumeBlocks(rt, tokens, set(starts), rows)
            base_logits, run = engine.base_logits, engine.run
        else:
            base_logits = rt.run(tokens, rows=rows)

            def run(packed, values, rows, cost):
                return loop_pass(rt, tokens, packed, values, cost)  # rows: every row

        cost.forward()
        scored = tokens if score_tokens is None else score_tokens
        base = scalar(metric(base_logits, scored), metric.name)
        if path != "loop":
            engine.base_logits = None  # the base run's logits are not held through the sweep
        del base_logits
        bar.update(1)
        for packed in passes:
            outs = run([edits[i] for i in packed], values, rows, cost)
            if isinstance(outs, torch.Tensor):  # the pass's copies stacked: scored at once
                got = metric.of_copies(outs, scored, len(packed))
            else:  # the loop: one pass per edit
                got = [scalar(metric(x, scored), metric.name) for x in outs]
            results.update(zip(packed, got))
            del outs  # a pass's logits are gone before the next pass makes its own
            bar.update(1)
    finally:
        bar.close()
    return SweepResult(
        values=[results[i] for i in range(len(edits))],
        base=base,
        path=path,
        note=note,
        passes=len(passes) + 1,
        cost=cost.total,  # rounded once, where the analysis states it
    )


class _NoBar:
    """A progress bar that shows nothing (``progress=False``; a disabled tqdm costs more)."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, progress: bool, desc: str) -> Any:
    """A bar over ``total`` passes: tqdm's when ``progress``, else one that shows nothing."""
    if not progress:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="pass")


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    return renamed(__name__, name)  # an old name warns and names the new one

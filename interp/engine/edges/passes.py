"""The edge engine's passes over many edits: circuits and single-edge effects.

:func:`evaluate_masks` (circuits: edges outside a mask carry the replacement) and
:func:`patch_edges` (edge patches: only the masked edges move) pack their edits into
batched passes (:func:`interp.engine.edges.run.run`, one :class:`~interp.engine.edges.run.EdgeRun`
each) as many copies at a time as the budget holds
(:func:`interp.engine.edges.cost.edits_per_pass`).

Example:
    >>> import torch
    >>> from interp.core.metrics import logit_diff_metric
    >>> from interp.engine.edges.task import begin_edge_task, check_edge_task
    >>> from interp.models import load_model
    >>> task = begin_edge_task(check_edge_task(load_model("induction-2l"),
    ...     torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]]), corrupted_tokens=torch.tensor(
    ...     [[0, 5, 6, 7, 9, 5, 6, 7]]), metric=logit_diff_metric(8, 9), ablation="patch"))
    >>> every = task.graph.valid
    >>> round(evaluate_masks(task, [~every])[0] - task.base_value, 5)  # nothing replaced
    0.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from interp.engine.batching import pack
from interp.engine.edges.cost import Edit, edit_starts, edits_per_pass
from interp.engine.edges.run import run
from interp.runtime import kept_rows, scatter_rows


def as_tensor(mask: np.ndarray, device: Any = None) -> torch.Tensor:
    """A bool mask as a float tensor (the engine's mask dtype)."""
    return torch.as_tensor(mask.astype(np.float32), device=device)


def evaluate_masks(
    prep: Any,
    masks: Sequence[np.ndarray],
    *,
    progress: bool = False,
    desc: str = "circuits",
) -> list[float]:
    """The metric with each mask's edges carrying the replacement (``ref`` = running), one
    full pass per group of copies that fits :func:`edits_per_pass`."""
    from tqdm.auto import tqdm

    from interp.core.protocol import eval_no_grad

    rt = prep.rt
    k = edits_per_pass(prep, running=True)
    out: list[float] = []
    bar = tqdm(total=len(masks), disable=not progress, desc=desc, unit="circuit")
    try:
        with eval_no_grad(rt.model):
            for chunk in pack([0] * len(masks), k):
                group = [masks[i] for i in chunk]
                stacked = torch.stack([as_tensor(m, prep.tokens.device) for m in group])
                er = prep.edge_run(stacked, ref=None)
                logits = run(rt, prep.base, er, rows=prep.metric.rows)
                prep.cost.forward(len(group))
                out.extend(prep.metric.of_copies(logits, prep.tokens, len(group)))
                del logits, er  # gone before the next pass makes its own
                bar.update(len(group))
    finally:
        bar.close()
    return out


def patch_edges(
    prep: Any,
    edits: Sequence[Edit],
    *,
    progress: bool = False,
    desc: str = "edges",
) -> list[float]:
    """The metric with each edit's edges (``(sender, receiver)`` index pairs, or triples with
    a position for ``positions="each"``) moved by ``alt - base`` (``ref`` = the base run's
    outputs), every other input the base run's: each pass resumes at its first edited
    receiver's layer, copies of one starting layer share passes, a pass that edits only
    the logits reads only them. Masks are built a pass at a time, so any number of edits
    fits in memory. It runs in the caller's eval mode without gradients
    (:func:`interp.core.protocol.eval_no_grad`, entered once around the whole run)."""
    from tqdm.auto import tqdm

    rt, graph = prep.rt, prep.graph
    L = graph.n_layers
    shape = graph.valid.shape
    slot = None  # the senders held (prep.senders): their place on the masks' sender axis
    if prep.senders is not None:
        slot = {s: i for i, s in enumerate(prep.senders)}
        shape = (len(slot), shape[1])
    shape = (*shape, prep.tokens.shape[1]) if prep.each else shape
    starts = edit_starts(prep, edits)
    k = edits_per_pass(prep, running=False, logits_only=all(st >= L for st in starts))
    chunks = pack(starts, k)
    values: dict[int, float] = {}
    bar = tqdm(total=len(edits), disable=not progress, desc=desc, unit="edit")
    try:
        kept: dict[int, Any] = {}
        need = {starts[c[0]] for c in chunks} - {0, L}
        if need:
            _, kept = rt.block_inputs(prep.base, need, rows=(-1,))  # logits unread
            prep.cost.forward(rows=(-1,))
        final = prep.base_inputs["final"]
        n = prep.tokens.shape[1]
        keep = kept_rows(prep.metric.rows, n)
        cut = None  # the logits-only passes' task, at the rows the metric reads alone
        if L in starts and keep is not None and len(keep) < n and not prep.each:
            cut = _at_rows(prep, keep)
        for chunk in chunks:
            start = starts[chunk[0]]
            stacked = torch.zeros(len(chunk), *shape, device=prep.tokens.device)
            for c, i in enumerate(chunk):
                for idx in edits[i]:
                    at = idx if slot is None else (slot[idx[0]], *idx[1:])
                    stacked[(c, *at)] = 1.0
            if start >= L and cut is not None:  # the logits' input at the rows read alone
                er = cut.edge_run(stacked, ref=cut.base_out)
                fin = cut.base_inputs["final"]
                logits = scatter_rows(run(rt, prep.base, er, start=L, final=fin), keep, n)
            else:
                er = prep.edge_run(stacked, ref=prep.base_out)
                logits = run(
                    rt, prep.base, er, start=start, kept=kept, final=final,
                    rows=prep.metric.rows,
                )  # fmt: skip
            prep.cost.forward(len(chunk), start=start)
            values.update(zip(chunk, prep.metric.of_copies(logits, prep.tokens, len(chunk))))
            del logits, er, stacked  # gone before the next pass makes its own
            bar.update(len(chunk))
    finally:
        bar.close()
    return [values[i] for i in range(len(edits))]


def _at_rows(prep: Any, keep: list[int]) -> Any:
    """The edge task ``prep`` at the positions ``keep`` alone: its senders' outputs (``alt``,
    ``base_out``), the base run's final residual and its positions mask cut there once, with
    prefix sums of its own, so that each pass editing only the logits sums the edges' edits
    at the rows the metric reads (:func:`interp.runtime.kept_rows`)."""
    at = torch.tensor(keep, device=prep.alt.device)
    where, final = prep.positions, prep.base_inputs["final"]
    return dataclasses.replace(
        prep,
        alt=prep.alt.index_select(2, at),
        base_out=prep.base_out.index_select(2, at.to(prep.base_out.device)),
        positions=None if where is None else where[at.to(where.device)],
        base_inputs={"final": final.index_select(1, at.to(final.device))},
        cum={},
    )


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    # issue 44: one pass (and its check) lives in interp.engine.edges.run, costs in .cost
    return renamed(__name__, name)

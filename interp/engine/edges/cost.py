"""The edge engine's cost model: the memory an edge analysis holds and the passes it runs.

Every circuit analysis (:mod:`interp.analysis.circuits`) states its cost here, before its
first pass: :func:`edge_footprint`, the :class:`~interp.engine.chunks.Footprint` the runner
plans chunks with (what is held per prompt, per copy of a pass and whatever the chunk), from
the model's config (:mod:`interp.core.memory`), the graph, the prompts' length and the
metric's rows; :func:`copy_bytes` (of a task: :func:`copy_bytes_of`, which the footprint and
each chunk's passes share) and :func:`edits_per_pass`, one copy of an edited pass and how
many copies a pass packs (:mod:`interp.engine.batching`); :func:`pass_work`,
:func:`gradient_work` and :func:`patch_cost`, the forward-equivalents the passes will run
(:mod:`interp.engine.cost`'s FLOPs). Residual-width tensors of the engine are float32.

Example:
    >>> import torch
    >>> from interp.core.metrics import logit_diff_metric
    >>> from interp.engine.edges.task import check_edge_task
    >>> from interp.models import load_model
    >>> task = check_edge_task(load_model("induction-2l"), torch.tensor([[0, 5, 6, 7, 8, 5]]),
    ...     corrupted_tokens=torch.tensor([[0, 5, 6, 7, 9, 5]]), metric=logit_diff_metric(8, 9),
    ...     ablation="patch")
    >>> edge_footprint(task, "eap").per_prompt > 0, pass_work(task, 2) == 2 * pass_work(task)
    (True, True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from interp.core.memory import (
    HEAP_KEPT,
    Dims,
    backward_bytes,
    forward_bytes,
    logit_bytes,
    stream_bytes,
)
from interp.core.protocol import HookedModel
from interp.engine.batching import copies_per_pass
from interp.engine.chunks import Footprint
from interp.engine.edges.graph import Graph
from interp.engine.edges.sums import GATHER
from interp.runtime import Runtime


def edge_footprint(
    task: Any,
    kind: str,
    *,
    copies: int = 1,
    resumes: int = 0,
    logits_only: bool = False,
) -> Footprint:
    """The memory an edge analysis holds (a :class:`~interp.engine.chunks.Footprint`), from
    the model's config, the graph, the prompts' length and the metric's rows. Per prompt
    (``S`` senders, ``R`` receivers, ``L`` layers, ``H`` heads a layer; the engine's
    residual-width tensors are float32):

    * ``"patch"`` (path patching, exact edges): the base and replacement outputs of every
      sender (``2 S``), each receiver layer's base input (``2 L + 1``), the stream entering
      each of the ``resumes`` blocks passes resume at and the senders a sum gathers
      (:data:`interp.engine.edges.sums.GATHER`, from both outputs); per copy of a pass,
      :func:`copy_bytes` (up to ``copies``: the most edits that resume
      at one block; ``logits_only`` when every edit reads only the logits' input). First,
      the pass that records the replacement outputs: a layer's heads' outputs at once
      (``H``) beside a forward pass;
    * ``"circuit"`` (circuit evaluation): the replacement outputs and their prefix sum
      (``2 S``, the sum made by the first pass that edits most of a layer's edges); per
      copy, a running pass (:func:`copy_bytes` with the store), up to
      ``copies`` (the circuits); first, the pass that records the replacement outputs;
    * ``"eap"`` and ``"eap-ig"`` (edge attribution): the larger of its phases. The backward
      pass: the replacement outputs and this pass's (``2 S``), a forward and backward pass's
      activations (:func:`interp.core.memory.backward_bytes`). The gradient matrix: the senders'
      difference (``S``), every receiver's gradient (``R``), the gradients at each layer's
      read points and the streams they are carried back through (``2 L + 1``). EAP-IG's
      later steps: the difference and the matrix beside a backward pass and the embeddings
      it interpolates between.

    The fixed part is the graph's masks and scores."""
    rt, graph = task.rt, task.graph
    model = rt.model
    P = int(task.tokens.shape[1])
    metric_rows = task.metric.rows if task.metric is not None else None
    rows = rt.unembedded(metric_rows)  # the logits' rows a pass unembeds
    S, R, L = len(graph.senders), len(graph.receivers), graph.n_layers
    fixed = S * R * (P if task.each else 1) * 8 * 4
    running = kind == "circuit"
    if kind not in ("eap", "eap-ig"):  # a copy of an edited pass, as each chunk sizes it
        per_copy, store = copy_bytes_of(
            task, running=running, logits_only=logits_only and not running
        )
    else:  # edge attribution: the larger of its phases
        per = eap_bytes(model, senders=S, receivers=R, pos=P, rows=rows, steps=kind == "eap-ig")
        return Footprint(fixed=int(fixed), per_prompt=int(per))
    f = stream_bytes(model, P, element=4)  # a sender's output, a receiver's gradient
    e = stream_bytes(model, P)  # a residual stream of the model's own
    recording = graph.n_heads * e + forward_bytes(model, 1, P, rows=rows)  # the sender pass
    if running:
        held = 2 * S * f
    else:
        held = 2 * S * f + (2 * L + 1 + int(resumes)) * e + 2 * GATHER * f
    return Footprint(
        fixed=int(fixed), per_prompt=int(held), per_copy=int(per_copy), reread=int(store),
        most_copies=max(1, int(copies)), first=int(recording),
    )  # fmt: skip


def eap_bytes(
    model: HookedModel,
    *,
    senders: int,
    receivers: int,
    pos: int,
    rows: Any = None,
    steps: bool = False,
) -> int:
    """Edge attribution's peak bytes per prompt of ``pos`` tokens (:func:`edge_footprint`'s
    ``"eap"``; ``steps``: EAP-IG's later steps too), from the model's config alone (a model
    object with only ``cfg`` will do: ``benchmarks/memory_plan.py`` plans 8B and 70B shapes
    with it). ``rows`` are the logits' rows a pass unembeds."""
    m = Dims.of(model)
    S, R, L, P = int(senders), int(receivers), m.n_layers, int(pos)
    f = stream_bytes(model, P, element=4)  # a sender's output, a receiver's gradient
    e = stream_bytes(model, P)  # a residual stream of the model's own
    grads = backward_bytes(model, 1, P, rows=rows)
    backward = 2 * S * f + grads
    read = L * (m.n_heads + 2 * m.n_kv_heads) * m.d_head * P * 4 + L * f  # q, k, v, mlp
    # the backward's per-layer tensors stay resident beside the matrix (HEAP_KEPT)
    kept = HEAP_KEPT * (grads - logit_bytes(model, P, rows))
    matrix = (S + R) * f + read + (2 * L + 1) * e + kept
    per = max(backward, matrix)
    if steps:
        per = max(per, (S + R) * f + grads + 3 * e)
    return int(per)


def copy_bytes(
    graph: Graph,
    rt: Runtime,
    pos: int,
    *,
    running: bool,
    rows: Sequence[int] | None = None,
    logits_only: bool = False,
) -> tuple[int, int]:
    """The edge engine's memory model of one copy of one prompt in a pass of ``pos`` tokens:
    its bytes and the part later layers read back. A forward pass's transients, the logits at
    the metric's ``rows`` where the runtime unembeds only those
    (:func:`interp.core.memory.forward_bytes`); the state a resumed pass starts from, repeated per
    copy; one layer's edits while its receivers are recomputed: the edit of each of its
    attention receivers (held through its q, k and v hooks) and, first, the sum subtracted
    from it with the senders gathered for it (:data:`~interp.engine.edges.sums.GATHER` at a
    time), then the edited inputs and their norm (a query head's each); in a running pass,
    the store of every sender's difference and their running total, which later layers read
    back. A pass that edits only the logits' input (``logits_only``) runs no block: per copy
    the edit, the edited final stream and its logits at ``rows``. Residual-width tensors of
    the engine are float32."""
    model = rt.model
    read = rt.unembedded(rows)  # the logits' rows a pass unembeds
    f = stream_bytes(model, pos, element=4)
    e = stream_bytes(model, pos)
    if logits_only:
        return f + e + logit_bytes(model, pos, rows), 0  # the readout reads only the rows
    R_l = graph.n_heads + 2 * graph.n_kv_heads  # a layer's attention receivers
    layer = R_l * f + max((R_l + GATHER) * f, 2 * graph.n_heads * e)
    store = (len(graph.senders) + 1) * f if running else 0
    per_copy = forward_bytes(model, 1, pos, rows=read) + e + layer + store
    return per_copy, store


def copy_bytes_of(task: Any, *, running: bool, logits_only: bool = False) -> tuple[int, int]:
    """:func:`copy_bytes` of an edge task: its graph, runtime, prompts' length and metric's
    rows (every row without a metric).

    Args:
        task: The edge task (:class:`interp.engine.edges.task.EdgeTask`).
        running: Whether its passes are running passes (circuits).
        logits_only: Whether a pass edits only the logits' input.

    Returns:
        ``(bytes of a copy, the part later layers read back)`` per prompt.
    """
    rows = task.metric.rows if task.metric is not None else None
    return copy_bytes(
        task.graph, task.rt, int(task.tokens.shape[1]), running=running, rows=rows,
        logits_only=logits_only,
    )  # fmt: skip


def edits_per_pass(prep: Any, *, running: bool, logits_only: bool = False) -> int:
    """Copies per pass (:func:`interp.engine.batching.copies_per_pass`) under the task's
    budget (:func:`copy_bytes_of`)."""
    b = prep.tokens.shape[0]
    per_copy, store = copy_bytes_of(prep, running=running, logits_only=logits_only)
    return copies_per_pass(
        prep.tokens.numel(), prep.tokens.device, per_copy=b * per_copy, reread=b * store,
        memory_budget=prep.memory_budget,
    )  # fmt: skip


Edit = Sequence[tuple[int, ...]]  # the (sender, receiver[, position]) indices an edit moves


def edit_starts(prep: Any, edits: Sequence[Edit]) -> list[int]:
    """The block each edit's pass resumes at: its first edited receiver's layer (``n_layers``
    when it edits only the logits; 0 on a runtime that cannot resume)."""
    graph, L = prep.graph, prep.graph.n_layers
    starts = [min((graph.receiver_layer[e[1]] for e in edit), default=L) for edit in edits]
    if not prep.rt.can_resume:  # passes run whole (the logits' input still alone)
        starts = [0 if st < L else L for st in starts]
    return starts


def pass_shape(prep: Any, edits: Sequence[Edit]) -> dict[str, Any]:
    """What :func:`~interp.engine.edges.passes.patch_edges` will hold for ``edits`` (its
    memory model, :func:`edge_footprint`): ``resumes``, the blocks whose entering stream
    it keeps to resume there; ``copies``, the most edits one pass can carry (those that
    resume at one block); ``logits_only``, whether every pass edits only the logits."""
    L = prep.graph.n_layers
    starts = edit_starts(prep, edits)
    return {
        "resumes": len(set(starts) - {0, L}),
        "copies": max(Counter(starts).values(), default=1),
        "logits_only": all(st >= L for st in starts),
    }


def patch_cost(prep: Any, edits: Sequence[Edit]) -> float:
    """The forward-equivalents :func:`~interp.engine.edges.passes.patch_edges` will run for
    ``edits`` (known before)."""
    L = prep.graph.n_layers
    starts = edit_starts(prep, edits)
    cost = prep.cost.like()
    if any(0 < st < L for st in starts):
        cost.forward(rows=(-1,))  # the states the passes resume from: logits unread
    for st in starts:
        cost.forward(start=min(st, L))  # from the edit's first layer, then the metric's rows
    return cost.total


def pass_work(task: Any, n: float = 1.0) -> float:
    """The forward-equivalents of ``n`` full passes unembedding the metric's rows (the
    engine's cost model, :mod:`interp.engine.cost`)."""
    cost = task.cost.like()
    cost.forward(n)
    return cost.total


def gradient_work(task: Any, n: int = 1) -> float:
    """The forward-equivalents of ``n`` forward and backward passes (EAP's, per step)."""
    cost = task.cost.like()
    for _ in range(n):
        cost.forward()
        cost.backward()
    return cost.total

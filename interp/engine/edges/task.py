"""An edge task: every input of a circuit analysis checked, and the passes it starts from.

Path patching, edge attribution and circuit evaluation all start the same way:
check the model and build its graph, then check the tokens (and the corrupted tokens
for ``ablation="patch"``), the metric and the positions before any forward pass, then
the cache; verify once
that this model's receivers can be given their own inputs exactly
(:func:`interp.engine.edges.run.check_exact`); then run the base run (recording
every sender's output and every receiver layer's input) and the source run.
:func:`check_edge_task` checks the inputs and builds the graph, so a caller can refuse
work it cannot do before any pass; :func:`begin_edge_task` then checks the cache (its one
stopped pass) and runs the first passes. In chunks (:mod:`interp.engine.runner`),
:func:`prepare_chunks` is what the chunks share and :func:`begin_chunk` begins each
chunk's sub-task.

The base run is the one whose edges are edited (:mod:`interp.engine.direction`):
the clean run when noising (and for zero and mean ablation, and every circuit
evaluation), the corrupted run when denoising.

Example:
    >>> import torch
    >>> from interp.core.metrics import logit_diff_metric
    >>> from interp.models import load_model
    >>> task = check_edge_task(load_model("induction-2l"), torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]]),
    ...              corrupted_tokens=torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]]),
    ...              metric=logit_diff_metric(8, 9), ablation="patch")
    >>> task = begin_edge_task(task)
    >>> task.base_value > 0 > task.source_value
    True
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch

from interp.core.checks import check_seed
from interp.core.errors import InterpError
from interp.core.metrics import scalar
from interp.core.protocol import HookedModel, eval_no_grad
from interp.engine.ablations import resample_index
from interp.engine.cache import cache_rows, check_cache_in
from interp.engine.cost import ALL_ROWS, Cost
from interp.engine.direction import runs
from interp.engine.edges import cost as edge_cost
from interp.engine.edges.graph import Graph, build_graph
from interp.engine.edges.run import (
    EdgeRun,
    check_exact,
    input_hooks,
    layer_parts,
    replacement,  # noqa: F401 - its home was here
    replacement_outputs,
    sender_outputs,
)
from interp.engine.runs import check_runs
from interp.runtime import Layer, Runtime, runtime_of

EDGE_ABLATIONS = ("patch", "zero", "mean", "resample")


@dataclasses.dataclass
class EdgeTask:
    """Checked inputs and the senders' outputs every circuit analysis starts from."""

    graph: Graph
    parts: list[Layer]
    tokens: torch.Tensor  # the clean tokens: the metric is scored against them
    corrupted: torch.Tensor | None
    metric: Any
    ablation: str
    direction: str
    base_out: torch.Tensor | None  # [sender, batch, pos, d_model] of the base run
    alt: torch.Tensor | None  # the replacement outputs: the source run's, zero or a mean
    base_value: float
    positions: torch.Tensor | None
    base_inputs: dict[str, torch.Tensor]  # every receiver layer's base input (input_hooks)
    source_value: float | None = None  # the metric of the source run (ablation="patch")
    each: bool = False  # positions="each": one edge per position (masks [sender, receiver, pos])
    seed: int = 0  # of the resample ablation's draw
    cum: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # shared prefix sums
    cost: Cost = dataclasses.field(default_factory=lambda: Cost(1))
    rt: Runtime | None = None  # the model's runtime: every pass of the task runs through it
    # a chunk of a larger batch (interp.engine.chunks): the whole batch's mean outputs (mean
    # ablation), the sequences this chunk's rows resample from (resample ablation)
    mean_out: torch.Tensor | None = None  # [sender, 1, pos, d_model]
    resample_tokens: torch.Tensor | None = None
    resample_index: torch.Tensor | None = None  # the whole batch's draw (chunked resample)
    memory_budget: Any = None  # bytes the task's passes may use (None: the default budget)
    checked_cache: Any = None  # the cache checked against every prompt (prepare_chunks)
    # a patch that moves only some senders' outputs (path_patch): the senders (sorted) whose
    # outputs its passes record; base_out and alt then hold theirs alone (None: every one)
    senders: list[int] | None = None

    def pass_work(self, n: float = 1.0) -> float:
        """:func:`interp.engine.edges.cost.pass_work` of this task."""
        return edge_cost.pass_work(self, n)

    def gradient_work(self, n: int = 1) -> float:
        """:func:`interp.engine.edges.cost.gradient_work` of this task."""
        return edge_cost.gradient_work(self, n)

    @property
    def base(self) -> torch.Tensor:
        """The tokens of the run whose edges are edited (:func:`interp.engine.direction.runs`):
        the clean tokens when noising, the corrupted ones when denoising."""
        return runs(self.direction, self.tokens, self.corrupted)[0]

    @property
    def source(self) -> torch.Tensor | None:
        """The tokens of the run the base run is patched from (the other run)."""
        return runs(self.direction, self.tokens, self.corrupted)[1]

    @property
    def clean_value(self) -> float:
        """The clean run's metric."""
        return self.base_value if self.direction == "noising" else float(self.source_value)

    def edge_run(self, masks: torch.Tensor, *, ref: torch.Tensor | None) -> EdgeRun:
        """The :class:`EdgeRun` for stacked ``masks``: ``ref=None`` edits against each pass's
        own sender outputs (circuits), ``base_out`` against the base run's (edge patches)."""
        return EdgeRun(
            self.graph,
            self.parts,
            masks,
            self.alt,
            ref,
            self.tokens.shape[0],
            self.positions,
            self.cum,
            self.senders,
        )

    def replacement(self, outputs: torch.Tensor) -> torch.Tensor:
        """:func:`interp.engine.edges.run.replacement_outputs` of this task."""
        return replacement_outputs(self, outputs)

    def rows(self, rows: slice, metric: Any) -> EdgeTask:
        """This checked task on the prompts ``rows`` (a chunk of the batch, not begun),
        scored by ``metric`` (that chunk's: :meth:`interp.core.metrics.Metric.chunk`)."""
        sub = dataclasses.replace(
            self, tokens=self.tokens[rows], metric=metric,
            corrupted=None if self.corrupted is None else self.corrupted[rows],
            base_out=None, alt=None, base_value=float("nan"), base_inputs={}, source_value=None,
            cum={}, cost=self.cost.like(), parts=[], checked_cache=None,
        )  # fmt: skip
        if self.resample_index is not None:
            sub.resample_tokens = self.tokens[self.resample_index[rows]]
        return sub


def check_edge_task(
    model: HookedModel,
    tokens: Any,
    *,
    corrupted_tokens: Any,
    metric: Any,
    ablation: str,
    positions: Any = None,
    direction: str = "noising",
    seed: Any = 0,
    per_position: bool = False,
) -> EdgeTask:
    """Every input of an edge task checked, and its graph built: no forward pass yet
    (:func:`begin_edge_task` runs them), so a caller can refuse work it cannot do first.

    ``positions="each"`` (edges per position) is accepted only from a caller that reads
    edges per position (``per_position``).

    Raises:
        InterpError: for an unknown ablation or direction, corrupted tokens missing for
            ``"patch"``, given otherwise or equal to the clean tokens, tokens of different
            shapes, a metric that needs an LM head the model lacks, or positions out of range.
    """
    graph = build_graph(model)  # the model checked (check_model) and its graph, then the data
    rt = runtime_of(model)
    if ablation not in EDGE_ABLATIONS:
        raise InterpError(
            f"unknown ablation {ablation!r}; choose one of {', '.join(EDGE_ABLATIONS)}"
        )
    each = isinstance(positions, str) and positions == "each"
    if each and not per_position:
        raise InterpError(
            "positions='each' (one edge per position) is not read here: pass None or a list "
            "of positions"
        )
    r = check_runs(
        model, tokens, patching=ablation == "patch", corrupted_tokens=corrupted_tokens,
        direction=direction, metric=metric, positions=None if each else positions,
        ablation=ablation, needs_metric=True, what="ablation='patch'",
    )  # fmt: skip
    tokens, corrupted_tokens, direction, m, pos = (
        r.tokens, r.corrupted, r.direction, r.metric, r.positions
    )  # fmt: skip
    if ablation in ("mean", "resample") and tokens.shape[0] < 2:
        raise InterpError(
            f"{ablation} ablation of one sequence replaces each output by itself (there is "
            "no other sequence); pass at least two"
        )
    seed = check_seed(seed)
    return EdgeTask(
        graph=graph,
        parts=[],
        tokens=tokens,
        corrupted=corrupted_tokens,
        metric=m,
        ablation=ablation,
        direction=direction,
        base_out=None,
        alt=None,
        base_value=float("nan"),
        positions=None if pos is None else pos.to(tokens.device),
        base_inputs={},
        each=each,
        seed=seed,
        cost=Cost.of(model, tokens.shape[1], m.rows),
        rt=rt,
    )


def edge_inputs(task: EdgeTask) -> tuple[Any, ...]:
    """What every rank must be given alike for ``task`` (the runner's agreement check,
    :mod:`interp.engine.agreement`): its tokens, metric and options, not what its passes
    compute.

    Args:
        task: A checked edge task (:func:`check_edge_task`).

    Returns:
        A tuple to hash.
    """
    return (task.tokens, task.corrupted, task.base, task.metric, task.ablation, task.direction,
            task.positions, task.each, task.seed, task.resample_tokens)  # fmt: skip


def begin_edge_task(
    task: EdgeTask, *, cache: Any = None, base_pass: bool | Literal["metric"] = True
) -> EdgeTask:
    """Run a checked task's first passes: the cache check, the once-per-model exactness
    check, the base run (every sender's output and every receiver layer's input) and the
    source run.

    ``base_pass=False`` leaves the base senders' outputs to the caller (edge attribution
    takes them from its own forward pass): ``base_out`` is None, and so is ``alt`` for
    zero, mean and resample ablation (:func:`replacement` makes it). ``base_pass="metric"``
    (circuit evaluation with a corrupted prompt, which reads only the running pass's
    outputs) runs a plain forward for the base metric. With ``ablation="patch"`` the source
    pass also gives ``source_value``: every edge replaced is the source run.

    Raises:
        InterpError: for a cache of other tokens, or a model whose receivers cannot be given
            their own inputs exactly.
    """
    with eval_no_grad(task.rt.model):  # a cache of other tokens is refused, as everywhere
        check_cache_in(task.rt, task.graph.hook_names, task.tokens, cache)
        return _first_passes(task, base_pass)


def begin_chunk(
    task: EdgeTask, chunk: Any, *, base_pass: bool | Literal["metric"] = True
) -> EdgeTask:
    """A runner chunk's sub-task (:class:`interp.engine.runner.Chunk`: its rows, metric and
    budget), begun: :func:`begin_edge_task`'s passes on its prompts. Its cache was checked
    against every prompt before the first chunk (:func:`prepare_chunks`) and the engine reads
    no activation from it, so no chunk checks it again. Its passes are counted in its own
    ``cost``, in forward-equivalents of its own prompts. It runs in the caller's eval mode
    without gradients (:func:`interp.core.protocol.eval_no_grad`, entered once around the
    runner's whole run).

    Raises:
        InterpError: for a model whose receivers cannot be given their own inputs exactly.
    """
    sub = task.rows(chunk.rows, chunk.metric)
    sub.memory_budget = chunk.budget  # what the chunk's passes pack copies into
    return _first_passes(sub, base_pass)


def _first_passes(task: EdgeTask, base_pass: bool | Literal["metric"]) -> EdgeTask:
    """:func:`begin_edge_task` after its cache check: the exactness check, then the passes
    over the engine's senders (the base run's, the source run's), then the base metric's
    plain pass (``base_pass="metric"``) or the replacement outputs."""
    rt, graph, m, tokens = task.rt, task.graph, task.metric, task.tokens
    metric_only = base_pass == "metric" and task.ablation == "patch"  # a plain base pass
    task.parts = parts = layer_parts(rt)
    check_exact(rt, graph, parts, tokens)
    only = task.senders if task.ablation == "patch" else None  # a replacement needs them all
    if base_pass and not metric_only:
        task.base_out, logits = sender_outputs(
            rt, graph, task.base, parts=parts,
            extra_hooks=input_hooks(graph, task.base_inputs), rows=m.rows, senders=only,
        )  # fmt: skip
        task.base_value = scalar(m(logits, tokens), m.name)
        task.cost.forward()
    if task.ablation == "patch":
        task.alt, logits = sender_outputs(
            rt, graph, task.source, parts=parts, rows=m.rows, senders=only
        )
        task.source_value = scalar(m(logits, tokens), m.name)
        task.cost.forward()
    if task.base_out is not None and task.ablation != "patch":
        task.alt = replacement_outputs(task, task.base_out)
    elif metric_only:  # the base run's metric alone (its outputs are not read)
        task.base_value = scalar(m(rt.run(task.base, rows=m.rows), tokens), m.name)
        task.cost.forward()
    return task


def prepare_chunks(task: EdgeTask, chunks: list[slice], *, cache: Any = None) -> float:
    """What a checked task's chunks share, run once before the first (a runner task's
    ``prepare``, :mod:`interp.engine.runner`): the cache checked once against every prompt
    (kept for :func:`task_rows`); with several chunks, mean ablation's senders' mean outputs
    over every prompt (one pass, a chunk at a time) and resample ablation's one draw for the
    whole batch, so the chunks give the numbers of one batch. Returns the passes'
    forward-equivalents (of every prompt). Like :func:`begin_chunk`, it runs in the caller's
    eval mode without gradients.

    Raises:
        InterpError: for a cache of other tokens.
    """
    rt, n = task.rt, task.tokens.shape[0]
    cost = task.cost.like()
    task.checked_cache = check_cache_in(rt, task.graph.hook_names, task.tokens, cache)
    if len(chunks) > 1 and task.ablation == "mean":
        total = None
        for sl in chunks:
            out, _ = sender_outputs(rt, task.graph, task.base[sl])
            part = out.double().sum(1, keepdim=True)
            total = part if total is None else total + part
            cost.forward((sl.stop - sl.start) / max(1, n), rows=ALL_ROWS)
        task.mean_out = (total / n).float()
    elif len(chunks) > 1 and task.ablation == "resample":
        task.resample_index = resample_index(n, None, task.seed)
    return cost.total


def task_rows(task: EdgeTask, chunk: Any) -> tuple[EdgeTask, Any]:
    """A runner chunk's sub-task (:class:`interp.engine.runner.Chunk`: its rows, metric and
    budget) and its rows of the cache :func:`prepare_chunks` checked: begin the sub-task
    (:func:`begin_edge_task`) with that cache. Its passes are counted in its own ``cost``, in
    forward-equivalents of its own prompts."""
    sub = task.rows(chunk.rows, chunk.metric)
    sub.memory_budget = chunk.budget  # what the chunk's passes pack copies into
    return sub, cache_rows(task.checked_cache, chunk.rows)


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    # issue 44: check and begin were renamed (no bare names); the cost model moved to .cost
    return renamed(__name__, name)

"""Prompts in chunks under a memory budget, and the cost of a run stated before it starts.

One rule for every analysis that runs the model. At its peak an analysis holds
some bytes that do not grow with the number of prompts (``fixed``: a graph's
masks, a gradient matrix per receiver) and some that do (``per_prompt``: the
activations of a forward pass, the senders' outputs, the states a sweep resumes
from): its :class:`Footprint`, computed from the model's config, the prompts'
length and the analysis's options (:mod:`interp.core.memory` has the pieces). The
prompts are split into the fewest chunks of near-equal size whose peak,
``fixed + prompts_per_chunk * per_prompt``, stays under the budget
(:func:`interp.core.memory.budget`: ``memory_budget`` bytes, else a quarter of the
memory free on the model's device). Each chunk runs as a batch of its own, and
the metric's values on the chunks combine into its value on every prompt,
``m(all) = sum_c w_c m(c) / sum_c w_c`` (:meth:`interp.core.metrics.Metric.chunk`):
exact for every metric that is a mean over prompts (or over the predictions a
loss mask counts), because a mean of means with these weights is the mean, and
so is the gradient of one (edge and head attribution). A metric that does not
say it is such a mean is refused when the prompts must be split, never silently
averaged. Work that cannot fit even one prompt is refused with its estimate and
what makes it fit.

:class:`Estimate` is the same arithmetic stated before any work: the chunks,
the peak bytes over the model's own weights and the forward-equivalents
(:class:`interp.engine.batching.Cost`); every analysis returns it, without
running, when called with ``estimate=True``.

Example:
    >>> sizes = plan_chunks(10, Footprint(fixed=0, per_prompt=3), budget=9)
    >>> [s.stop - s.start for s in sizes]
    [3, 3, 2, 2]
    >>> mean = WeightedMean()
    >>> mean.add(2.0, 3.0); mean.add(4.0, 1.0)
    >>> mean.value
    2.5
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, model_device


@dataclasses.dataclass(frozen=True)
class Footprint:
    """The peak bytes an analysis holds beyond the model's weights: ``fixed`` whatever the
    chunk, ``per_prompt`` held for each prompt of a chunk, and ``per_copy`` for each prompt
    of each copy a pass carries (edits that share a pass each run a copy of the chunk:
    :mod:`interp.engine.batching` packs as many as the rest of the budget holds, at most
    ``most_copies``, the most edits one pass can take; ``reread`` of each copy's bytes is
    read back by later layers, which limits packing on a CPU). ``first`` is a phase before
    the passes that carry copies (the run that records what they edit with), per prompt,
    held beside ``per_prompt`` in place of the copies."""

    fixed: int
    per_prompt: int
    per_copy: int = 0
    reread: int = 0
    most_copies: int = 1
    first: int = 0

    def peak(self, prompts: int, copies: int = 1) -> int:
        """The peak bytes of a chunk of ``prompts`` prompts whose passes carry ``copies``."""
        passes = max(self.first, copies * self.per_copy)
        return int(self.fixed + prompts * (self.per_prompt + passes))

    def spare(self, prompts: int, budget: int) -> int:
        """The bytes of ``budget`` left for a chunk's copies once its held state is counted
        (what the engines pack their copies into)."""
        return max(1, int(budget - self.fixed - prompts * self.per_prompt))

    def copies(self, prompts: int, pos: int, budget: int, device: Any) -> int:
        """How many copies a chunk of ``prompts`` prompts' passes carry under ``budget``
        (:func:`interp.engine.batching.copies_per_pass`, as the engines will choose)."""
        if self.per_copy <= 0 or self.most_copies <= 1:
            return 1
        from interp.engine.batching import copies_per_pass

        return copies_per_pass(
            prompts * pos, device, per_copy=prompts * self.per_copy, n=self.most_copies,
            reread=prompts * self.reread, memory_budget=self.spare(prompts, budget),
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Estimate:
    """What a run will cost, known before it starts (``estimate=True`` on any analysis).

    ``peak_bytes`` is the peak over the model's own weights; ``forward_equivalents``
    counts forward passes over all the prompts (a backward pass counts 2). Inside a
    process group of ``ranks`` processes, each rank runs at most ``rank_chunks`` chunks of
    at most ``rank_prompts`` prompts in all, at the same peak (a rank holds one chunk at a
    time), and :attr:`rank_forward_equivalents` of the passes.
    """

    analysis: str
    prompts: int
    pos: int
    chunks: int
    prompts_per_chunk: int
    peak_bytes: int
    forward_equivalents: float
    budget: int
    footprint: Footprint  # the memory model behind peak_bytes: fixed + per prompt
    ranks: int = 1
    rank_chunks: int = 0  # the most chunks one rank runs (0: every chunk, one process)
    rank_prompts: int = 0  # the most prompts one rank runs (0: every prompt)

    @property
    def rank_forward_equivalents(self) -> float:
        """The passes of the busiest rank: its prompts' share of the run's."""
        share = (self.rank_prompts or self.prompts) / max(1, self.prompts)
        return round(self.forward_equivalents * share, 3)

    def budget_for(self, prompts_per_chunk: int) -> int:
        """The smallest budget under which a chunk holds ``prompts_per_chunk`` prompts (at
        least one byte: a budget is positive)."""
        return max(1, self.footprint.peak(prompts_per_chunk))

    def __str__(self) -> str:
        from interp.core.memory import size_text

        return (
            f"{self.analysis}: {self.prompts} prompts x {self.pos} tokens in {self.chunks} "
            f"chunk{'s' if self.chunks != 1 else ''} of up to {self.prompts_per_chunk}; about "
            f"{self.forward_equivalents:,.1f} forward-equivalents, peak "
            f"{size_text(self.peak_bytes)} over the weights (budget {size_text(self.budget)})"
            + (
                f"; on {self.ranks} ranks, each at most {self.rank_chunks} chunk"
                f"{'s' if self.rank_chunks != 1 else ''} of {self.rank_prompts} prompts in all "
                f"and {self.rank_forward_equivalents:,.1f} forward-equivalents"
                if self.ranks > 1
                else ""
            )
        )


def plan_chunks(
    n_prompts: int,
    footprint: Footprint,
    *,
    budget: int,
    what: str = "this analysis",
    fix: str = "use shorter prompts",
) -> list[slice]:
    """The fewest near-equal chunks of ``n_prompts`` whose peak fits ``budget`` bytes.

    Raises:
        InterpError: when one prompt alone does not fit, naming its estimate, the
            budget and ``fix``.
    """
    from interp.core.memory import sizes

    one = footprint.peak(1)  # one prompt, one copy
    if one > budget:
        need, have = sizes(one, budget)
        raise InterpError(
            f"{what} needs about {need} for a single prompt, more than the memory budget "
            f"of {have}; {fix}, or raise the budget (memory_budget=, --memory)"
        )
    each = max(1, footprint.per_prompt + max(footprint.first, footprint.per_copy))
    most = max(1, (budget - footprint.fixed) // each)
    return near_equal(n_prompts, max(1, math.ceil(n_prompts / most)))


def near_equal(n_prompts: int, n_chunks: int) -> list[slice]:
    """``n_prompts`` in ``n_chunks`` consecutive chunks whose sizes differ by at most one.

    Example:
        >>> near_equal(10, 4)
        [slice(0, 3, None), slice(3, 6, None), slice(6, 8, None), slice(8, 10, None)]
    """
    size, extra = divmod(n_prompts, n_chunks)
    out, start = [], 0
    for c in range(n_chunks):
        stop = start + size + (1 if c < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


def spread(chunks: list[slice], n_ranks: int) -> list[slice]:
    """``chunks`` split again so that each of ``n_ranks`` ranks has one, where there are as
    many prompts (near-equal, in order; unchanged for one rank or when there are enough)."""
    n = chunks[-1].stop if chunks else 0
    if len(chunks) >= n_ranks or n < n_ranks:
        return chunks
    return near_equal(n, n_ranks)


def check_chunkable(metric: Any, n_chunks: int) -> None:
    """Refuse a metric whose chunks cannot be combined when the prompts need several.

    Raises:
        InterpError: from :meth:`interp.core.metrics.Metric.chunk`, naming the fix.
    """
    if n_chunks > 1 and metric is not None and not metric.chunkable:
        try:
            metric.chunk(slice(0, 1))
        except InterpError as exc:
            raise InterpError(f"{exc} (these prompts need {n_chunks} chunks)") from None


def estimate_of(
    analysis: str,
    footprint: Footprint,
    chunks: list[slice],
    pos: int,
    *,
    budget: int,
    forward_equivalents: float,
    device: Any = "cpu",
) -> Estimate:
    """The :class:`Estimate` of a run whose prompts of ``pos`` tokens split into ``chunks``."""
    most = max(s.stop - s.start for s in chunks)
    copies = footprint.copies(most, pos, budget, device)
    return Estimate(
        analysis=analysis,
        prompts=chunks[-1].stop,
        pos=pos,
        chunks=len(chunks),
        prompts_per_chunk=most,
        peak_bytes=footprint.peak(most, copies),
        forward_equivalents=round(float(forward_equivalents), 3),
        budget=int(budget),
        footprint=footprint,
    )


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk of prompts, as a task's ``chunk`` receives it (:meth:`Plan.each`).

    Attributes:
        rows: The prompts of the chunk (a slice of the batch).
        metric: The metric of these prompts (the task's own when the run is one chunk).
        weight: The chunk's weight in a ``mean`` (its metric's weight, else its prompts).
        share: The fraction of all the prompts it holds (its passes, in forward-equivalents
            of every prompt, count this much).
        budget: The bytes left for the chunk's passes once what it holds is counted (the
            engines' ``memory_budget``).
        progress: Whether the chunk may show a bar of its own (a run of one chunk; several
            chunks share the runner's bar).
        split: Whether the run has several chunks.
        index: Its place in the plan (the order rows are concatenated in).
    """

    rows: slice
    metric: Any
    weight: float
    share: float
    budget: int
    progress: bool
    split: bool
    index: int = 0


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a run splits its prompts (:func:`plan`), and its :class:`Estimate`. ``mine`` are
    the indices of the chunks this process runs (None: every chunk; the runner sets a rank's
    share, :func:`interp.engine.ranks.assign`)."""

    chunks: list[slice]
    estimate: Estimate
    mine: list[int] | None = None

    @property
    def split(self) -> bool:
        """Whether the prompts run in more than one chunk."""
        return len(self.chunks) > 1

    def costing(self, forward_equivalents: float) -> Plan:
        """This plan with its estimate's forward-equivalents set (some depend on the chunks)."""
        est = dataclasses.replace(
            self.estimate, forward_equivalents=round(float(forward_equivalents), 3)
        )
        return dataclasses.replace(self, estimate=est)

    def spare(self, rows: slice) -> int:
        """The budget a chunk's passes pack their copies into: the run's budget less what
        the chunk holds (pass it on as the engines' ``memory_budget``)."""
        return self.estimate.footprint.spare(rows.stop - rows.start, self.estimate.budget)

    def share(self, rows: slice) -> float:
        """The fraction of all the prompts that ``rows`` holds (to count a chunk's passes in
        forward-equivalents of every prompt)."""
        return (rows.stop - rows.start) / max(1, self.estimate.prompts)

    def each(self, metric: Any, *, progress: bool = False, desc: str = "chunks") -> Iterator[Chunk]:
        """This process's chunks (:attr:`mine`) with their metric and weight (one chunk: the
        metric itself, weighted by its prompts; chunks of no weight skipped), under one bar."""
        mine = range(len(self.chunks)) if self.mine is None else self.mine
        bar = chunk_bar([self.chunks[i] for i in mine], progress=progress, desc=desc)
        for index, rows in zip(mine, bar):  # with their places in the plan
            if self.split and metric is not None:
                part, weight = metric.chunk(rows)
                if weight <= 0:
                    continue
            else:
                part, weight = metric, float(rows.stop - rows.start)
            yield Chunk(
                rows=rows, metric=part, weight=float(weight), share=self.share(rows),
                budget=self.spare(rows), progress=progress and not self.split, split=self.split,
                index=index,
            )  # fmt: skip

    def parts(self, metric: Any, *, progress: bool = False, desc: str = "chunks") -> Iterator:
        """``(rows, metric of those prompts, weight)`` per chunk (:meth:`each`).

        Raises:
            InterpError: for a metric that cannot be combined over several chunks.
        """
        check_chunkable(metric, len(self.chunks))
        for c in self.each(metric, progress=progress, desc=desc):
            yield c.rows, c.metric, c.weight


def plan(
    model: HookedModel,
    n_prompts: int,
    pos: int,
    footprint: Footprint,
    *,
    memory_budget: Any,
    analysis: str,
    forward_equivalents: float,
    what: str = "",
    fix: str = "use shorter prompts",
    estimate: Any = False,
    progress: Any = False,
    ranks: int = 1,
) -> Plan:
    """The chunks of a run of ``n_prompts`` prompts of ``pos`` tokens under the budget on the
    model's device (:func:`interp.core.memory.budget`), and its :class:`Estimate`. ``estimate``
    and ``progress`` are the analysis's own options, checked here for every analysis
    (:func:`interp.core.checks.check_bool`). The prompts' number is limited only by this plan
    (each chunk's peak) and the token ids themselves (:func:`interp.core.memory.check_ids`, in
    :func:`interp.core.checks.check_tokens`); the whole batch need never fit at once. With
    ``ranks`` processes the chunks are split again so that each has one (:func:`spread`); the
    estimate is of the chunks before (the runner states the ranks' share once they agree).

    Raises:
        InterpError: for a bad ``memory_budget``, ``estimate`` or ``progress``, or when one
            prompt does not fit.
    """
    from interp.core.checks import check_bool
    from interp.core.memory import budget

    check_bool(estimate, "estimate")
    check_bool(progress, "progress")
    device = model_device(model)
    cap = budget(device, memory_budget)
    chunks = plan_chunks(n_prompts, footprint, budget=cap, what=what or analysis, fix=fix)
    est = estimate_of(
        analysis, footprint, chunks, pos, budget=cap, forward_equivalents=forward_equivalents,
        device=device,
    )  # fmt: skip
    return Plan(spread(chunks, ranks), est)


class WeightedMean:
    """A running mean of scalars, arrays or tensors with weights (chunks' metric values)."""

    def __init__(self) -> None:
        self.total: Any = None
        self.weight = 0.0

    def add(self, value: Any, weight: float) -> None:
        if weight <= 0:
            return
        term = value * weight
        self.total = term if self.total is None else self.total + term
        self.weight += weight

    @property
    def value(self) -> Any:
        if self.total is None:
            raise InterpError("no chunk counted anything: the metric's weights are all 0")
        return self.total / self.weight


def chunk_bar(chunks: list[slice], *, progress: bool, desc: str) -> Iterator[slice]:
    """The chunks, with a progress bar over them (and an ETA) when there are several."""
    if len(chunks) == 1 or not progress:
        yield from chunks
        return
    from tqdm.auto import tqdm

    with tqdm(total=len(chunks), desc=f"{desc} (chunks)", unit="chunk") as bar:
        for sl in chunks:
            yield sl
            bar.update(1)

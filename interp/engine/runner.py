"""The one runner: an analysis declares its work as a :class:`Task`, :func:`run` does the rest.

Every analysis that runs the model over prompts does the same things around its own
arithmetic: it states what a run will cost, refuses work that cannot fit, splits the
prompts into chunks under the memory budget (:mod:`interp.engine.chunks`), runs each chunk
under one progress bar, combines the chunks' partial results exactly, and counts the
passes it ran. An analysis now declares only what is its own:

* its memory model (a :class:`~interp.engine.chunks.Footprint`) and counted work
  (forward-equivalents, or a function of the chunks when the work depends on the split);
* what one chunk computes: ``chunk(Chunk) -> {name: partial}``, with an optional ``cost``
  entry (the chunk's passes, in forward-equivalents of its own prompts);
* how each partial combines over chunks (:data:`COMBINE`): ``mean`` (weighted by the
  metric's weight of the chunk, :meth:`interp.core.metrics.Metric.chunk`, so a mean over
  prompts is exact), ``sum``, ``rows`` (each prompt's rows, concatenated in order) or
  ``same`` (a value every chunk gives alike, such as the path an engine took);
* optionally ``prepare(chunks)``, work every chunk shares, run once before the first
  (the values an ablation splices in); it returns the forward-equivalents it ran.

:func:`run` plans the chunks, returns the :class:`~interp.engine.chunks.Estimate` when
asked (before any pass), refuses a metric that cannot combine over several chunks, runs
the chunks and returns a :class:`Run`: the combined values, the chunks and the counted
cost. The table and its ``attrs`` stay the analysis's own (the runner's figures go into
them: ``chunks``, ``forward_equivalents``).

Ranks: inside a ``torch.distributed`` process group, the ranks first compare hashes of
their model, prompts and options (:mod:`interp.engine.agreement`), then each runs its share
of the chunks (:func:`my_chunks`) and the partials of every rank combine in chunk order
(:func:`gathered`); outside one, both are the identity of one process.

Example:
    >>> import torch
    >>> from interp.engine.chunks import Footprint
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> x = torch.arange(10.0)
    >>> task = Task(
    ...     "demo", Footprint(fixed=0, per_prompt=8), work=0.0,
    ...     chunk=lambda c: {"total": x[c.rows].sum(), "each": x[c.rows] * 2},
    ...     combine={"total": "sum", "each": "rows"},
    ... )
    >>> out = run(model, (10, 4), task, memory_budget=24)
    >>> out.chunks, float(out.values["total"]), out.values["each"].tolist()[:3]
    (4, 45.0, [0.0, 2.0, 4.0])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.engine import ranks
from interp.engine.agreement import check_alike
from interp.engine.chunks import (
    Chunk,
    Estimate,
    Footprint,
    Plan,
    WeightedMean,
    check_chunkable,
    plan,
)

# How a partial result combines over chunks.
COMBINE = ("mean", "sum", "rows", "same")


@dataclasses.dataclass
class Task:
    """What an analysis runs (module docstring).

    Attributes:
        analysis: Its name (the estimate's, the table's).
        footprint: Its memory model.
        work: Its counted forward-equivalents, or ``work(chunks) -> float`` when they
            depend on the split.
        chunk: ``chunk(Chunk) -> {name: partial}`` (``cost``: the chunk's passes in
            forward-equivalents of its prompts).
        combine: How each partial combines (:data:`COMBINE`).
        metric: The metric whose chunks weigh the means (None: weights are prompts).
        prepare: ``prepare(chunks) -> forward-equivalents`` run once before the chunks.
        what: The work, in the refusal of a prompt that does not fit.
        fix: What makes it fit.
        desc: The progress bar's label.
        parallel: Whether its partials are all it keeps, so that its chunks may run on
            several ranks (False: it keeps state of its own across chunks; refused inside a
            process group).
        inputs: What every rank must hold alike besides the model and the prompts' shape:
            the tokens and the options (inside a process group the ranks compare their
            hashes before any pass, :func:`interp.engine.agreement.check_alike`).
    """

    analysis: str
    footprint: Footprint
    work: float | Callable[[list[slice]], float]
    chunk: Callable[[Chunk], dict[str, Any]]
    combine: Mapping[str, str]
    metric: Any = None
    prepare: Callable[[list[slice]], float] | None = None
    what: str = ""
    fix: str = "use shorter prompts"
    desc: str = ""
    parallel: bool = True
    inputs: Any = None

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.combine.items() if v not in COMBINE}
        if bad:
            raise InterpError(f"{self.analysis}: unknown combine rule(s) {bad}; use {COMBINE}")


@dataclasses.dataclass(frozen=True)
class Run:
    """What :func:`run` returns: ``values`` combined over the chunks, the number of
    ``chunks``, the ``forward_equivalents`` the run counted (the chunks' and ``prepare``'s)
    and the :class:`~interp.engine.chunks.Plan`."""

    values: dict[str, Any]
    chunks: int
    forward_equivalents: float
    plan: Plan


def plan_task(
    model: HookedModel,
    shape: tuple[int, int],
    task: Task,
    *,
    memory_budget: Any,
    estimate: Any = False,
    progress: Any = False,
    spread: bool = True,
) -> Plan:
    """The chunks of ``task`` over ``shape = (prompts, pos)`` and its estimate.

    Inside a process group every rank takes rank 0's chunks, split again so that each rank
    has one (``spread``), or as they are (``spread=False``: a task whose ranks share each
    chunk, as dictionary training's mini-batches are one process's).

    Raises:
        InterpError: as :func:`interp.engine.chunks.plan` (a bad budget, a prompt that
            does not fit), or from ``task.work``.
    """
    n, pos = int(shape[0]), int(shape[1])
    # every rank was given the same work (hashes compared, a no-op in one process)
    check_alike(
        task.analysis, {"model": model, "prompts": (n, pos), "tokens and options": task.inputs}
    )
    pl = plan(
        model, n, pos, task.footprint, memory_budget=memory_budget, analysis=task.analysis,
        forward_equivalents=0.0, what=task.what, fix=task.fix, estimate=estimate,
        progress=progress, ranks=ranks.world() if spread else 1,
    )  # fmt: skip
    if ranks.active():  # every rank splits alike: rank 0's chunks (spread, at least one each)
        chunks = ranks.agreed(pl.chunks, at=f"{task.analysis}'s plan")
        pl = dataclasses.replace(pl, chunks=chunks)
    if ranks.active() and spread:  # the ranks' share, in the estimate
        mine = [[c for i, c in enumerate(chunks) if i % ranks.world() == r]
                for r in range(ranks.world())]  # fmt: skip
        est = dataclasses.replace(
            pl.estimate, chunks=len(chunks),
            prompts_per_chunk=max(c.stop - c.start for c in chunks), ranks=ranks.world(),
            rank_chunks=max(len(m) for m in mine),
            rank_prompts=max(sum(c.stop - c.start for c in m) for m in mine),
        )  # fmt: skip
        pl = dataclasses.replace(pl, estimate=est)
    pl = dataclasses.replace(pl, mine=ranks.assign(pl.chunks))  # this process's chunks
    work = task.work(pl.chunks) if callable(task.work) else task.work
    return pl.costing(work)


def run(
    model: HookedModel,
    shape: tuple[int, int],
    task: Task,
    *,
    memory_budget: Any = None,
    estimate: Any = False,
    progress: Any = False,
) -> Run | Estimate:
    """Run ``task`` over ``shape = (prompts, pos)`` prompts in chunks (module docstring).

    Args:
        model: The hooked model (its device sets the default budget).
        shape: ``(prompts, tokens per prompt)``.
        task: What to run.
        memory_budget: Bytes (None: a quarter of the device's free memory).
        estimate: Return the :class:`~interp.engine.chunks.Estimate` instead, before any
            pass.
        progress: One bar over the chunks (or the single chunk's own).

    Returns:
        A :class:`Run`, or the estimate.

    Raises:
        InterpError: as :func:`plan_task`, or for a metric that cannot combine over the
            chunks the prompts need.
    """
    pl = plan_task(
        model, shape, task, memory_budget=memory_budget, estimate=estimate, progress=progress
    )
    if estimate:
        return pl.estimate
    if ranks.active() and not task.parallel:
        raise InterpError(
            f"{task.analysis} does not run data-parallel yet (it keeps state across chunks); "
            "call it outside the process group, or on one rank"
        )
    check_chunkable(task.metric, len(pl.chunks))
    prepared = float(task.prepare(pl.chunks) or 0.0) if task.prepare is not None else 0.0
    acc, cost = Partials(task.combine), 0.0
    bar = bool(progress) and ranks.rank() == 0
    for c in pl.each(task.metric, progress=bar, desc=task.desc or task.analysis):
        part = dict(task.chunk(c))
        cost += float(part.pop("cost", 0.0)) * c.share
        acc.add(part, c.weight, c.index)
    # the chunks' passes, each run on one rank, and what every chunk shares, counted once
    cost = prepared + sum(ranks.gathered(cost, at=f"{task.analysis}'s counted cost"))
    return Run(gathered(acc), len(pl.chunks), cost, pl)


def chunks_of(pl: Plan, metric: Any, *, progress: bool, desc: str) -> Iterator[Chunk]:
    """This process's chunks of ``pl`` (:meth:`~interp.engine.chunks.Plan.each`: each with
    its metric and weight, chunks the metric gives no weight skipped), under one progress
    bar."""
    if pl.mine is None:  # a plan the runner did not make: this rank's share
        pl = dataclasses.replace(pl, mine=ranks.assign(pl.chunks))
    return pl.each(metric, progress=progress and ranks.rank() == 0, desc=desc)


def my_chunks(chunks: list[slice]) -> list[slice]:
    """The chunks this process runs: all of them in one process; a rank's share inside a
    process group (:func:`interp.engine.ranks.assign`)."""
    return [chunks[i] for i in ranks.assign(chunks)]


def gathered(acc: Partials) -> dict[str, Any]:
    """The combined values of every process's chunks: this process's in one process; every
    rank's, combined in chunk order, inside a process group."""
    if not ranks.active():
        return acc.values()
    merged = Partials(acc.rules)
    for state in ranks.gathered(acc.state(), at="the partial results"):
        merged.absorb(state)
    return merged.values()


class Partials:
    """Chunks' partial results, combined by their rules (:data:`COMBINE`).

    Example:
        >>> p = Partials({"m": "mean", "n": "sum", "r": "rows"})
        >>> p.add({"m": 1.0, "n": 2, "r": [1]}, 1.0); p.add({"m": 4.0, "n": 3, "r": [2]}, 2.0)
        >>> p.values()
        {'m': 3.0, 'n': 5, 'r': [1, 2]}
    """

    def __init__(self, rules: Mapping[str, str]) -> None:
        self.rules = dict(rules)
        self.means: dict[str, WeightedMean] = {}
        self.parts: dict[str, list[Any]] = {}
        self.seen = 0

    def add(self, part: Mapping[str, Any], weight: float, index: int | None = None) -> None:
        """Add one chunk's partials, weighted by ``weight`` in the means; ``index`` is the
        chunk's place in the plan (default: the order added)."""
        missing = set(self.rules) - set(part)
        extra = set(part) - set(self.rules)
        if missing or extra:
            raise InterpError(
                f"internal error: a chunk gave {sorted(part)}, its task declares "
                f"{sorted(self.rules)}; please report this"
            )
        at = self.seen if index is None else index
        self.seen += 1
        for k, v in part.items():
            if self.rules[k] == "mean":
                self.means.setdefault(k, WeightedMean()).add(v, weight)
            else:
                self.parts.setdefault(k, []).append((at, v))

    def state(self) -> dict[str, Any]:
        """What another rank needs to combine these partials with its own (picklable)."""
        means = {k: (m.total, m.weight) for k, m in self.means.items()}
        return {"seen": self.seen, "means": means, "parts": self.parts}

    def absorb(self, state: Mapping[str, Any]) -> None:
        """Add another rank's :meth:`state`."""
        self.seen += int(state["seen"])
        for k, (total, weight) in state["means"].items():
            if weight > 0:
                m = self.means.setdefault(k, WeightedMean())
                m.total = total if m.total is None else m.total + total
                m.weight += weight
        for k, items in state["parts"].items():
            self.parts.setdefault(k, []).extend(items)

    def values(self) -> dict[str, Any]:
        """Every partial combined (an empty dict before any chunk)."""
        out: dict[str, Any] = {}
        for k, rule in self.rules.items():
            if rule == "mean":
                if k not in self.means and self.seen == 0:
                    raise InterpError("no chunk counted anything: the metric's weights are all 0")
                if k in self.means:
                    out[k] = self.means[k].value
            elif k in self.parts:
                ordered = [v for _, v in sorted(self.parts[k], key=lambda iv: iv[0])]
                out[k] = _combined(ordered, rule)
        return out


def _combined(parts: list[Any], rule: str) -> Any:
    if rule == "same":
        return parts[0]
    if rule == "sum":
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total
    first = parts[0]  # rows: concatenated along the prompts
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, pd.DataFrame):
        return pd.concat(parts, ignore_index=True)
    if isinstance(first, list):
        return [x for p in parts for x in p]
    raise InterpError(f"internal error: cannot concatenate {type(first).__name__} rows")

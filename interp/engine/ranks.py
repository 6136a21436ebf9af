"""The runner's processes: which chunks this rank runs, and how partials from every rank meet.

Inside an initialised ``torch.distributed`` process group (``torchrun``: gloo on CPU, nccl
on CUDA), the runner (:mod:`interp.engine.runner`) gives each rank its share of the plan's
chunks and combines every rank's partials into the one-process result; outside one, there
is one process and these are the identity. Nothing else in the package knows about
processes.

* the plan: rank 0's chunks, broadcast, so every rank splits the prompts alike (free
  memory, and so the default budget, may differ by rank); at least one chunk per rank
  where there are as many prompts;
* the assignment: chunk ``i`` runs on rank ``i % world``;
* the meeting: every rank's partials gathered (``all_gather_object``), then combined in
  chunk order, on every rank;
* the wait: a collective that cannot complete (a rank died, hangs or never came) fails
  after the group's timeout (``INTERP_RANK_TIMEOUT`` seconds in the CLI) with an
  :class:`~interp.core.errors.InterpError` saying where this rank waited, never silently
  forever.

Example:
    >>> world(), rank()  # no process group: one process
    (1, 0)
    >>> assign([slice(0, 2), slice(2, 4)])
    [0, 1]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from interp.core.errors import InterpError


def active() -> bool:
    """Whether an initialised process group of more than one rank is running."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch built without distributed
        return False
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def world() -> int:
    """The number of ranks (1 outside a process group)."""
    if not active():
        return 1
    import torch.distributed as dist

    return int(dist.get_world_size())


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    if not active():
        return 0
    import torch.distributed as dist

    return int(dist.get_rank())


def agreed(value: Any, *, at: str = "the plan") -> Any:
    """Rank 0's ``value`` on every rank (the value itself in one process); ``at`` names the
    meeting in a timeout's message.

    Raises:
        InterpError: when the other ranks do not come within the group's timeout.
    """
    if not active():
        return value
    import torch.distributed as dist

    box = [value]
    with _waiting(at):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def assign(chunks: list[slice]) -> list[int]:
    """The indices of the chunks this rank runs: ``i % world == rank`` (all of them in one
    process)."""
    n, r = world(), rank()
    return [i for i in range(len(chunks)) if i % n == r]


def gathered(value: Any, *, at: str = "the partial results") -> list[Any]:
    """Every rank's ``value``, in rank order (``[value]`` in one process); ``at`` names the
    meeting in a timeout's message.

    Raises:
        InterpError: when the other ranks do not come within the group's timeout.
    """
    if not active():
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * world()
    with _waiting(at):
        dist.all_gather_object(out, value)
    return out


@contextlib.contextmanager
def _waiting(at: str) -> Iterator[None]:
    """A collective's failure to complete (a timeout, a peer that closed its connection) as
    one clear :class:`InterpError`; other errors pass unchanged."""
    try:
        yield
    except RuntimeError as exc:  # gloo and nccl raise RuntimeError subclasses
        text = str(exc).lower()
        if not any(w in text for w in ("timed out", "timeout", "connection", "closed", "reset")):
            raise
        raise InterpError(
            f"rank {rank()} of {world()} waited for the other ranks at {at} and gave up: "
            f"another rank died, hangs or never reached this point ({str(exc).splitlines()[0]}); "
            "look at that rank's error, or raise INTERP_RANK_TIMEOUT for ranks that are slow"
        ) from exc


def spread(chunks: list[slice]) -> list[slice]:
    """``chunks`` split again so that every rank has one, where there are as many prompts
    (:func:`interp.engine.chunks.spread` over :func:`world` ranks)."""
    from interp.engine.chunks import spread as split

    return split(chunks, world())

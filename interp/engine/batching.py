"""How many edits share a forward pass, and which: one rule for every engine.

A pass carries ``k`` copies of the batch, one per edit. A pass has a fixed cost
(reading every weight once, Python per block) that small batches do not
amortise, so on a CPU a pass carries about :data:`CPU_TOKENS_PER_PASS` tokens;
everywhere, the copies must fit the memory budget (:func:`interp.core.memory.budget`:
a quarter of the free memory unless the caller gives one), and at most
:data:`MAX_COPIES` share a pass. A copy's bytes come from the caller's memory
model: the activations of one forward copy, plus whatever the engine itself
holds per copy (``reread``: state every later layer reads back; on a CPU a pass
packs copies only while all of theirs stays under :data:`CPU_REREAD_BYTES`,
since reading it back is bound by memory, not arithmetic).

Copies share a pass only when they resume at the same block (:func:`pack`).

Example:
    >>> pack([2, 0, 2, 1, 2], 2)
    [[1], [3], [0, 2], [4]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from interp.engine.cost import Cost  # its home: the engines' cost model

__all__ = ["Cost", "check_work", "copies_per_pass", "pack", "work_limit"]

MAX_COPIES = 32
# Past about this many tokens a pass's elementwise work leaves the caches: 32 x 25 tokens of
# the GPT-2 bridge in benchmarks/runner_overhead.py run faster 2 copies a pass than 3.
CPU_TOKENS_PER_PASS = 1536
# A store of senders' outputs larger than this is re-read by every copy of a pass, so such
# passes run one copy each (benchmarks/circuits.py measures the choice).
CPU_REREAD_BYTES = 64 << 20


def copies_per_pass(
    n_tokens: int,
    device: Any,
    *,
    per_copy: int,
    n: int | None = None,
    reread: int = 0,
    requested: Any = None,
    memory_budget: Any = None,
) -> int:
    """The copies of a ``n_tokens``-token batch one pass carries (module docstring).

    ``per_copy`` is the bytes one copy needs, ``reread`` the part of it that later
    layers read back, ``n`` the number of edits (no more copies than that),
    ``requested`` a caller's own count (``batch_size``) and ``memory_budget`` bytes.

    Raises:
        InterpError: for a non-positive or non-integer ``requested`` or ``memory_budget``.
    """
    from interp.core.checks import check_int
    from interp.core.memory import budget

    most = MAX_COPIES if n is None else max(1, min(MAX_COPIES, n))
    if requested is not None:
        return min(check_int(requested, "batch_size", minimum=1), most)
    cap = budget(device, memory_budget)
    k = min(most, cap // max(1, per_copy))
    if getattr(device, "type", str(device)) == "cpu":  # memory bound past these, on a CPU
        k = min(k, -(-CPU_TOKENS_PER_PASS // max(1, n_tokens)))
        if reread:
            k = min(k, CPU_REREAD_BYTES // reread)
    return max(1, int(k))


def pack(starts: Sequence[int], k: int, *, mixed: bool = False) -> list[list[int]]:
    """Indices of edits packed ``k`` per pass, in order of the block each resumes at
    (``starts``); a pass holds only edits of one start unless ``mixed`` (passes that run
    the whole model)."""
    order = sorted(range(len(starts)), key=lambda i: starts[i])
    chunks: list[list[int]] = []
    for i in order:
        same = chunks and starts[chunks[-1][0]] == starts[i]
        if chunks and len(chunks[-1]) < k and (same or mixed):
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return chunks


WORK_LIMIT = 10_000  # forward-equivalents an analysis may run unasked (INTERP_WORK_LIMIT)


def work_limit() -> float:
    """The most forward-equivalents an analysis starts without being told it may:
    ``INTERP_WORK_LIMIT`` if set, else :data:`WORK_LIMIT` (hours of work on a CPU).

    Raises:
        InterpError: for an ``INTERP_WORK_LIMIT`` that is not a positive number.
    """
    import os

    from interp.core.checks import check_finite

    text = os.environ.get("INTERP_WORK_LIMIT")
    if text is None:
        return float(WORK_LIMIT)
    return check_finite(text, "INTERP_WORK_LIMIT", positive=True)


def check_work(forward_equivalents: float, *, what: str, fix: str) -> float:
    """Refuse work whose estimate exceeds :func:`work_limit`, before it starts; returns the
    estimate.

    Raises:
        InterpError: naming the estimate, the limit, what shrinks the work (``fix``) and
            the variable that raises the limit.
    """
    from interp.core.errors import InterpError

    limit = work_limit()
    if forward_equivalents > limit:
        raise InterpError(
            f"{what} would run about {forward_equivalents:,.0f} forward passes of these tokens, "
            f"more than the limit of {limit:,.0f}; {fix} (or raise the limit: "
            "INTERP_WORK_LIMIT=...)"
        )
    return forward_equivalents

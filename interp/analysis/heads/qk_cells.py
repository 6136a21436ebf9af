"""Which scores a QK analysis reads: its cells, from the positions a caller gives.

A cell is one score ``s[sequence, query, key]`` (or, with ``contrast=(a, b)``, the
difference ``s[sequence, query, a] - s[sequence, query, b]``). Positions come the
one way for every QK analysis: ``query_positions`` and ``key_positions`` are ints
(negative from the end) shared by every sequence, or one list per sequence
(``[[q0], [q1], ...]``: each sequence's own positions, read per sequence);
``key_positions=None`` is every key each query may see; ``contrast`` positions are
one for all sequences or one per sequence. :func:`plan_cells` checks them all
before any forward pass and lays the cells out flat, grouped by what a table row
averages over (the sequences, except when positions are per sequence).

Example:
    >>> c = plan_cells(2, 4, query_positions=-1, key_positions=[0, 2])
    >>> c.seq.tolist(), c.query.tolist(), c.key.tolist(), c.per_group
    ([0, 1, 0, 1], [3, 3, 3, 3], [0, 0, 2, 2], 2)
    >>> plan_cells(2, 4, query_positions=[[1], [3]], key_positions=[[0], [2]]).groups
    [(0, 1, 0), (1, 3, 2)]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from interp.errors import InterpError


@dataclasses.dataclass(frozen=True)
class Cells:
    """The cells of a QK analysis, flat: cell ``c`` is ``s[seq[c], query[c], key[c]]`` minus
    ``s[seq[c], query[c], other[c]]`` with a contrast. Cells come in ``len(groups)`` runs of
    ``per_group`` (a table row is the mean of one run); ``groups`` hold each row's
    ``(query, key)``, ``(query,)`` with a contrast, or ``(sequence, query, key)`` when
    positions are per sequence."""

    seq: torch.Tensor  # [cell] long
    query: torch.Tensor  # [cell] long
    key: torch.Tensor  # [cell] long
    other: torch.Tensor | None  # [cell] long: the contrast's b
    groups: list[tuple[int, ...]]
    per_group: int
    columns: tuple[str, ...]  # the names of a group's entries
    contrast: list[list[int]] | None  # [a per sequence, b per sequence]

    @property
    def query_rows(self) -> list[int]:
        """The distinct query positions, in order."""
        return sorted({int(q) for q in self.query})

    def scores(self, s: torch.Tensor) -> torch.Tensor:
        """``[cell]`` from scores ``s [batch, query_pos, key_pos]``."""
        out = s[self.seq, self.query, self.key]
        return out if self.other is None else out - s[self.seq, self.query, self.other]

    def rows(self, pattern: torch.Tensor) -> torch.Tensor:
        """``[row, key_pos]``: the attention rows of the cells' distinct (sequence, query)."""
        pairs = sorted({(int(b), int(q)) for b, q in zip(self.seq, self.query, strict=True)})
        b, q = (torch.tensor(x) for x in zip(*pairs, strict=True))
        return pattern[b, q]


def read_positions(value: Any, n: int, what: str) -> list[int]:
    """Positions (ints, negative from the end) as distinct indices in order.

    Raises:
        InterpError: for a non-integer or out-of-range position, or none.
    """
    items = [value] if _scalar(value) else list(value)
    out: list[int] = []
    for p in items:
        if isinstance(p, bool) or not hasattr(p, "__index__"):
            raise InterpError(f"{what} must be integers, got {p!r}")
        p = int(p)
        if not -n <= p < n:
            raise InterpError(f"{what} {p} is out of range for {n} positions (use -{n}..{n - 1})")
        if p % n not in out:
            out.append(p % n)
    if not out:
        raise InterpError(f"{what} is empty; give at least one position")
    return out


def _scalar(value: Any) -> bool:
    return not hasattr(value, "__iter__") or (hasattr(value, "ndim") and value.ndim == 0)


def per_sequence(value: Any) -> bool:
    """One list of positions per sequence (``[[q0], [q1], ...]``)?"""
    if value is None or _scalar(value):
        return False
    items = list(value)
    return bool(items) and all(not _scalar(v) for v in items)


def _per_sequence(value: Any, n: int, bsz: int, what: str) -> list[list[int]]:
    """``value`` as one position list per sequence (shared positions repeated)."""
    if not per_sequence(value):
        return [read_positions(value, n, what)] * bsz
    lists = list(value)
    if len(lists) != bsz:
        raise InterpError(f"{what} has {len(lists)} lists of positions for {bsz} sequences")
    return [read_positions(v, n, what) for v in lists]


def plan_cells(
    bsz: int,
    n: int,
    *,
    query_positions: Any = -1,
    key_positions: Any = None,
    contrast: Any = None,
    window: int | None = None,
) -> Cells:
    """The cells of ``query_positions`` x ``key_positions`` (or ``contrast``) on ``bsz``
    sequences of ``n`` tokens (module docstring); ``window`` limits the keys a query may
    see (a sliding-window layer).

    Raises:
        InterpError: for positions out of range, not integers or empty, a key after its
            query, lists of positions that are not one per sequence, or a ``contrast`` that
            is not two positions (or names the same key twice).
    """
    per_seq = per_sequence(query_positions) or per_sequence(key_positions)
    qs = _per_sequence(query_positions, n, bsz, "query_positions")
    ks = None if key_positions is None else _per_sequence(key_positions, n, bsz, "key_positions")
    if contrast is not None:
        if key_positions is not None:
            raise InterpError("give key_positions or contrast, not both")
        a, b = contrast_index(contrast, n, bsz)
    cells: dict[tuple[int, ...], list[tuple[int, int, int, int]]] = {}
    for s in range(bsz):
        for q in qs[s]:
            lo = 0 if not window else max(0, q - window + 1)
            if contrast is not None:
                keys = [(a[s], b[s])]
            else:
                keys = [(k, -1) for k in (range(lo, q + 1) if ks is None else ks[s])]
            late = sorted({k for pair in keys for k in pair if k > q})
            if late:
                name = "contrast positions" if contrast is not None else "key_positions"
                raise InterpError(
                    f"{name} {late} come after query position {q}; a causal head cannot "
                    "attend to them"
                )
            for k, o in keys:
                group = (q, k) if contrast is None else (q,)
                group = (s, *group) if per_seq else group
                cells.setdefault(group, []).append((s, q, k, o))
    groups = sorted(cells) if not per_seq else list(cells)
    flat = [c for g in groups for c in cells[g]]
    sizes = {len(cells[g]) for g in groups}
    if len(sizes) != 1:  # shared positions give every group one cell per sequence
        raise InterpError("internal error: uneven cells; please report this")
    t = torch.tensor(flat, dtype=torch.long)  # [cell, 4]
    columns = ("query_position", "key_position") if contrast is None else ("query_position",)
    columns = ("sequence", *columns) if per_seq else columns
    return Cells(
        seq=t[:, 0],
        query=t[:, 1],
        key=t[:, 2],
        other=None if contrast is None else t[:, 3],
        groups=groups,
        per_group=sizes.pop(),
        columns=columns,
        contrast=None if contrast is None else [a, b],
    )


def contrast_index(contrast: Any, n: int, bsz: int) -> tuple[list[int], list[int]]:
    """``contrast=(a, b)`` as two per-sequence position lists.

    Raises:
        InterpError: for anything but two positions (or two lists of one per sequence),
            positions out of range, or the same key twice.
    """
    if not isinstance(contrast, tuple | list) or len(contrast) != 2:
        raise InterpError(f"contrast must be two key positions (a, b), got {contrast!r}")
    out = []
    for what, v in zip(("a", "b"), contrast, strict=True):
        if _scalar(v):
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise InterpError(f"contrast {what} must be an integer position, got {v!r}")
            vals = [int(v)] * bsz
        else:
            vals = [int(x) for x in v]
            if len(vals) != bsz:
                raise InterpError(f"contrast {what} has {len(vals)} positions for {bsz} sequences")
        for x in vals:
            if not -n <= x < n:
                raise InterpError(f"contrast position {x} is out of range for {n} positions")
        out.append([x % n for x in vals])
    if all(x == y for x, y in zip(*out, strict=True)):
        raise InterpError("contrast names the same key twice; the difference would be 0")
    return out[0], out[1]

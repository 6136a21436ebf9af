"""Which scores a QK analysis reads: its cells, from the positions a caller gives.

A cell is one score ``s[sequence, query, key]`` (or, with ``contrast=(a, b)``, the
difference ``s[sequence, query, a] - s[sequence, query, b]``). Positions come the
one way for every QK analysis: ``query_positions`` and ``key_positions`` are ints
(negative from the end) shared by every sequence, or one list per sequence
(``[[q0], [q1], ...]``: each sequence's own positions, read per sequence);
``key_positions=None`` is every key each query may see; ``contrast`` positions are
one for all sequences or one per sequence. Each position follows the one integer
rule (:func:`interp.core.checks.position_index`: floats and bools are refused, never
rounded), duplicates collapse with a warning, and a key the layer's mask hides
from its query (after it in a causal model, outside a sliding window) is refused
by the layer's own mask rule (:meth:`interp.runtime.attention.QKGeometry.hidden`).
:func:`plan_cells` checks them all before any forward pass and lays the cells out
flat, grouped by what a table row averages over (the sequences, except when
positions are per sequence).

Example:
    >>> c = plan_cells(2, 4, query_positions=-1, key_positions=[0, 2])
    >>> c.seq.tolist(), c.query.tolist(), c.key.tolist(), c.per_group
    ([0, 1, 0, 1], [3, 3, 3, 3], [0, 0, 2, 2], 2)
    >>> plan_cells(2, 4, query_positions=[[1], [3]], key_positions=[[0], [2]]).groups
    [(0, 1, 0), (1, 3, 2)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from interp.core.checks import check_not_padding, position_index, warn_duplicates
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.runtime.attention import QKGeometry

CAUSAL = QKGeometry(scale=1.0)  # the mask rule when none is given: causal, no window


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

    def read(self) -> dict[int, list[int]]:
        """Each sequence's positions the cells read (queries, keys and contrast keys)."""
        others = self.key if self.other is None else self.other
        pos = torch.cat([self.query, self.key, others])
        seq = self.seq.repeat(3)
        width = int(pos.max()) + 1
        pairs = torch.unique(seq * width + pos)  # sorted: by sequence, then position
        out: dict[int, list[int]] = {}
        for s, p in zip((pairs // width).tolist(), (pairs % width).tolist(), strict=True):
            out.setdefault(s, []).append(p)
        return out

    def scores(self, s: torch.Tensor) -> torch.Tensor:
        """``[cell]`` from scores ``s [batch, query_pos, key_pos]``."""
        out = s[self.seq, self.query, self.key]
        return out if self.other is None else out - s[self.seq, self.query, self.other]

    def rows(self, pattern: torch.Tensor) -> torch.Tensor:
        """``[row, key_pos]``: the attention rows of the cells' distinct (sequence, query)."""
        pairs = sorted({(int(b), int(q)) for b, q in zip(self.seq, self.query, strict=True)})
        b, q = (torch.tensor(x) for x in zip(*pairs, strict=True))
        return pattern[b, q]


def _scalar(value: Any) -> bool:
    return (
        isinstance(value, (str, bytes))
        or not isinstance(value, Iterable)
        or (getattr(value, "ndim", None) == 0)
    )


def read_positions(value: Any, n: int, what: str) -> list[int]:
    """Positions (an int or ints, negative from the end) as distinct indices in order;
    duplicates collapse with a warning.

    Raises:
        InterpError: for a non-integer or out-of-range position, a nested list, or none.
    """
    items = [value] if _scalar(value) else list(value)
    if not items:
        raise InterpError(f"{what} is empty; give at least one position")
    out = [position_index(p, n, what) for p in items]
    warn_duplicates(out, what)
    return list(dict.fromkeys(out))


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
    geometry: QKGeometry | None = None,
) -> Cells:
    """The cells of ``query_positions`` x ``key_positions`` (or ``contrast``) on ``bsz``
    sequences of ``n`` tokens (module docstring); ``geometry`` is the layer's mask rule
    (default: causal, no window).

    Raises:
        InterpError: for positions out of range, not integers or empty, a key the layer
            hides from its query (after it in a causal model, outside a sliding window),
            lists of positions that are not one per sequence, or a ``contrast`` that is not
            two positions (or names the same key twice).
    """
    geometry = geometry or CAUSAL
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
            if contrast is not None:
                keys = [(a[s], b[s])]
            else:
                keys = [(k, -1) for k in (geometry.keys_of(q, n) if ks is None else ks[s])]
            for k in sorted({k for pair in keys for k in pair if k >= 0}):
                why = geometry.hidden(q, k)
                if why is not None:
                    name = "contrast position" if contrast is not None else "key position"
                    raise InterpError(f"{name} {k} {why}")
            for k, o in keys:
                group = (q, k) if contrast is None else (q,)
                group = (s, *group) if per_seq else group
                cells.setdefault(group, []).append((s, q, k, o))
    groups = sorted(cells) if not per_seq else list(cells)
    flat = [c for g in groups for c in cells[g]]
    sizes = {len(cells[g]) for g in groups}
    if len(sizes) != 1:  # shared positions give every group one cell per sequence
        raise InterpError(
            "the sequences' query positions see different numbers of keys; give "
            "key_positions, or positions per sequence ([[q0], [q1], ...])"
        )
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
    """``contrast=(a, b)`` as two per-sequence position lists, each position by the one
    integer rule.

    Raises:
        InterpError: for anything but two positions (or two lists of one per sequence),
            positions that are not integers or out of range, or the same key twice.
    """
    if not isinstance(contrast, tuple | list) or len(contrast) != 2:
        raise InterpError(f"contrast must be two key positions (a, b), got {contrast!r}")
    out = []
    for what, v in zip(("a", "b"), contrast, strict=True):
        name = f"contrast {what}"
        if _scalar(v):
            vals = [position_index(v, n, name)] * bsz
        else:
            vals = [position_index(x, n, f"{name} (one position per sequence)") for x in v]
            if len(vals) != bsz:
                raise InterpError(f"{name} has {len(vals)} positions for {bsz} sequences")
        out.append(vals)
    if all(x == y for x, y in zip(*out, strict=True)):
        raise InterpError("contrast names the same key twice; the difference would be 0")
    return out[0], out[1]


def check_read_padding(model: HookedModel, tokens: torch.Tensor, cells: Cells) -> None:
    """Refuse cells that read right padding, by the one padding rule of every analysis that
    reads positions (:func:`interp.core.checks.check_not_padding`, as DLA and the lens apply it).

    Raises:
        InterpError: naming the sequence, the padded position and the fix.
    """
    tok = getattr(model, "tokenizer", None)
    if getattr(tok, "pad_token_id", None) is None:
        return
    for s, read in cells.read().items():
        check_not_padding(model, tokens[s : s + 1], read, "QK attribution", first=s)

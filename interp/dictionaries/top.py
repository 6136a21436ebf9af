"""Each feature's top contexts, the same whatever the chunks and the ranks that read them.

:func:`interp.dictionaries.read_features` keeps, per feature, the ``top`` positions of
largest activation over the token set, ties going to the earlier position. Each chunk
gives its own candidates (:func:`chunk_top`: its ``k`` largest, ties to the earlier row,
sorted so), a running :class:`Best` merges them as they come (its memory stays ``top`` per
feature whatever the number of chunks), and inside a ``torch.distributed`` process group
every rank's running best meets the others' (:func:`merged_best`). As the order is one
total order (activation, then place in the token set), the result is the one process's:
the same contexts in the same order, however the prompts were split.

Example:
    >>> import torch
    >>> v, i = chunk_top(torch.tensor([[1.0], [3.0], [3.0], [2.0]]), 2)
    >>> v.flatten().tolist(), i.flatten().tolist()
    ([3.0, 3.0], [1, 2])
"""

from __future__ import annotations

import torch

from interp.engine import ranks


def _order(v: torch.Tensor, place: torch.Tensor) -> torch.Tensor:
    """The order of each column by value (largest first), ties by place (smallest first)."""
    by_place = place.argsort(dim=0, stable=True)
    by_value = v.gather(0, by_place).argsort(dim=0, descending=True, stable=True)
    return by_place.gather(0, by_value)


def chunk_top(read: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values of each column of ``read`` (ties: the earlier rows).

    Args:
        read: ``[n, n_f]`` activations, one column per feature.
        k: how many to keep, at most ``n``.

    Returns:
        ``(values, rows)``, both ``[k, n_f]``, sorted by value (largest first), then row.
    """
    v, i = read.topk(k, dim=0)
    kth = v[-1]  # [n_f]
    taken, there = (v == kth).sum(0), (read == kth).sum(0)
    short = (there > taken).nonzero().flatten()  # ties at the k-th value, not all kept
    if len(short):  # keep the earliest rows among them
        ties = read[:, short] == kth[short]
        counts = taken[short]
        first = ties & (ties.cumsum(0) <= counts)
        col, row = first.T.nonzero(as_tuple=True)  # column by column, rows ascending
        starts = counts.cumsum(0) - counts
        rank = k - counts[col] + torch.arange(len(col)) - starts[col]
        i = i.clone()
        i[rank, short[col]] = row
    o = _order(v, i)
    return v.gather(0, o), i.gather(0, o)


class Best:
    """The running top contexts of each feature: ``v [top, n_f]`` (largest first; ties: the
    earlier place), their places ``i`` in the token set, and windows of token ids ``ids``
    and of activations ``acts`` (``[top, n_f, W]``). Merged as each chunk comes.

    Args:
        n_f: features read.
        W: the window's width.
    """

    def __init__(self, n_f: int, W: int) -> None:
        self.v = torch.full((0, n_f), float("-inf"))
        self.i = torch.zeros((0, n_f), dtype=torch.long)
        self.ids = torch.zeros((0, n_f, W), dtype=torch.long)
        self.acts = torch.zeros((0, n_f, W))

    def merge(
        self, v: torch.Tensor, flat: torch.Tensor, ids: torch.Tensor, wa: torch.Tensor, top: int
    ) -> None:
        """Merge candidates, keeping the ``top`` largest.

        Args:
            v: ``[c, n_f]`` their values.
            flat: ``[c, n_f]`` their places in the token set.
            ids: ``[c, n_f, W]`` their windows' token ids.
            wa: ``[c, n_f, W]`` their windows' activations.
            top: how many to keep per feature.
        """
        v, flat = torch.cat([self.v, v]), torch.cat([self.i, flat])
        order = _order(v, flat)[:top]
        self.v, self.i = v.gather(0, order), flat.gather(0, order)
        g3 = order[..., None].expand(-1, -1, self.ids.shape[-1])
        self.ids = torch.cat([self.ids, ids]).gather(0, g3)
        self.acts = torch.cat([self.acts, wa]).gather(0, g3)

    def state(self) -> tuple[torch.Tensor, ...]:
        """What another rank merges: ``(v, i, ids, acts)``.

        Returns:
            The four tensors.
        """
        return self.v, self.i, self.ids, self.acts


def merged_best(best: Best, top: int) -> Best:
    """Every rank's running best merged into the whole token set's (``best`` itself in one
    process).

    Args:
        best: this rank's.
        top: contexts kept per feature.

    Returns:
        The merged :class:`Best`, the same on every rank.
    """
    if not ranks.active():
        return best
    out = Best(best.v.shape[1], best.ids.shape[-1])
    for state in ranks.gathered(best.state()):
        out.merge(*state, top)
    return out


def copies() -> int:
    """Copies of the running best a reading holds at its peak: two while merging in one
    process; in a process group also every rank's, gathered, and their concatenation.

    Returns:
        The number of copies (for the footprint).
    """
    n = ranks.world()
    return 2 if n == 1 else 3 * n + 1

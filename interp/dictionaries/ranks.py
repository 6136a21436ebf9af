"""Training a dictionary data-parallel: each rank holds its part of every mini-batch.

Inside an initialised ``torch.distributed`` process group (``torchrun``; gloo on CPU),
:func:`interp.dictionaries.train_dictionary` keeps the one-process training exactly and
shares only the work: the chunks are the plan one process makes (rank 0's, agreed), each
rank streams the activations of its own part of a chunk's prompts (:func:`my_rows`), the
shuffle of a chunk's positions is the one process's (the same seeded draw on every rank),
and each rank takes from every mini-batch the positions it holds. What a step needs of the
whole batch is summed over the ranks (:func:`total`): the batch's mean and variance, the
gradients (each rank's loss is its positions' share of the one-process loss, so the summed
gradient is the one-process gradient), which features fired (the dead-feature counts of
AuxK) and the loss. The scaling constant and ``b_dec``'s start are the first chunk's, summed
the same way. Every rank then takes the same optimiser step on the same numbers, so the
weights stay equal on every rank. Outside a process group every helper is the identity of
one process.

Example:
    >>> import torch
    >>> my_rows(slice(4, 10))  # one process: every prompt
    slice(4, 10, None)
    >>> total(torch.tensor([1.0, 2.0])).tolist()
    [1.0, 2.0]
"""

from __future__ import annotations

import torch

from interp.engine import ranks
from interp.engine.chunks import near_equal


def my_rows(rows: slice) -> slice:
    """This rank's part of a chunk's prompts: near-equal consecutive parts in rank order
    (all of ``rows`` in one process; empty on a rank beyond the chunk's prompts).

    Args:
        rows: the chunk's prompts.

    Returns:
        A slice of the batch (``rows`` itself in one process).
    """
    n = ranks.world()
    if n == 1:
        return rows
    part = near_equal(rows.stop - rows.start, n)[ranks.rank()]
    return slice(rows.start + part.start, rows.start + part.stop)


def total(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over the ranks (``t`` itself in one process: no copy, no rounding).

    Args:
        t: a tensor of the same shape on every rank.

    Returns:
        The sum, a new tensor in a process group.
    """
    if not ranks.active():
        return t
    import torch.distributed as dist

    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def fired(t: torch.Tensor) -> torch.Tensor:
    """A bool tensor's "or" over the ranks (``t`` itself in one process).

    Args:
        t: a bool tensor of the same shape on every rank.

    Returns:
        Whether any rank's element is true.
    """
    if not ranks.active():
        return t
    return total(t.to(torch.int32)) > 0


def sum_grads(params: dict[str, torch.Tensor]) -> None:
    """Sum the parameters' gradients over the ranks, in place, in one collective (nothing in
    one process). A parameter without a gradient on this rank (no positions of the batch
    here) adds zeros.

    Args:
        params: the trained tensors; their ``.grad`` is replaced by the sum.
    """
    if not ranks.active():
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params.values()]
    flat = total(torch.cat([g.reshape(-1) for g in grads]))
    at = 0
    for p in params.values():
        p.grad = flat[at : at + p.numel()].view_as(p).clone()
        at += p.numel()


def mean_rows(x: torch.Tensor) -> torch.Tensor:
    """The mean of the rows of every rank's ``x`` (``x.mean(0)`` in one process).

    Args:
        x: ``[n, ...]`` this rank's rows (``n`` may be 0 on a rank).

    Returns:
        ``x.shape[1:]``, the mean over all the ranks' rows.
    """
    if not ranks.active():
        return x.mean(0)
    count = torch.tensor([float(x.shape[0])], dtype=x.dtype, device=x.device)
    s = total(torch.cat([x.sum(0).reshape(-1), count]))
    return (s[:-1] / s[-1].clamp(min=1)).reshape(x.shape[1:])

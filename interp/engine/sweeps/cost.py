"""The sweep engine's memory model: what a sweep holds, per prompt and per copy of a pass.

A sweep (:mod:`interp.engine.sweeps.sweep`) keeps, per prompt, the residual stream entering
each block an edit resumes at and the values it splices in; each copy of a pass (edits that
resume at one block share a pass, :mod:`interp.engine.batching`) adds a forward pass's
transients, the state it resumes from and the activations its edit hooks clone. The bytes
come from the model's config (:mod:`interp.core.memory`) and the runtime's own shapes
(:meth:`interp.runtime.base.Runtime.activation_bytes`); the FLOPs are
:mod:`interp.engine.cost`'s.

Example:
    >>> from interp.models import load_model
    >>> from interp.engine.sweeps.sites import head_edits
    >>> model = load_model("induction-2l")
    >>> f = sweep_footprint(model, 8, head_edits([(0, 0), (1, 0), (1, 1)]))
    >>> f.most_copies, f.per_copy == sweep_copy_bytes(model, 8, head_edits([(1, 0)]))
    (2, True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from interp.core.memory import forward_bytes, stream_bytes
from interp.core.protocol import HookedModel
from interp.engine.chunks import Footprint
from interp.engine.sweeps.sites import Edit, edit_start
from interp.runtime import runtime_of

__all__ = ["sweep_copy_bytes", "sweep_footprint"]


def sweep_copy_bytes(
    model: HookedModel, pos: int, edits: Sequence[Edit], rows: Sequence[int] | None = None
) -> int:
    """What one copy of one prompt adds to a pass (:mod:`interp.engine.batching`).

    A forward pass's transients, with the logits only at the metric's ``rows`` where the
    runtime unembeds only those (:func:`interp.core.memory.forward_bytes`), the state the
    pass resumes from, repeated per copy, and each edited activation's copy (the edit hooks
    clone it; the largest edit's).

    Example:
        >>> from interp.models import load_model
        >>> from interp.engine.sweeps.sites import head_edits
        >>> sweep_copy_bytes(load_model("induction-2l"), 8, head_edits([(1, 0)])) > 0
        True

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        edits: The sweep's edits.
        rows: The positions whose logits the metric reads (None: every row).

    Returns:
        Bytes per prompt of one copy.
    """
    rt = runtime_of(model)
    edited = max(  # the hooks of one edit clone their activations
        (
            sum(rt.activation_bytes(n, pos) for n in dict.fromkeys(st.hook for st in e))
            for e in edits
        ),
        default=0,
    )
    return (
        forward_bytes(model, 1, pos, rows=rt.unembedded(rows)) + stream_bytes(model, pos) + edited
    )


def sweep_footprint(
    model: HookedModel,
    pos: int,
    edits: Sequence[Edit],
    names: Sequence[str] = (),
    *,
    rows: Sequence[int] | None = None,
) -> Footprint:
    """The memory a sweep holds (:mod:`interp.engine.chunks`).

    Per prompt: the residual stream entering each block an edit resumes at (the base pass
    keeps them) and the values spliced in at ``names`` (the source run's, a mean or a
    resample: none for zero ablation). Per prompt of each copy of a pass:
    :func:`sweep_copy_bytes`; edits that resume at one block share passes as copies of the
    batch, as many as the rest of the budget holds, at most the most edits of one block.

    Example:
        >>> from interp.models import load_model
        >>> from interp.engine.sweeps.sites import head_edits
        >>> sweep_footprint(load_model("induction-2l"), 8, head_edits([(0, 0)])).per_prompt
        0

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        edits: The sweep's edits.
        names: The hooks whose values are spliced in (held per prompt).
        rows: The positions whose logits the metric reads (None: every row).

    Returns:
        The sweep's :class:`~interp.engine.chunks.Footprint`.
    """
    rt = runtime_of(model)
    starts = Counter(edit_start(e) for e in edits)
    kept = len(set(starts) - {0}) * stream_bytes(model, pos)
    values = sum(rt.activation_bytes(n, pos) for n in dict.fromkeys(names))
    return Footprint(
        fixed=0,
        per_prompt=kept + values,
        per_copy=sweep_copy_bytes(model, pos, edits, rows),
        most_copies=max(starts.values(), default=1),
    )

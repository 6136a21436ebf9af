"""Memory: what a computation may use, and what its passes hold, known before they run.

:func:`budget` is the one default every engine packs its passes under: a
quarter of the memory free on the model's device (``MemAvailable`` on a CPU,
free memory on a GPU), unless the caller gives a budget in bytes.

The memory model: the terms every analysis's footprint
(:class:`interp.engine.chunks.Footprint`) is built from, each a function of the
model's config (:class:`Dims`: width, layers, heads, key-value heads, MLP width,
vocabulary, dtype), the prompts' length and the rows a metric reads, per prompt:

* :func:`stream_bytes`: one residual-width tensor ``[pos, d_model]``;
* :func:`block_bytes`: what one block holds at its peak in a pass without gradients
  (its attention's scores and pattern, or its MLP's hidden layer);
* :func:`logit_bytes`: the logits, only at the rows a metric reads where the runtime
  unembeds only those;
* :func:`forward_bytes`: a pass without gradients, a block's transients and the logits;
* :func:`saved_bytes` and :func:`backward_bytes`: a pass with gradients, what every layer
  saves for the backward pass, the logits and their gradient.

They count the tensors the code holds (traced on Llama-shaped bridges), and one thing
the allocator adds: what a pass frees under glibc's mmap threshold stays resident in its
heap (:data:`HEAP_KEPT`). ``benchmarks/memory_model.py`` checks the estimates built
from them against measured peaks on three sizes. :func:`check_memory` refuses work that cannot fit
before it starts.

Example:
    >>> budget("cpu", 1 << 20)
    1048576
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, model_device
from interp.core.validate import check_memory_budget

BUDGET_FRACTION = 4  # the default budget is 1 / BUDGET_FRACTION of the free memory


def budget(device: Any = None, memory_budget: Any = None) -> int:
    """Bytes a computation on ``device`` may use: ``memory_budget`` when given, else a
    quarter of what is free there.

    Raises:
        InterpError: for a ``memory_budget`` that is not a positive integer.
    """
    if memory_budget is not None:
        return check_memory_budget(memory_budget)
    return available_memory(device) // BUDGET_FRACTION


def available_memory(device: Any = None) -> int:
    """Bytes a computation on ``device`` can still use (CPU: ``MemAvailable``; GPU: free memory).

    Read at most every :data:`FRESH` seconds per device (an analysis's checks and plan ask
    several times within a call; on a small model each read of ``/proc/meminfo`` costs a
    few percent of a pass). Falls back to 4 GiB where neither can be read.
    """
    dev_type = getattr(device, "type", str(device or "cpu"))
    key = str(device) if dev_type == "cuda" else "cpu"
    now = time.monotonic()
    seen = _FREE.get(key)
    if seen is not None and now - seen[0] < FRESH:
        return seen[1]
    free = _read_free(device, dev_type)
    _FREE[key] = (now, free)
    return free


FRESH = 0.5  # seconds a reading of free memory stands for (available_memory)
_FREE: dict[str, tuple[float, int]] = {}  # device -> (when read, bytes free)


def _read_free(device: Any, dev_type: str) -> int:
    """Free memory of ``device`` now (:func:`available_memory`, read afresh)."""
    if dev_type == "cuda":
        import torch

        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):  # pragma: no cover - no CUDA
            pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 4 << 30


@dataclasses.dataclass(frozen=True)
class Dims:
    """The sizes the memory model reads from a model's config (TransformerLens names)."""

    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int  # 0 for attention-only models
    mlp_width: int  # tensors of the MLP's hidden width a block holds at once (gated: 3)
    d_vocab: int
    element: int  # bytes of one activation element (the model's dtype)

    @classmethod
    def of(cls, model: HookedModel) -> Dims:
        cfg = model.cfg
        d = int(getattr(cfg, "d_model", 0) or 0)
        heads = int(getattr(cfg, "n_heads", 0) or 0)
        attn_only = bool(getattr(cfg, "attn_only", False))
        return cls(
            d_model=d,
            n_layers=int(getattr(cfg, "n_layers", 0) or 0),
            n_heads=heads,
            n_kv_heads=int(getattr(cfg, "n_key_value_heads", 0) or heads),
            d_head=int(getattr(cfg, "d_head", 0) or (d // max(1, heads))),
            d_mlp=0 if attn_only else int(getattr(cfg, "d_mlp", 0) or 0),
            mlp_width=3 if getattr(cfg, "gated_mlp", False) else 2,
            d_vocab=int(getattr(cfg, "d_vocab_out", 0) or getattr(cfg, "d_vocab", 0) or 0),
            element=element_bytes(model),
        )


def stream_bytes(model: HookedModel, pos: int, element: int | None = None) -> int:
    """One prompt's residual-width tensor ``[pos, d_model]`` (``element`` bytes each,
    default the model's dtype; the edge engine stores senders' outputs in float32)."""
    dims = Dims.of(model)
    return int(pos) * dims.d_model * (dims.element if element is None else element)


def block_bytes(model: HookedModel, pos: int) -> int:
    """What one block holds at its peak in a pass without gradients, per prompt of ``pos``
    tokens: its attention (the scores and the pattern, ``2 x n_heads x pos`` per token, beside
    the keys and values repeated to every query head, the queries, the residual stream and the
    norm's output: 7 residual widths) or its MLP (the hidden layer ``mlp_width`` times, the
    pattern still held, 4 residual widths), whichever is larger (bridges of Llama-shaped
    models, traced; ``tests/test_memory_model.py``)."""
    m = Dims.of(model)
    P = int(pos)
    attn = 2 * m.n_heads * P + 7 * m.d_model
    mlp = m.mlp_width * m.d_mlp + m.n_heads * P + 4 * m.d_model
    return m.element * P * max(attn, mlp)


def logit_bytes(model: HookedModel, pos: int, rows: Sequence[int] | None = None) -> int:
    """A prompt's logits: ``d_vocab`` at each of the ``rows`` a pass unembeds (``None``: every
    position; :meth:`interp.runtime.Runtime.unembedded` says which a runtime unembeds)."""
    m = Dims.of(model)
    n = int(pos) if rows is None else min(int(pos), len(set(rows)))
    return m.element * n * m.d_vocab


# What a pass's freed tensors leave resident, in blocks' transients: glibc keeps tensors under
# its mmap threshold (at most 32 MiB) in its heap once freed, and the heap does not shrink
# while later tensors sit above them, so a pass's resident peak holds a block's transients
# live and about as much again kept (traced on the 1B shape and two smaller ones: resident
# 1.6-2.3x the live peak of passes without gradients; ``benchmarks/memory_model.py``).
HEAP_KEPT = 1


def forward_bytes(
    model: HookedModel, batch: int, pos: int, *, rows: Sequence[int] | None = None
) -> int:
    """The peak bytes of one forward pass without gradients over ``[batch, pos]`` tokens:
    per prompt a block's transients (:func:`block_bytes`), live and kept by the allocator
    (:data:`HEAP_KEPT`), and the logits at the ``rows`` it unembeds (:func:`logit_bytes`;
    ``()`` for a pass stopped before the unembedding)."""
    block = (1 + HEAP_KEPT) * block_bytes(model, pos)
    return int(batch) * (block + logit_bytes(model, pos, rows))


def saved_bytes(model: HookedModel, pos: int) -> int:
    """What a forward pass with gradients saves for its backward pass, per prompt: in each
    layer the MLP's hidden layer ``mlp_width`` times (gate, up, activation), the pattern, the
    queries and the keys and values repeated to every query head, and the two residual sums
    (5 residual widths)."""
    m = Dims.of(model)
    P = int(pos)
    per_layer = m.mlp_width * m.d_mlp + m.n_heads * P + 5 * m.d_model
    return m.element * P * m.n_layers * per_layer


def backward_bytes(
    model: HookedModel, batch: int, pos: int, *, rows: Sequence[int] | None = None
) -> int:
    """The peak bytes of a forward and backward pass over ``[batch, pos]`` tokens, per
    prompt: what the forward saves (:func:`saved_bytes`), the logits at ``rows``
    (:func:`logit_bytes`) and their gradient, which is ``[pos, d_vocab]`` whatever the rows
    (the backward of reading a row of the logits makes the whole), and the gradients of one
    block's transients at a time (:func:`block_bytes`)."""
    m = Dims.of(model)
    grad = m.element * int(pos) * m.d_vocab
    held = saved_bytes(model, pos) + logit_bytes(model, pos, rows) + grad
    return int(batch) * (held + block_bytes(model, pos))


def element_bytes(model: HookedModel) -> int:
    """Bytes of one activation element: the model's dtype (float32 unless it says otherwise)."""
    import torch

    dtype = getattr(model.cfg, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        for p in model.parameters() if hasattr(model, "parameters") else ():
            dtype = p.dtype
            break
    return int(torch.empty((), dtype=dtype).element_size()) if dtype is not None else 4


def check_memory(
    model: HookedModel, batch: int, pos: int, *, copies: float = 1.0, what: str = ""
) -> int:
    """Refuse work that runs ``[batch, pos]`` tokens as one batch (no chunks) whose estimated
    peak memory exceeds what the model's device has free (:func:`check_forward` there).
    Analyses that split their prompts into chunks check each chunk's peak instead
    (:func:`interp.engine.chunks.plan`).

    Raises:
        InterpError: naming the estimate, the limit and what to shrink.
    """
    return check_forward(model_device(model), model, batch, pos, copies=copies, what=what)


def check_forward(
    device: Any, model: HookedModel, batch: int, pos: int, *, copies: float = 1.0, what: str = ""
) -> int:
    """Refuse ``[batch, pos]`` tokens run as one batch whose estimated peak memory exceeds
    what ``device`` (the model's, looked up by the caller) has free.

    ``copies`` scales one forward pass (a backward pass roughly triples it).
    Returns the estimate in bytes.

    Raises:
        InterpError: naming the estimate, the limit and what to shrink.
    """
    need = int(forward_bytes(model, batch, pos) * copies)
    have = available_memory(device)
    if need > have:
        a, b = sizes(need, have)
        raise InterpError(
            f"{what or 'input'} {batch} x {pos} tokens needs about {a} for its forward "
            f"pass{'es' if copies > 1 else ''}, but only {b} is available; use fewer or "
            "shorter sequences (a smaller --batch)"
        )
    return need


ID_BYTES = 8  # one token id as torch.long (analyses hold their tokens as int64 ids)


def check_ids(
    device: Any,
    batch: int,
    pos: int,
    *,
    what: str = "tokens",
    fix: str = "pass fewer prompts at a time (several calls) or shorter ones",
) -> int:
    """Refuse ``[batch, pos]`` token ids that cannot be held as int64 ids on ``device``: the
    one limit on the number of prompts of an analysis that runs them in chunks (each chunk's
    peak is :func:`interp.engine.chunks.plan`'s). Returns their bytes.

    Example:
        >>> check_ids("cpu", 4, 16)
        512

    Raises:
        InterpError: naming the ids' size, the memory available and ``fix``.
    """
    need = int(batch) * int(pos) * ID_BYTES
    have = available_memory(device)
    if need > have:
        a, b = sizes(need, have)
        raise InterpError(
            f"{what} of shape {batch:,} x {pos} need about {a} as int64 ids alone, but only "
            f"{b} is available; {fix}"
        )
    return need


_UNITS = ((2**30, "GiB", 2), (2**20, "MiB", 1), (2**10, "KiB", 1))  # (bytes, name, decimals)


def size_text(n: float, decimals: int | None = None) -> str:
    """Bytes as text: in GiB, MiB or KiB by the size, to ``decimals`` places (2 for GiB, 1
    below), or a count of bytes under one KiB. The one formatter of sizes; a refusal shows
    its two sides with :func:`sizes`.

    Example:
        >>> size_text(3 * 2**30), size_text(1536 * 2**10), size_text(700)
        ('3.00 GiB', '1.5 MiB', '700 bytes')
    """
    unit = next((u for u in _UNITS if n >= u[0]), None)
    if unit is None:
        return _count(n)
    scale, name, default = unit
    return f"{n / scale:.{default if decimals is None else decimals}f} {name}"


def sizes(a: float, b: float) -> tuple[str, str]:
    """Two sizes as text (:func:`size_text`) that differ visibly whenever the sizes do: where
    they would read the same, with more decimals (up to 3), else as exact byte counts.

    Example:
        >>> sizes(3 * 2**30, 2**20)
        ('3.00 GiB', '1.0 MiB')
        >>> sizes(2**20 + 2**12, 2**20)
        ('1.004 MiB', '1.000 MiB')
        >>> sizes(2**20 + 100, 2**20)
        ('1,048,676 bytes', '1,048,576 bytes')
    """
    for decimals in (None, 2, 3):
        ta, tb = size_text(a, decimals), size_text(b, decimals)
        if ta != tb or int(a) == int(b):
            return ta, tb
    return _count(a), _count(b)


def _count(n: float) -> str:
    return f"{int(n):,} byte{'' if int(n) == 1 else 's'}"


TABLE_ROW_BYTES = 300  # a table row of a few numbers and label strings, in pandas


def check_table(rows: int, device: Any = None, *, what: str, memory_budget: Any = None) -> int:
    """Refuse a table of ``rows`` rows that cannot fit the memory budget (about
    :data:`TABLE_ROW_BYTES` a row); returns the estimate in bytes.

    Raises:
        InterpError: naming the estimate, the budget and what to shrink.
    """
    need = rows * TABLE_ROW_BYTES
    have = budget(device, memory_budget)
    if need > have:
        source = "given" if memory_budget is not None else "a quarter of the free memory"
        a, b = sizes(need, have)
        raise InterpError(
            f"{what} needs about {a}, more than the {b} budget ({source}); "
            "score fewer edges (edges=), or whole edges (positions=None) on shorter prompts"
        )
    return need

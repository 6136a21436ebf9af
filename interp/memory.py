"""Memory: what a computation may use, and what one forward pass needs, known before it runs.

:func:`budget` is the one default every engine packs its passes under: a
quarter of the memory free on the model's device (``MemAvailable`` on a CPU,
free memory on a GPU), unless the caller gives a budget in bytes.
:func:`forward_bytes` is a rough peak of one forward pass's activations, used
to refuse work that cannot fit before it starts (:func:`check_memory`).

Example:
    >>> budget("cpu", 1 << 20)
    1048576
"""

from __future__ import annotations

import os
from typing import Any

from interp.errors import InterpError

BUDGET_FRACTION = 4  # the default budget is 1 / BUDGET_FRACTION of the free memory


def budget(device: Any = None, memory_budget: Any = None) -> int:
    """Bytes a computation on ``device`` may use: ``memory_budget`` when given, else a
    quarter of what is free there.

    Raises:
        InterpError: for a ``memory_budget`` that is not a positive integer.
    """
    if memory_budget is not None:
        from interp.checks import check_int

        return check_int(memory_budget, "memory_budget", minimum=1)
    return available_memory(device) // BUDGET_FRACTION


def available_memory(device: Any = None) -> int:
    """Bytes a computation on ``device`` can still use (CPU: ``MemAvailable``; GPU: free memory).

    Falls back to 4 GiB where neither can be read.
    """
    dev_type = getattr(device, "type", str(device or "cpu"))
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


def forward_bytes(model: Any, batch: int, pos: int) -> int:
    """A rough peak of the activation bytes of one forward pass over ``[batch, pos]`` tokens.

    Per position: the logits, a few residual-width tensors, the MLP's hidden
    layer, and a layer's attention scores and pattern (``n_heads x pos``);
    4 bytes each. Used to refuse work that cannot fit before it starts.
    """
    cfg = model.cfg
    d_mlp = int(getattr(cfg, "d_mlp", 0) or 0) if not getattr(cfg, "attn_only", False) else 0
    d_vocab = int(getattr(cfg, "d_vocab_out", 0) or getattr(cfg, "d_vocab", 0) or 0)
    d_model = int(getattr(cfg, "d_model", 0) or 0)
    per_pos = d_vocab + 8 * d_model + 2 * d_mlp + 3 * int(cfg.n_heads) * int(pos)
    return 4 * int(batch) * int(pos) * per_pos


def element_bytes(model: Any) -> int:
    """Bytes of one activation element: the model's dtype (float32 unless it says otherwise)."""
    import torch

    dtype = getattr(model.cfg, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        for p in model.parameters() if hasattr(model, "parameters") else ():
            dtype = p.dtype
            break
    return int(torch.empty((), dtype=dtype).element_size()) if dtype is not None else 4


def check_memory(model: Any, batch: int, pos: int, *, copies: float = 1.0, what: str = "") -> int:
    """Refuse work whose estimated peak memory exceeds what the model's device has free.

    ``copies`` scales one forward pass (a backward pass roughly triples it).
    Returns the estimate in bytes.

    Raises:
        InterpError: naming the estimate, the limit and what to shrink.
    """
    from interp.protocol import model_device

    need = int(forward_bytes(model, batch, pos) * copies)
    have = available_memory(model_device(model))
    if need > have:
        raise InterpError(
            f"{what or 'input'} {batch} x {pos} tokens needs about {_gb(need)} for its forward "
            f"pass{'es' if copies > 1 else ''}, but only {_gb(have)} is available; use fewer or "
            "shorter sequences (a smaller --batch)"
        )
    return need


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


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
        raise InterpError(
            f"{what} needs about {_gb(need)}, more than the {_gb(have)} budget ({source}); "
            "score fewer edges (edges=), or whole edges (positions=None) on shorter prompts"
        )
    return need

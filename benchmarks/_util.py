"""Small timing helpers for the benchmark scripts (ratios are measured in one run)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_time(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def tensor_bytes(obj: Any) -> int:
    """Bytes held by the tensors in a cache / dict / list."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if hasattr(obj, "cache_dict"):
        obj = obj.cache_dict
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0

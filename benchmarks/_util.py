"""Small timing helpers for the benchmark scripts (ratios are measured in one run)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls, in seconds, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def alternating(
    cases: dict[str, Callable[[], Any]], rounds: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Median ms of each case, timed in ``rounds`` rounds that run every case once in turn
    (after one warm-up round: once-per-model checks, caches), so that load from elsewhere
    falls on all of them alike. ``clock``: ``time.perf_counter`` (wall) or
    ``time.process_time`` (this process's CPU time)."""
    import statistics

    times: dict[str, list[float]] = {k: [] for k in cases}
    for fn in cases.values():
        fn()
    for _ in range(rounds):
        for name, fn in cases.items():
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def clock_options(ap: Any) -> None:
    """``--threads`` and ``--cpu-time`` on an ``argparse`` parser (:func:`clock_of` reads them)."""
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--cpu-time", action="store_true", help="time by CPU time, not wall")


def clock_of(args: Any) -> Callable[[], float]:
    """Set ``--threads`` torch threads (if given) and return the clock ``--cpu-time`` asks
    for: ``time.process_time`` (this process's CPU time) or ``time.perf_counter`` (wall)."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return time.process_time if args.cpu_time else time.perf_counter


def best_time(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    return timed(fn, repeat)[0]


def forward_time(model: Any, tokens: Any, repeat: int = 3) -> float:
    """Mean wall time of a plain no-grad forward pass, after one warm-up pass."""
    import torch

    with torch.no_grad():
        model(tokens)
        t = time.perf_counter()
        for _ in range(repeat):
            model(tokens)
    return (time.perf_counter() - t) / repeat


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def peak_growth(fn: Callable[[], Any]) -> int:
    """Bytes of resident memory ``fn`` adds at its peak, sampled every 2 ms."""
    import gc
    import threading

    gc.collect()
    base, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            done.wait(0.002)

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        fn()
    finally:
        done.set()
        watcher.join()
    return max(peak[0], _rss()) - base


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


def side_venv(path: Path, package: str, module: str) -> Path:
    """The python of a side virtualenv at ``path`` that imports ``module``, made when missing:
    ``torch==2.13.0`` first (so pip keeps the CPU build), then ``package``. For a peer that
    cannot share our environment (sae-lens and circuit-tracer pin TransformerLens < 4)."""
    python = path / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", f"import {module}"]).returncode == 0:
        return python
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)  # the CPU build, before anything asks
    subprocess.run([*pip, package], check=True)
    print(f"made {path} in {time.perf_counter() - t:.0f} s")
    return python

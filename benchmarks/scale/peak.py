"""Memory readings inside a measurement's process: resident and CUDA peaks, the host's
state, the weights' bytes.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Any

GiB = 1 << 30


def _status(field: str) -> int:
    """A ``/proc/self/status`` field (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _settle() -> int:
    """Resident bytes after a garbage collection and returning free heap to the system."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass
    return _status("VmRSS")


class Peak:
    """The peak of resident memory (and of CUDA allocations) from ``start()`` to ``stop()``.

    ``VmHWM`` is reset by writing 5 to ``/proc/self/clear_refs`` (Linux 4.0+); where that
    is refused, a thread samples ``VmRSS`` every 2 ms instead.
    """

    def __init__(self, device: Any):
        self.cuda = getattr(device, "type", str(device)) == "cuda"

    def start(self) -> None:
        self.rss0 = _settle()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.sampler = None
        except OSError:
            self.done, self.sampled = threading.Event(), [self.rss0]
            self.sampler = threading.Thread(target=self._sample, daemon=True)
            self.sampler.start()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.cuda0 = torch.cuda.memory_allocated()

    def _sample(self) -> None:
        while not self.done.is_set():
            self.sampled[0] = max(self.sampled[0], _status("VmRSS"))
            self.done.wait(0.002)

    def stop(self) -> dict[str, float]:
        if self.sampler is None:
            rss_peak = _status("VmHWM")
        else:
            self.done.set()
            self.sampler.join()
            rss_peak = max(self.sampled[0], _status("VmRSS"))
        out = {"rss_peak": rss_peak}
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            out["cuda_peak"] = torch.cuda.max_memory_allocated()
            out["cuda_before"] = self.cuda0
        return out


def _host() -> dict[str, Any]:
    """The machine's state: load average and available memory (others' work shows here)."""
    from interp.core.memory import available_memory

    return {
        "loadavg": round(os.getloadavg()[0], 2),
        "mem_available_gib": round(available_memory() / GiB, 2),
    }


def weights_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, each storage counted once (tied
    embeddings are one matrix)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.device, t.untyped_storage().data_ptr())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total

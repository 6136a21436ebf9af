"""FLOPs as torch counts them: every op in ``torch.utils.flop_counter.flop_registry``
(matrix products and attention, forward and backward), under a ``TorchDispatchMode``.

``FlopCounterMode`` tracks modules with hooks that fail under ``torch.autograd.grad``; a
dispatch mode sees every op, whatever calls it. CPU's fused attention
(``_scaled_dot_product_flash_attention_for_cpu`` and its backward) is not in the registry:
it is counted by the registry's formula for the flash kernel, the same arithmetic.

Example:
    >>> import torch
    >>> with FlopMeter() as m:
    ...     _ = torch.ones(4, 8) @ torch.ones(8, 2)
    >>> m.total
    128
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten
_ALIASES = {
    aten._scaled_dot_product_flash_attention_for_cpu: aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: (
        aten._scaled_dot_product_flash_attention_backward
    ),
}


class FlopMeter(TorchDispatchMode):
    """Sum the FLOPs of every registered op run inside the block (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        key = _ALIASES.get(packet, packet)
        count = flop_registry.get(key)
        if count is not None:  # the registry's functions take tensors (their shapes count)
            flops = count(*args, out_val=out, **kwargs)
            self.total += int(flops)
            name = str(packet).split(".")[-1]
            self.by_op[name] = self.by_op.get(name, 0) + int(flops)
        return out

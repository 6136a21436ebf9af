"""Where a model's layers live: ``device_map`` checked before the weights load, offload refused.

``load_model(folder, device_map=...)`` passes the map to Hugging Face /
accelerate, which places each module on the device it names (``"auto"``
fills the devices in order; a dict names modules: ``{"model.layers.0":
"cuda:0", "model.layers.1": "cuda:1", ...}``). Each layer then runs where its
weights are, and accelerate's hooks move the residual stream between devices;
``interp``'s hooks, caches and engines compute on the device of the
activation they are given and move only what they must (a layer's weights
never move; senders' outputs are gathered on the first device).

*Offload* is different: a module mapped to ``"disk"`` (or to ``"cpu"`` while
other modules are on a GPU) keeps its weights off the device, and they exist
only while its forward pass runs (on the meta device otherwise). ``interp``
reads weights outside forward passes (``W_Q``, ``W_O``, ``W_U``, the norms: every
engine and weight-based analysis does), so an offloaded model is refused,
before its weights load when the map says so, else as soon as they have.

Example:
    >>> check_device_map({"model.layers.0": "cpu", "model.layers.1": "cpu", "lm_head": "cpu"})
    >>> check_device_map({"model.layers.0": "cpu", "model.layers.1": "disk"})
    Traceback (most recent call last):
    ...
    interp.core.errors.InterpError: device_map offloads model.layers.1 to 'disk': ...
"""

from __future__ import annotations

from typing import Any

from interp.core.errors import InterpError

_FIX = (
    "interp reads weights outside the forward pass, and offloaded weights are not in memory "
    "then; map every module to a device (cpu, cuda:0, cuda:1, ...) or give max_memory room "
    "for the whole model on its devices (docs/scale.md)"
)
_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _kind(device: Any) -> str:
    if isinstance(device, int):
        return "cuda"
    return str(device).split(":")[0]


def check_device(device: Any, *, name: str = "device") -> Any:
    """``device`` as a ``torch.device`` this machine has (``None`` stays ``None``): the one
    rule for ``device=`` and each device a ``device_map`` names (``name`` says which, in the
    message).

    Raises:
        InterpError: for an unknown device type, or one this machine lacks
            (``cuda`` without a GPU, ``mps`` off Apple silicon, an index past
            the last GPU).
    """
    import torch

    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise InterpError(
            f"unknown {name} {device!r}; use 'cpu', 'cuda', 'cuda:1' or 'mps'"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InterpError(
                f"{name} {device!r}: CUDA is not available on this machine (torch "
                f"{torch.__version__}); use device='cpu'"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InterpError(
                f"{name} {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise InterpError(f"{name} {device!r}: MPS is not available here; use device='cpu'")
    elif dev.type != "cpu":
        raise InterpError(f"{name} {device!r} is not supported here; use 'cpu', 'cuda' or 'mps'")
    return dev


def check_device_map(device_map: Any) -> None:
    """Refuse a ``device_map`` that offloads (``"disk"``, ``"meta"``, or ``"cpu"`` beside
    GPU entries, which accelerate offloads), one that is not a map or maps nothing, or one
    naming a device this machine lacks (the rule of ``device=``:
    :func:`check_device`); loads nothing.

    Raises:
        InterpError: naming the offloaded modules, or the device and what this machine has,
            and the fix.
    """
    if device_map is None or (isinstance(device_map, str) and device_map in _STRATEGIES):
        return
    if isinstance(device_map, str):  # one device for every module
        device_map = {"": device_map}
    if not isinstance(device_map, dict):
        raise InterpError(
            f"device_map must be a dict of module name to device or one of "
            f"{', '.join(_STRATEGIES)}, got {type(device_map).__name__}"
        )
    if not device_map:
        raise InterpError(
            "device_map is empty: it places no module; map each module to a device, use one "
            f"of {', '.join(_STRATEGIES)}, or pass device= instead"
        )
    kinds = {name: _kind(dev) for name, dev in device_map.items()}
    accel = any(k in ("cuda", "mps") for k in kinds.values())
    for name, kind in kinds.items():
        if kind in ("disk", "meta") or (kind == "cpu" and accel):
            raise InterpError(
                f"device_map offloads {name or 'the model'} to {device_map[name]!r}: {_FIX}"
            )
    for name, dev in device_map.items():  # an int is a GPU's index, as accelerate reads it
        where = "device_map" if name == "" else f"device_map[{name!r}]"
        check_device(f"cuda:{dev}" if isinstance(dev, int) else dev, name=where)


def check_not_offloaded(hf_model: Any) -> None:
    """Refuse a loaded model some of whose weights were offloaded (``device_map="auto"``
    without room for every layer on a device).

    Raises:
        InterpError: naming the offloaded weights and the fix.
    """
    gone = [n for n, p in hf_model.named_parameters() if p.device.type == "meta"]
    if gone:
        where = getattr(hf_model, "hf_device_map", None) or {}
        off = sorted({m for m, d in where.items() if _kind(d) in ("disk", "meta", "cpu")})
        raise InterpError(
            f"{len(gone)} weights of this model were offloaded (e.g. {gone[0]}"
            + (f"; modules {', '.join(off[:3])}" if off else "")
            + f"): {_FIX}"
        )

"""What a dictionary is built from, checked: its tensors, a dtype, a path.

Every tensor of a :class:`~interp.dictionaries.Dictionary` (``W_enc``, ``b_enc``,
``W_dec``, ``b_dec``, ``threshold``) is floating point and finite: a NaN or an infinity in
one would not fail anywhere, it would turn every feature activation, splice and score
computed through the dictionary into NaN. So the constructor, :func:`load_dictionary`,
:func:`save_dictionary`, training and :func:`check_dictionary` (the gate of every analysis
that takes a dictionary) refuse one with :func:`check_finite_weight`, naming the tensor and
how many of its values are bad, before any work.

Example:
    >>> import numpy as np, torch
    >>> as_weight(np.zeros((2, 3), dtype=np.float32), "W_enc").dtype
    torch.float32
    >>> check_finite_weight(torch.tensor([1.0, float("nan")]), "b_dec")
    Traceback (most recent call last):
    ...
    interp.core.errors.InterpError: b_dec has 1 NaN value(s) (of 2): ...
    >>> weight_dtype("bfloat16")
    torch.bfloat16
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from interp.core.errors import InterpError

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# What a bad tensor means and what to do, when nothing more is known of where it came from.
CORRUPT = (
    "a dictionary's weights must be finite (a corrupt file or a diverged training run); "
    "retrain or re-download it"
)


def as_weight(value: Any, name: str) -> torch.Tensor:
    """``value`` (a tensor or a numpy array) as a floating-point tensor.

    Args:
        value: a ``torch.Tensor`` or a numpy array.
        name: the tensor's name in messages (``'W_enc'``).

    Returns:
        The tensor (a numpy array converted, sharing its memory where it can).

    Raises:
        InterpError: any other type, or a dtype other than those of ``DTYPES`` (an
            integer, bool, complex or float8 one).
    """
    if not isinstance(value, torch.Tensor):
        import numpy as np

        if not isinstance(value, np.ndarray):
            raise InterpError(
                f"{name} must be a torch.Tensor or a numpy array, got {type(value).__name__}: "
                f"pass it as torch.tensor(...)"
            )
        try:
            value = torch.as_tensor(value)
        except (TypeError, RuntimeError):
            raise InterpError(
                f"{name} is a numpy array of dtype {value.dtype}, which torch cannot hold: "
                "pass a floating-point array"
            ) from None
    if value.dtype not in DTYPES.values():  # float8 too: torch cannot check it is finite
        raise InterpError(
            f"{name} has dtype {value.dtype}: a dictionary's weights are floating point "
            f"({', '.join(DTYPES)}); convert it with .float() (integer weights are not "
            "cast silently)"
        )
    return value


def check_finite_weight(t: torch.Tensor, name: str, *, fix: str = CORRUPT) -> torch.Tensor:
    """Refuse a tensor holding NaN or infinite values, naming it and counting them.

    Args:
        t: the tensor.
        name: its name in the message (``'W_enc'``, or ``"file: 'W_enc'"``).
        fix: what the message says the values mean and what to do.

    Returns:
        ``t``.

    Raises:
        InterpError: ``t`` has a NaN or an infinite value, a dtype other than those of
            ``DTYPES`` (float8: torch cannot test it) or no values (the meta device).
    """
    if t.dtype not in DTYPES.values():  # e.g. D.to(torch.float8_e4m3fn) after it was made
        raise InterpError(
            f"{name} has dtype {t.dtype}: a dictionary's weights are {', '.join(DTYPES)}; "
            "convert it with D.float()"
        )
    if t.device.type == "meta":
        raise InterpError(f"{name} is on the meta device, with no values: load its weights")
    with torch.no_grad():
        if bool(torch.isfinite(t).all()):
            return t
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    bad = [f"{nan} NaN" if nan else "", f"{inf} infinite" if inf else ""]
    raise InterpError(
        f"{name} has {' and '.join(b for b in bad if b)} value(s) (of {t.numel()}): {fix}"
    )


def weight_dtype(dtype: Any) -> torch.dtype | None:
    """A dtype for a dictionary's tensors: a floating ``torch.dtype`` or its name.

    Args:
        dtype: ``None``, a ``torch.dtype`` (``torch.float16``) or one of ``'float32'``,
            ``'float16'``, ``'bfloat16'``, ``'float64'`` (``'torch.'`` prefix allowed).

    Returns:
        The ``torch.dtype`` (``None`` stays ``None``).

    Raises:
        InterpError: any other value, or a dtype that is not floating point.
    """
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.removeprefix("torch.")]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    raise InterpError(
        f"dtype {dtype!r} is not a dictionary dtype: use torch.float32 or one of the names "
        f"{', '.join(map(repr, DTYPES))}"
    )


def check_path(path: Any, what: str) -> Path:
    """``path`` (a string or ``os.PathLike``, not empty) as a :class:`~pathlib.Path`.

    Args:
        path: the path given.
        what: what it names, for the message (``'dictionary folder'``).

    Returns:
        The path.

    Raises:
        InterpError: ``None``, a number or another type, or an empty string.
    """
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise InterpError(
            f"the {what} must be a path (a str or pathlib.Path), got {type(path).__name__} {path!r}"
        )
    text = os.fsdecode(os.fspath(path))
    if not text.strip():
        raise InterpError(f"the {what} is an empty path: pass the folder or file")
    return Path(text)

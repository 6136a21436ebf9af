"""Scalar validators: integers, booleans, finite numbers, seeds, positions and budgets.

The floor under every other check: nothing here knows a model, a device or the memory
model, so :mod:`interp.core.memory`, :mod:`interp.core.checks` and the engines can all
stand on it. A bad value fails with an :class:`~interp.core.errors.InterpError` that names
the option, what it got and what it accepts.

Example:
    >>> check_int(3, "steps", minimum=1), position_index(-1, 6)
    (3, 5)
    >>> position_mask(6, [0, -1]).tolist()
    [True, False, False, False, False, True]
"""

from __future__ import annotations

import math
import operator
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from interp.core.errors import InterpError


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as a Python int (numpy and torch integers accepted; bools and floats refused).

    Raises:
        InterpError: for a non-integer, or one below ``minimum``.
    """
    if isinstance(value, bool) or value is None:
        raise InterpError(f"{name} must be an integer, got {value!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise InterpError(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and out < minimum:
        raise InterpError(f"{name} must be >= {minimum}, got {out}")
    return out


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a Python bool: ``True`` or ``False`` (numpy and torch bools accepted);
    anything else (``"yes"``, ``"no"``, ``1``, ``None``) is refused, never read as truthy.

    Example:
        >>> import numpy as np
        >>> check_bool(True, "estimate"), check_bool(np.False_, "progress")
        (True, False)

    Raises:
        InterpError: naming the option and what it got.
    """
    if isinstance(value, bool):
        return value
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(value, "ndim", None) == 0 and str(dtype) in _BOOL_DTYPES:
        return bool(value)
    raise InterpError(f"{name} must be True or False, got {value!r}")


_BOOL_DTYPES = ("bool", "torch.bool")  # numpy's and torch's, as str(dtype) names them


def check_finite(value: Any, name: str, *, positive: bool = False) -> float:
    """``value`` as a finite float (positive when asked).

    Raises:
        InterpError: for a non-number, NaN, infinity, or a non-positive value when
            ``positive``.
    """
    if isinstance(value, bool):
        raise InterpError(f"{name} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InterpError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise InterpError(f"{name} must be finite, got {out}")
    if positive and out <= 0:
        raise InterpError(f"{name} must be positive, got {out}")
    return out


def check_seed(seed: Any) -> int:
    """A seed usable by ``torch.manual_seed`` and numpy: an int in ``[0, 2**63)``.

    Raises:
        InterpError: for a non-integer or out-of-range seed.
    """
    s = check_int(seed, "seed", minimum=0)
    if s >= 2**63:
        raise InterpError(f"seed must be below 2**63, got {s}")
    return s


def position_index(value: Any, n: int, name: str = "position") -> int:
    """One position (an int, negative from the end) as an index into ``n`` positions, by the
    one integer rule (:func:`check_int`: numpy and torch integers accepted; floats, bools and
    strings refused, never rounded).

    Example:
        >>> position_index(-1, 6), position_index(2, 6)
        (5, 2)

    Raises:
        InterpError: for a non-integer, or a position outside ``-n .. n - 1``.
    """
    if isinstance(value, (str, bytes)):
        raise InterpError(f"{name} must be an integer position, got the string {value!r}")
    if isinstance(value, Iterable) and not _zero_dim(value):
        raise InterpError(f"{name} must be one integer position, got {value!r}")
    p = check_int(value, name)
    if not -n <= p < n:
        raise InterpError(f"{name} {p} is out of range for {n} positions (use -{n}..{n - 1})")
    return p % n


def _zero_dim(value: Any) -> bool:
    return getattr(value, "ndim", None) == 0


def warn_duplicates(given: Sequence[int], name: str) -> None:
    """Warn (as for duplicate heads) when positions name one index more than once."""
    dupes = sorted(p for p, count in Counter(given).items() if count > 1)
    if dupes:
        warnings.warn(
            f"duplicate {name} {dupes} were given more than once (after counting negative "
            "positions from the end); each is used once",
            UserWarning,
            stacklevel=4,
        )


def position_mask(n: int, positions: Any, *, name: str = "positions") -> Any:
    """``positions`` (ints, negative from the end, or a ``[pos]`` bool mask) as a ``[pos]`` mask.

    ``None`` stays ``None`` (every position); duplicates collapse with a warning.

    Raises:
        InterpError: for an empty selection, non-integers, out-of-range
            positions, or a mask of the wrong length.
    """
    import torch

    if positions is None:
        return None
    if isinstance(positions, torch.Tensor) and positions.dtype == torch.bool:
        if tuple(positions.shape) != (n,):
            raise InterpError(f"{name} mask must have shape ({n},), got {tuple(positions.shape)}")
        if not bool(positions.any()):
            raise InterpError(f"{name} mask selects no position")
        return positions.cpu()
    if isinstance(positions, (str, bytes)):
        raise InterpError(f"{name} must be integers or a bool mask, got {positions!r}")
    if isinstance(positions, torch.Tensor):
        items = positions.reshape(-1).tolist()
    elif isinstance(positions, Iterable):
        items = list(positions)
    else:
        items = [positions]  # a single position
    if not items:
        raise InterpError(f"{name} is empty; pass at least one position, or None for all")
    idx = [check_int(p, "each position") for p in items]
    bad = [p for p in idx if not -n <= p < n]
    if bad:
        raise InterpError(f"{name} {bad} out of range for sequences of length {n}")
    warn_duplicates([p % n for p in idx], name)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[[p % n for p in idx]] = True
    return mask


def check_memory_budget(memory_budget: Any) -> int:
    """A memory budget in bytes: a positive integer.

    Raises:
        InterpError: for a budget that is not a positive integer.
    """
    return check_int(memory_budget, "memory_budget", minimum=1)

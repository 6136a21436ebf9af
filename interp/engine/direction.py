"""Which way a patch goes: ``direction``, one word for every patching function.

Patching runs the model on two prompts, the clean ``tokens`` and the
``corrupted_tokens``, and splices activations of one run (the *source*) into
the other (the *base* run; Heimersheim and Nanda 2024, "How to use and
interpret activation patching"):

* ``"noising"`` (the default): the corrupted run's activation into the clean
  run. The base is the clean run, as in every ablation and in circuit
  evaluation: does the metric *need* this component (or path, or edge)?
* ``"denoising"``: the clean run's activation into the corrupted run. Is this
  component *enough* to restore the clean behaviour? (TransformerLens's
  ``patching`` grids go this way.)

Every patching table reports the same two columns, with one definition:

* ``effect = m(patched) - m(base run)``;
* ``normalized = effect / (m(source run) - m(base run))``: 1 when the patch
  moves the metric all the way to the source run's, 0 when it does nothing.

The metric is always scored against the clean ``tokens`` (a loss metric's
targets are the clean continuation, in both runs), and ``df.attrs["direction"]``
says which way the table went.

Example:
    >>> import torch
    >>> base, source = runs("denoising", torch.tensor([[1, 2]]), torch.tensor([[1, 3]]))
    >>> base.tolist(), source.tolist()
    ([[1, 3]], [[1, 2]])
    >>> normalized([0.5, 2.0], base=0.0, source=2.0)
    [0.25, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from interp.core.errors import InterpError

Direction = Literal["noising", "denoising"]
DIRECTIONS: tuple[str, ...] = ("noising", "denoising")
SPAN_RTOL = 1e-5  # two runs' metrics closer than this (relative) are the same metric


def check_direction(direction: Any) -> str:
    """``direction`` if it is ``"noising"`` or ``"denoising"``.

    Raises:
        InterpError: for anything else, naming both.
    """
    if direction not in DIRECTIONS:
        raise InterpError(
            f"unknown direction {direction!r}: 'noising' patches the corrupted run's activations "
            "into the clean run, 'denoising' the clean run's into the corrupted run"
        )
    return str(direction)


def runs(direction: str, tokens: Any, corrupted_tokens: Any) -> tuple[Any, Any]:
    """``(base, source)``: the tokens of the run that is patched, and of the run patched from."""
    if direction == "noising":
        return tokens, corrupted_tokens
    return corrupted_tokens, tokens


def clean_first(direction: str, base: Any, source: Any) -> tuple[Any, Any]:
    """``(clean, corrupted)`` from the base run's and the source run's values.

    Example:
        >>> clean_first("denoising", base=-1.0, source=2.0)
        (2.0, -1.0)
    """
    return (base, source) if direction == "noising" else (source, base)


def check_span(base: float, source: float, what: str, dtype: Any = None) -> None:
    """Refuse a normalisation by ``source - base`` when the two runs agree, exactly or to
    within rounding (:data:`SPAN_RTOL` of their size in float32; ``SPAN_ULPS`` eps of it for
    a model in float16 / bfloat16, ``dtype``: :mod:`interp.core.precision`): runs that agree
    in exact arithmetic are bit-equal on one CPU and a rounding apart on another, and a
    table normalised by rounding noise is not a result.

    Raises:
        InterpError: naming both values and what to change; for a NaN or infinite value.
    """
    from interp.core.precision import FROM_MODEL, SPAN_ULPS, tolerance

    if not (math.isfinite(base) and math.isfinite(source)):  # NaN would pass the test below
        raise InterpError(
            f"the two runs give the metric {base:.6g} and {source:.6g}, not both finite, so "
            f"{what} would be NaN; {FROM_MODEL}, or the metric divides by zero"
        )
    size = max(abs(base), abs(source))
    if abs(source - base) <= tolerance(dtype, size, float32=SPAN_RTOL, ulps=SPAN_ULPS):
        raise InterpError(
            f"the two runs give the same metric ({base:.6g} and {source:.6g}, equal to float "
            f"rounding), so {what} would divide by zero or by noise; pass prompts (or an "
            "ablation) that change the metric"
        )


def effects(patched: Sequence[float], base: float) -> list[float]:
    """``m(patched) - m(base run)`` for each patched value."""
    return [float(v) - base for v in patched]


def normalized(effect: Sequence[float], *, base: float, source: float) -> list[float]:
    """``effect / (m(source run) - m(base run))`` (NaN when the two runs agree)."""
    span = source - base
    return [e / span if span else math.nan for e in effect]

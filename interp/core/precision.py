"""How close two computations of one number must be, in the precision a model runs in.

Every exactness claim in ``interp`` compares two computations of one number:
an engine's shortcut against the model's own pass (a resumed pass, queries
recomputed per receiver), or an analysis's rows against the model's total
(DLA rows against the logit difference, QK rows against the score). In
float32 two correct computations differ by rounding far below ``1e-5`` of
the numbers' size, and each claim keeps the float32 tolerance it states. In
float16 and bfloat16 every number the model writes is rounded to 11 or 8
significant bits, so two correct computations of one number (a sum taken in
another order, a projection split per head) differ by about a unit in the
last place of what they touch, carried through the layers after it. One rule
for every claim:

    tolerance = max(float32_rtol, ULPS * eps(dtype)) * max(1, magnitude)

with ``eps`` the dtype's machine epsilon (``torch.finfo``: 2**-7 = 0.0078 for
bfloat16, 2**-10 for float16, unchanged claims in float32 and float64) and
``magnitude`` what each claim names (the largest logit, the largest score).
``ULPS = 16``: the largest gap measured is 2.9 eps (the edge engine's probe on
a 16-layer Llama-3.2-1B shape; 0 to 1.5 eps on 2- to 4-layer models,
``benchmarks/precision.py``), and such gaps grow with depth. Two *runs* whose
metrics differ by less than :data:`SPAN_ULPS` eps of their size are the same
run to rounding (a normalisation by their difference is refused).
What the analyses add up is accumulated in float32 whatever the model's
precision (every piece is cast before it is summed), so the gap a claim
allows in bfloat16 is the model's own rounding, not the analysis's.

Example:
    >>> import torch
    >>> tolerance(torch.float32, 12.0, float32=1e-5) == 1e-5 * 12.0
    True
    >>> tolerance(torch.bfloat16, 12.0, float32=1e-5)  # 16 * 2**-7 * 12
    1.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel

ULPS = 16  # units in the last place a reduced-precision claim allows, of the magnitude
SPAN_ULPS = 2  # two runs' metrics closer than this (eps of their size) are one run
REDUCED = ("float16", "bfloat16")


def model_dtype(model: HookedModel) -> Any:
    """The floating dtype of the model's weights (float32 for a model without weights)."""
    import torch

    params = model.parameters() if hasattr(model, "parameters") else ()
    for p in params:
        if p.dtype.is_floating_point:
            return p.dtype
    return torch.float32


def is_reduced(dtype: Any) -> bool:
    """Whether ``dtype`` is float16 or bfloat16 (a reduced-precision model)."""
    return str(dtype).removeprefix("torch.") in REDUCED


def rtol(dtype: Any, *, float32: float, ulps: float = ULPS) -> float:
    """The relative tolerance of a claim that holds to ``float32`` in float32, in ``dtype``
    (module docstring; ``ulps``: :data:`SPAN_ULPS` for two runs' metrics)."""
    import torch

    if not is_reduced(dtype):
        return float32
    return max(float32, ulps * float(torch.finfo(dtype).eps))


def tolerance(dtype: Any, magnitude: float, *, float32: float, ulps: float = ULPS) -> float:
    """The largest gap allowed between two computations of numbers of size ``magnitude``
    (module docstring)."""
    return rtol(dtype, float32=float32, ulps=ulps) * max(1.0, float(magnitude))


# the likely cause of a non-finite activation or logit of the model's own pass, and the fix
FROM_MODEL = (
    "the model's own pass makes them: a NaN or infinite weight, or a hook left on the model "
    "that writes one; check its weights with torch.isfinite and remove leftover hooks "
    "(model.reset_hooks())"
)


def within(gap: float, tol: float) -> bool:
    """Whether ``gap`` is within ``tol``: ``gap <= tol``, so a NaN gap (a NaN in either of
    the two computations) fails the claim. ``gap > tol`` is False for NaN and would let it
    through: every exactness check is written ``if not within(gap, tol)``.

    Example:
        >>> within(1e-7, 1e-5), within(float("nan"), 1e-5)
        (True, False)
    """
    return bool(gap <= tol)


def worst(gaps: Iterable[float]) -> float:
    """The largest of ``gaps`` (0.0 for none), NaN where any is NaN: Python's ``max`` keeps or
    drops a NaN by where it stands (``max(0.0, nan)`` is 0.0), so a reduction over gaps uses
    this.

    Example:
        >>> worst([0.0, 2e-7, 1e-7]), worst([0.0, float("nan"), 1e-7])
        (2e-07, nan)
    """
    out = 0.0
    for g in gaps:
        g = float(g)
        if g != g:
            return math.nan
        out = max(out, g)
    return out


def nonfinite(x: Any) -> str | None:
    """What a tensor, array or number holds that is not finite, in words (``"NaN in 3 of 40
    entries"``, ``"infinity in 1 of 40 entries"``; ``"NaN"`` for one number), or None where
    every entry is finite.

    Example:
        >>> import torch
        >>> nonfinite(torch.tensor([1.0, float("nan")])), nonfinite(2.0)
        ('NaN in 1 of 2 entries', None)
    """
    import torch

    t = torch.as_tensor(x).detach()
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        return None
    n = int((~torch.isfinite(t)).sum())
    if n == 0:
        return None
    kind = "NaN" if bool(torch.isnan(t).any()) else "infinity"
    return f"{kind} in {n} of {t.numel()} entries" if t.numel() > 1 else kind


def check_finite_values(x: Any, what: str, cause: str) -> None:
    """Refuse ``x`` (a tensor, array or number) where any entry is NaN or infinite.

    Args:
        x: The quantity an analysis is about to sum, compare or report.
        what: It, in words (``"L1H0's attention scores from the model's own pass"``).
        cause: The likely cause and the fix, in words.

    Raises:
        InterpError: ``"NaN in 3 of 40 entries of {what}; {cause}"``.
    """
    bad = nonfinite(x)
    if bad is not None:
        raise InterpError(f"{bad} {'of' if ' entries' in bad else 'in'} {what}; {cause}")


def check_runs(dtype: Any, device: Any) -> None:
    """Refuse a precision this machine cannot run a model in, before any weight loads.

    float16 matrix products need a GPU on older torch builds; this torch's CPU
    kernels run them (slowly), so float16 is refused only where a probe product fails.

    Raises:
        InterpError: naming the dtype, the device and the precisions that work there.
    """
    import torch

    if dtype is None or not is_reduced(dtype):
        return
    dev = torch.device(device or "cpu")
    try:
        a = torch.ones(2, 2, dtype=dtype, device=dev)
        (a @ a).sum().item()
        torch.nn.functional.softmax(a, -1).sum().item()
    except (RuntimeError, NotImplementedError) as exc:
        raise InterpError(
            f"dtype {str(dtype).removeprefix('torch.')} cannot run on {dev} with torch "
            f"{torch.__version__} ({str(exc).splitlines()[0][:120]}); use dtype='bfloat16' or "
            "'float32' there, or a GPU"
        ) from None

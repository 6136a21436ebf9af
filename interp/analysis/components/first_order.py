"""First-order estimates of heads' effects: their terms, and how far they rank as exact values do.

:func:`interp.analysis.components.attribution.attribute_heads` runs the passes; this module
holds what it computes from them, chunk by chunk: the linear term ``sum (z' - z) * dM/dz`` of
each head (:func:`first_order`) and AtP*'s QK fix of the heads an edit reaches through later
layers' queries and keys (:func:`qk_correction`; Kramar et al. 2024). Then, with no model,
:func:`estimate_agreement` compares a table of estimates with the exact values.

Example:
    >>> import torch
    >>> diff = {0: torch.ones(1, 2, 1, 3)}  # [batch, pos, head, d_head]: z' - z
    >>> first_order([(0, 0)], diff, {0: torch.full((1, 2, 1, 3), 0.5)})
    {(0, 0): 3.0}
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.protocol import eval_mode
from interp.core.shapes import Tokens
from interp.engine.edges.gradients import FrozenParams, pattern_at
from interp.outputs.frames import described
from interp.runtime import Runtime, head_weight


def first_order(
    chosen: list[tuple[int, int]], diff: dict[int, torch.Tensor], g_z: dict[int, torch.Tensor]
) -> dict[tuple[int, int], float]:
    """The linear term of each head's effect, ``sum (z' - z) * dM/dz`` over its positions
    and ``d_head`` (summed in float64).

    Args:
        chosen: The heads, ``(layer, head)`` pairs.
        diff: ``z' - z`` of each layer, ``[batch, pos, head, d_head]``.
        g_z: ``dM/dz`` of each layer, the same shape.

    Returns:
        ``{(layer, head): term}``.
    """
    return {  # summed in float64: chunks of a batch add the same products in other orders
        (l, h): float((diff[l][:, :, h].double() * g_z[l][:, :, h].double()).sum())
        for l, h in chosen
    }


def qk_correction(
    rt: Runtime,
    tokens: Tokens,
    chosen: list[tuple[int, int]],
    diff: dict[int, torch.Tensor],
    g_pattern: dict[int, torch.Tensor],
    per_pass: int,
) -> dict[tuple[int, int], float]:
    """AtP*'s QK fix: for each head and each later layer ``j``, the first-hop change of
    ``j``'s pattern computed exactly instead of linearly (module docstring).

    ``correction = sum_j <A_j(x_j + D) - A_j(x_j), dM/dA_j> - <D, d<A_j(x), dM/dA_j>/dx>``
    with ``D = (z' - z) W_O`` the head's change of the residual stream, ``x_j`` the clean
    residual entering block ``j``. Both terms use the same function ``A_j(x)``, so
    the fix replaces exactly the linear term it corrects.

    Args:
        rt: The model's runtime (one that can resume a pass at a block).
        tokens: ``[batch, pos]`` ids of the run the gradients were taken on.
        chosen: The heads, ``(layer, head)`` pairs.
        diff: ``z' - z`` of each layer, ``[batch, pos, head, d_head]``.
        g_pattern: ``dM/dA_j`` of each later layer ``j``'s pattern.
        per_pass: How many heads' edited residuals share one pass of layer ``j``.

    Returns:
        ``{(layer, head): correction}``, to add to :func:`first_order`'s term.
    """
    W_O = head_weight(rt.model, "W_O")  # [layer, head, d_head, d_model]
    later = sorted(g_pattern)
    with torch.no_grad():
        inputs = rt.block_inputs(tokens, later, rows=(-1,))[1]  # its logits are not read
    out = {k: 0.0 for k in chosen}
    b = tokens.shape[0]
    with eval_mode(rt.model), FrozenParams(rt.model):
        for j in later:
            x = inputs[j]
            g = g_pattern[j]
            with torch.enable_grad():
                x_req = x.detach().clone().requires_grad_(True)
                clean = pattern_at(rt, tokens, j, x_req)
                (r,) = torch.autograd.grad((clean * g).sum(), x_req)
            clean = clean.detach()
            upstream = [(l, h) for l, h in chosen if l < j]
            with torch.no_grad():
                for start in range(0, len(upstream), per_pass):
                    part = upstream[start : start + per_pass]
                    deltas = torch.stack(  # in float32, rounded once to the model's dtype
                        [diff[l][:, :, h].float() @ W_O[l, h].float() for l, h in part]
                    ).to(x.dtype)  # [k, batch, pos, d_model]
                    k = len(part)
                    A = pattern_at(rt, tokens.repeat(k, 1), j, (x[None] + deltas).flatten(0, 1))
                    dA = A.view(k, b, *A.shape[1:]).float() - clean[None].float()
                    exact = (dA * g[None].float()).flatten(1).sum(1)
                    linear = (deltas.float() * r[None].float()).flatten(1).sum(1)
                    for key, e, lin in zip(part, exact.tolist(), linear.tolist()):
                        out[key] += e - lin
    return out


def estimate_agreement(
    exact: pd.Series, estimated: pd.Series, *, top: int = 10, within: Sequence[int] = (10, 30)
) -> pd.DataFrame:
    """How far an estimate ranks heads as the exact values do: one row per measure.

    The Spearman rank correlation over all heads, then, for each ``k`` in ``within``, how
    many of the exact top ``top`` heads (by ``|value|``) are among the estimate's top ``k``.
    No model runs.

    Args:
        exact: One exact value per head, indexed by label, e.g.
            ``patch_heads(...).set_index("label")["effect"]``.
        estimated: One estimate per head, indexed by the same labels, e.g.
            ``attribute_heads(...).set_index("label")["estimate"]``.
        top: How many of the exact values' largest heads to look for (default 10).
        within: The estimate's top-``k`` sizes to look in (default ``(10, 30)``).

    Returns:
        A table with columns ``measure, value``: the Spearman row, then one row per ``k``.
        ``attrs`` follow :data:`interp.outputs.frames.SCHEMA` (``model`` is ``None``).

    Example:
        >>> import pandas as pd
        >>> exact = pd.Series([3.0, -2.0, 0.5, 0.1], index=["L0H0", "L0H1", "L1H0", "L1H1"])
        >>> est = pd.Series([2.0, -0.1, 0.4, 0.0], index=exact.index)
        >>> estimate_agreement(exact, est, top=2, within=(2, 3))["value"].tolist()
        [1.0, 1.0, 2.0]

    Raises:
        InterpError: for series that do not hold the same heads, or a ``top``
            or ``k`` below 1.
    """
    top = check_int(top, "top", minimum=1)
    ks = [check_int(k, "each k of within", minimum=1) for k in within]
    if set(exact.index) != set(estimated.index) or exact.index.has_duplicates:
        raise InterpError(
            "exact and estimated must hold one value for each of the same heads (index by label)"
        )
    est = estimated.reindex(exact.index)
    rows = [
        {
            "measure": "Spearman (estimate vs exact, all heads)",
            "value": float(exact.rank().corr(est.rank())),
        }
    ]
    best = set(exact.abs().nlargest(top).index)
    for k in ks:
        hits = len(best & set(est.abs().nlargest(k).index))
        rows.append({"measure": f"exact top {top} in estimate's top {k}", "value": float(hits)})
    return described(
        pd.DataFrame(rows),
        "estimate_agreement",
        description="how far an estimate ranks heads as the exact values do",
        method="exact",
        unit="",
        model=None,
        forward_equivalents=0.0,
    )

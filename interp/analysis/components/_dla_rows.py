"""Direct logit attribution's rows: the chunks' shares joined, checked against the model's
own logits (a ``remainder`` row where the pieces do not add up), and gathered into the table
(:func:`interp.analysis.components.dla.direct_logit_attribution`).

Example:
    >>> import torch
    >>> rows = [("head", 0, 0, "L0H0", torch.tensor([1.0, 3.0]))]
    >>> table(rows, "head", 1)[["label", "value"]].values.tolist()
    [['L0H0', 2.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.precision import (
    FROM_MODEL,
    check_finite_values,
    is_reduced,
    tolerance,
    within,
    worst,
)

# of the largest share: below this the pieces add up and no row is shown (float32; in float16 /
# bfloat16 the precision's rule of the larger of that and the logits read, interp.core.precision)
REMAINDER_TOL = 1e-5


def remainder_rows(parts: list[tuple], norm: Any) -> tuple[list, dict[str, Any]]:
    """Every chunk's rows joined along the batch, the total, and a ``remainder`` row (with
    its reason) where the pieces do not add up to the model's own logits."""
    rows = [
        (*first[:4], torch.cat([p[0][i][-1] for p in parts])) for i, first in enumerate(parts[0][0])
    ]
    total = torch.cat([p[1] for p in parts])
    check_finite_values(
        total,
        "the model's own logit (difference) at the positions read",
        f"{FROM_MODEL}; no attribution of a non-finite logit is returned",
    )
    for r in rows:
        check_finite_values(
            r[-1],
            f"the direct share of {r[3]}",
            "its output or the final norm's frozen scale is not finite where the logits are "
            "(the model's pass overflows); run the model in float32, or check its weights",
        )
    missing = worst(p[2] for p in parts)
    largest = worst(p[3] for p in parts)
    summed = torch.stack([r[-1] for r in rows]).sum(0)  # [batch, P]
    remainder = (total - summed).mean().item()
    attrs: dict[str, Any] = {
        "total": float(total.mean()),
        "final_norm": (
            "none"
            if norm is None
            else f"{norm.kind}: scale frozen from this run (per position), weight applied to "
            "the unembedding direction, its bias in the 'bias' row; nothing folded"
        ),
        "remainder": remainder,
    }
    scale_of = max(1.0, worst(abs(float(r[-1].mean())) for r in rows))
    dtype = parts[0][5]
    if is_reduced(dtype):  # the model rounds its logits at their own size
        scale_of = max(scale_of, worst(p[4] for p in parts))
    attrs["remainder_tol"] = tolerance(dtype, scale_of, float32=REMAINDER_TOL)
    if not within(abs(remainder), attrs["remainder_tol"]):  # NaN: a remainder row, never none
        why = []
        if not within(missing, 1e-4 * max(1.0, largest)):
            why.append(
                f"the components' outputs miss {missing:.3g} of the final residual stream "
                "(an architecture term this decomposition does not read)"
            )
        else:
            why.append("the model transforms its logits after the unembedding (not linear)")
        attrs["remainder_reason"] = "; ".join(why)
        rows.append(("remainder", None, None, "remainder", (total - summed)))
    return rows, attrs


def table(rows, by: str, n_layers: int) -> pd.DataFrame:
    """Rows of ``(component, layer, head, label, share [batch, P])`` gathered ``by``."""
    means = [(c, l, h, lab, float(v.mean())) for c, l, h, lab, v in rows]
    if by != "head":
        grouped: list[tuple[str, int | None, int | None, str, float]] = []
        for l in range(n_layers):
            attn = sum(v for c, ll, _, _, v in means if ll == l and c in ("head", "attn_bias"))
            mlp = [v for c, ll, _, _, v in means if ll == l and c == "mlp"]
            if by == "component":
                grouped.append(("attn", l, None, f"L{l}.attn", attn))
                if mlp:
                    grouped.append(("mlp", l, None, f"L{l}.mlp", mlp[0]))
            else:
                grouped.append(("layer", l, None, f"L{l}", attn + sum(mlp)))
        head = [r for r in means if r[0] in ("embed", "pos_embed")]
        tail = [r for r in means if r[0] in ("bias", "remainder")]
        means = head + grouped + tail
    df = pd.DataFrame(means, columns=["component", "layer", "head", "label", "value"])
    df["layer"] = df["layer"].astype("Int64")
    df["head"] = df["head"].astype("Int64")
    return df


def head_grid(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``[layer, head]`` head shares and ``[layer]`` MLP shares of a ``by="head"`` table
    (NaN where a model has no MLP), for the layer x head heatmap."""
    heads = df[df["component"] == "head"]
    n_layers = int(heads["layer"].max()) + 1
    n_heads = int(heads["head"].max()) + 1
    grid = np.full((n_layers, n_heads), np.nan)
    grid[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)] = heads["value"].to_numpy()
    mlp = np.full(n_layers, np.nan)
    m = df[df["component"] == "mlp"]
    mlp[m["layer"].to_numpy(int)] = m["value"].to_numpy()
    return grid, mlp

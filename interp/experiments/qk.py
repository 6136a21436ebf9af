"""Why a head attends, as the labs report it: QK attribution tables summarised, and checked.

:func:`interp.analysis.qk_attribution` gives every (query piece, key piece)
pair's exact share of a head's scores; the labs read three things off it:
the pairs that carry the score (:func:`top_pairs`), each side's writers summed
over the other side (:func:`side_shares`), and those writers set beside
:func:`interp.analysis.qk_interventions`, which removes each from the head's
query or key input with the norms recomputed, with a verdict on whether the
two agree (:func:`checked`).

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"query_component": ["embed", "embed", "L0H2"],
    ...                    "key_component": ["L0H1", "embed", "L0H1"], "value": [3.0, 0.5, 0.5]})
    >>> top_pairs(df)[["query_component", "key_component", "share"]].values.tolist()
    [['embed', 'L0H1', 0.75], ['embed', 'embed', 0.125], ['L0H2', 'L0H1', 0.125]]
    >>> verdict(-1.0, -0.9), verdict(-1.0, -0.2), verdict(-1.0, 0.3)
    ('agrees', 'same sign, smaller', 'opposite sign')
"""

from __future__ import annotations

import math

import pandas as pd

from interp.core.errors import InterpError

PAIR = ["query_component", "key_component"]
AGREE = 0.25  # the measured change is within this fraction of the attribution: they agree


def _per_cell(df: pd.DataFrame) -> list[str]:
    """The columns that name one cell of an attribution table (its sequence and positions)."""
    return [c for c in ("sequence", "query_position", "key_position") if c in df.columns]


def top_pairs(df: pd.DataFrame, k: int = 8) -> pd.DataFrame:
    """The ``k`` (query piece, key piece) pairs with the largest mean share of the scores
    (by size): ``value`` (mean over cells), ``share`` (of the mean total score) and, for a
    table with a row per sequence, ``top_in`` (the fraction of sequences where the pair is
    the largest)."""
    cells = _per_cell(df)
    n = df.groupby(cells).ngroups if cells else 1
    total = float(df["value"].sum()) / n
    pairs = df.groupby(PAIR, sort=False)["value"].sum().div(n).rename("value").reset_index()
    pairs["share"] = pairs["value"] / total if total else float("nan")
    if "sequence" in cells:
        best = df.loc[df.groupby(cells)["value"].idxmax(), PAIR]
        top = best.value_counts().div(n).rename("top_in")
        pairs = pairs.merge(top.reset_index(), on=PAIR, how="left").fillna({"top_in": 0.0})
    order = pairs["value"].abs().sort_values(ascending=False).index
    return pairs.loc[order].head(k).reset_index(drop=True)


def side_shares(df: pd.DataFrame, k: int = 5) -> pd.DataFrame:
    """Each side's ``k`` largest writers (by size): a component's share of the scores summed
    over the other side's pieces, mean over cells. Columns ``side, component, value, share``."""
    cells = _per_cell(df)
    n = df.groupby(cells).ngroups if cells else 1
    total = float(df["value"].sum()) / n
    out = []
    for side, col in (("query", "query_component"), ("key", "key_component")):
        per = df.groupby(col, sort=False)["value"].sum().div(n)
        per = per.drop([x for x in ("bias", "remainder") if x in per.index])
        per = per.loc[per.abs().sort_values(ascending=False).index[:k]]
        out.append(
            pd.DataFrame(
                {
                    "side": side,
                    "component": per.index,
                    "value": per.to_numpy(),
                    "share": per.to_numpy() / total if total else float("nan"),
                }
            )
        )
    return pd.concat(out, ignore_index=True)


def verdict(attribution: float, measured: float) -> str:
    """Whether an intervention bears out an attribution: ``agrees`` (same sign, within
    :data:`AGREE` of it), ``same sign, smaller`` / ``same sign, larger``, or ``opposite sign``.

    Raises:
        InterpError: for a NaN or infinite value (every comparison below is False for NaN,
            which would read as ``same sign, larger``).
    """
    if not (math.isfinite(attribution) and math.isfinite(measured)):
        raise InterpError(
            f"attribution {attribution} and measured change {measured} are not both finite, so "
            "no verdict; the model or an edit made the scores NaN or infinite"
        )
    if attribution * measured <= 0:
        return "opposite sign"
    if abs(measured - attribution) <= AGREE * abs(attribution):
        return "agrees"
    return "same sign, smaller" if abs(measured) < abs(attribution) else "same sign, larger"


def checked(interventions: pd.DataFrame) -> pd.DataFrame:
    """``qk_interventions``' table with a ``verdict`` column (:func:`verdict`)."""
    out = interventions.copy()
    out["verdict"] = [
        verdict(a, m) for a, m in zip(out["attribution"], out["measured"], strict=True)
    ]
    out.attrs.update(interventions.attrs)
    return out

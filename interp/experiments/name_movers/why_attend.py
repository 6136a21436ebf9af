"""Why the top name-mover heads attend to S2 rather than IO: exact QK attribution, checked.

For each top patching head whose final-position attention goes mostly to the
subject's second occurrence (S2), :func:`interp.analysis.qk_attribution` with
``contrast=(S2, IO)`` (each prompt's own positions) splits the difference of
its scores ``s[END, S2] - s[END, IO]`` exactly into (query piece, key piece)
pairs, every earlier head and MLP a piece (``by="head"``): the query side is
what the final position asks, the key side what S2's key carries that IO's
lacks. :func:`interp.analysis.qk_interventions` then removes each side's top
writers from the head's query or key input alone (a path patch with a zero
source, the norms recomputed) and measures the difference's real change.

Example (the heads the lab explains, from its own tables):
    >>> import pandas as pd
    >>> patching = pd.DataFrame({"label": ["L1H0", "L2H3", "L0H2"], "normalized": [0.5, 0.3, 0.2]})
    >>> looks = pd.DataFrame({"label": ["L1H0", "L2H3", "L0H2"], "to_io": [0.1, 0.6, 0.0],
    ...                       "to_s1": [0.1, 0.1, 0.0], "to_s2": [0.7, 0.2, 0.9]})
    >>> s2_heads(patching, looks, k=2)
    ['L1H0', 'L0H2']
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from interp.analysis.heads.qk.attribution import qk_attribution
from interp.analysis.heads.qk.inputs import needed_hooks
from interp.analysis.heads.qk.interventions import qk_interventions
from interp.core.head_checks import parse_heads
from interp.core.protocol import HookedModel
from interp.datasets import NameMoverPrompts
from interp.engine.cache import cache_of
from interp.experiments.qk import checked, side_shares, top_pairs


@dataclasses.dataclass(frozen=True)
class WhyAttend:
    """The S2-vs-IO preference of each explained head, split and checked (one table each,
    a ``label`` column naming the head)."""

    heads: list[str]
    contrast: pd.DataFrame  # per head: the mean score difference and where it looks
    pairs: pd.DataFrame  # per head: the pairs with the largest share of the difference
    sides: pd.DataFrame  # per head: each side's largest writers
    interventions: pd.DataFrame  # per head: those writers removed, beside their attribution


def s2_heads(patching: pd.DataFrame, name_attention: pd.DataFrame, k: int = 2) -> list[str]:
    """The first ``k`` heads by patching (``normalized``) among those in ``name_attention``
    whose final-position attention goes mostly to S2 (more than to IO or S1)."""
    looks = name_attention.set_index("label")
    s2 = looks[(looks["to_s2"] > looks["to_io"]) & (looks["to_s2"] > looks["to_s1"])].index
    order = patching.sort_values("normalized", ascending=False)["label"]
    return [h for h in order if h in set(s2)][:k]


def why_attend(
    model: HookedModel, prompts: NameMoverPrompts, heads: list[str], *, top: int = 3
) -> WhyAttend:
    """Split each head's ``s[END, S2] - s[END, IO]`` and check each side's ``top`` writers
    (module docstring). One forward pass, stopped after the last head's layer, feeds every
    attribution; each intervention is one more pass, stopped the same way."""
    if not heads:  # no top head looks at S2: nothing to explain
        return WhyAttend([], *(pd.DataFrame() for _ in range(4)))
    chosen = parse_heads(model, heads)
    names = sorted({n for layer, _ in chosen for n in needed_hooks(model, layer)})
    acts = cache_of(model, prompts.clean, names)
    contrast = (prompts.s2_pos.tolist(), prompts.io_pos.tolist())
    rows, pairs, sides, checks = [], [], [], []
    for layer, head in chosen:
        cells = dict(layer=layer, head=head, contrast=contrast, by="head", cache=acts)
        df = qk_attribution(model, prompts.clean, **cells)
        label = f"L{layer}H{head}"
        p, s = top_pairs(df), side_shares(df)
        rows.append(
            {
                "label": label,
                "difference": float(df.attrs["total"]),
                "top_pair_share": float(p["share"].abs().iloc[0]),
                "key_top_share": float(s[s["side"] == "key"]["share"].abs().sum()),
                "query_top_share": float(s[s["side"] == "query"]["share"].abs().sum()),
                "score_gap": float(df.attrs["score_gap"]),
            }
        )
        pairs.append(p.assign(label=label))
        sides.append(s.assign(label=label))
        checks.append(checked(qk_interventions(model, prompts.clean, **cells, top=top)))
    out = [pd.DataFrame(rows)] + [
        _label_first(pd.concat(t, ignore_index=True)) for t in (pairs, sides, checks)
    ]
    out[3].attrs.update(checks[-1].attrs)
    return WhyAttend([f"L{l}H{h}" for l, h in chosen], *out)


def _label_first(df: pd.DataFrame) -> pd.DataFrame:
    return df[["label", *[c for c in df.columns if c not in ("label", "layer", "head")]]]

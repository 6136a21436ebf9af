"""Why the induction head attends to its target: exact QK attribution on every held-out prompt.

In each held-out sequence the induction head's query is taken at the last
position of the second copy whose next token is predictable, and its key at
that query's induction target (the token after the query token's first
occurrence, ``q - L + 1``). :func:`interp.analysis.qk_attribution` splits
each prompt's score there into (query piece, key piece) pairs, every earlier
head a piece (``by="head"``); K-composition predicts that the pair (the
token's own embedding on the query side, the previous-token head on the key
side) carries it. :func:`interp.analysis.qk_interventions` removes the top
pieces of each side from the head's query or key input, norms recomputed,
and measures what the attribution predicts.

Example:
    >>> from interp.datasets import repeated_tokens
    >>> data = repeated_tokens(2, d_vocab=64, seq_len=24, segment_lengths=(5,), seed=0)
    >>> q, k = induction_targets(data)
    >>> [(a[0] - b[0]) for a, b in zip(q, k)]  # the target is L - 1 behind the query
    [4, 4]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from interp.analysis.heads.qk.attribution import qk_attribution
from interp.analysis.heads.qk.inputs import head_inputs
from interp.analysis.heads.qk.interventions import qk_interventions
from interp.core.protocol import HookedModel
from interp.datasets import RepeatedTokens
from interp.experiments.qk import checked, side_shares, top_pairs


@dataclasses.dataclass(frozen=True)
class WhyAttend:
    """The induction head's scores on its targets, split and checked."""

    per_prompt: pd.DataFrame  # one row per prompt: its cell, score and top pair
    pairs: pd.DataFrame  # the pairs that carry the score (labs.qk.top_pairs)
    sides: pd.DataFrame  # each side's writers (labs.qk.side_shares)
    interventions: pd.DataFrame  # the top writers removed, beside their attribution


def induction_targets(data: RepeatedTokens) -> tuple[list[list[int]], list[list[int]]]:
    """Per sequence, the query (the last position of the second copy whose next token is
    predictable) and its induction target ``q - L + 1``, one list each per sequence."""
    L = data.segment_len.tolist()
    q = [int(s) + n - 2 for s, n in zip(data.second_start.tolist(), L, strict=True)]
    return [[p] for p in q], [[p - n + 1] for p, n in zip(q, L, strict=True)]


def why_attend(
    model: HookedModel, data: RepeatedTokens, head: tuple[int, int], *, top: int = 1
) -> WhyAttend:
    """Attribute ``head``'s score on each prompt's induction target and check the ``top``
    writers of each side by intervention (module docstring)."""
    q, k = induction_targets(data)
    layer, h = head
    acts, _ = head_inputs(model, data.tokens, None, layer)  # one stopped pass for both
    cells = dict(layer=layer, head=h, query_positions=q, key_positions=k, by="head", cache=acts)
    df = qk_attribution(model, data.tokens, **cells)
    cell = ["sequence", "query_position", "key_position"]
    score = df.groupby(cell)["value"].sum().rename("score")
    best = df.loc[df.groupby(cell)["value"].idxmax()].set_index(cell)
    per = pd.concat(
        [
            score,
            best["query_component"].rename("top_query_component"),
            best["key_component"].rename("top_key_component"),
            best["value"].rename("top_value"),
        ],
        axis=1,
    ).reset_index()
    per["top_share"] = per["top_value"] / per["score"]
    per.insert(3, "segment_len", data.segment_len.tolist())
    per.attrs.update(df.attrs)
    pairs, sides = top_pairs(df), side_shares(df)
    for t in (pairs, sides):
        t.attrs.update(df.attrs)
    checks = checked(qk_interventions(model, data.tokens, **cells, top=top))
    return WhyAttend(per_prompt=per, pairs=pairs, sides=sides, interventions=checks)


def summary_rows(w: WhyAttend, induction: str, prev: str) -> list[tuple[str, Any, str]]:
    """The lab summary's rows for the QK attribution: which pair carries the induction head's
    score on its targets, how often, and what removing the key-side writer measures."""
    top = w.pairs.iloc[0]
    n = len(w.per_prompt)
    rows: list[tuple[str, Any, str]] = [
        (
            f"{induction}'s score on its induction target (mean over {n} prompts)",
            float(w.per_prompt["score"].mean()),
            "QK attribution rows sum to it",
        ),
        (
            f"top (query, key) pair of {induction}'s score",
            f"{top['query_component']} x {top['key_component']}",
            f"embed x {prev} (K-composition)",
        ),
        ("its share of the score", float(top["share"]), "most of it"),
        ("prompts where it is the top pair", float(top["top_in"]), "1.0 = every prompt"),
    ]
    key = w.interventions[w.interventions["side"] == "key"].iloc[0]
    rows.append(
        (
            f"remove {key['component']} from {induction}'s key input: score change",
            float(key["measured"]),
            f"attribution {key['attribution']:+.3f} ({key['verdict']})",
        )
    )
    return rows

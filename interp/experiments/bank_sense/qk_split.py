"""The toy heads' scores split into query-side and key-side pieces, by input coordinate.

A score is ``q . k / sqrt(d_k)`` with ``q = x_query W_Q`` and ``k = x_key W_K``.
Writing each input as a sum over its coordinates (``x = sum_c x[c] e_c``, the
toy's hand-named axes: finance, water, structure, generic) splits the score
exactly into one piece per (query coordinate, key coordinate) pair:

    s = sum_c sum_c' (x_query[c] e_c W_Q) . (x_key[c'] e_c' W_K) / sqrt(d_k)

The pieces are carried through the head by the toolkit's own QK attribution
machinery (:func:`interp.analysis.heads.qk.inputs.side_pieces`, the path
:func:`interp.analysis.qk_attribution` uses), their sum is checked against the
toy model's ``hook_attn_scores``, and :func:`interp.analysis.qk_attribution`'s
own split (by component: here the embedding alone) is checked to give the same
scores. With identity projections only matching coordinates meet (bank's
finance with a key's finance, ...); the Eiffel swap query makes tower's
*structure* coordinate meet Eiffel's *identity* coordinate.

Example:
    >>> df = score_split(th.bank_model(), "the river bank", th.AXES)
    >>> df.groupby("source", sort=False)["unscaled"].sum().round(2).tolist()
    [0.2, 0.54, 1.18]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from interp.analysis.heads.qk.attribution import qk_attribution
from interp.analysis.heads.qk.inputs import needed_hooks, side_pieces
from interp.core.errors import InterpError
from interp.core.precision import within, worst
from interp.core.protocol import HookedModel
from interp.engine.cache import cache_of
from interp.experiments.bank_sense import toy_heads as th
from interp.runtime import runtime_of

CHECK_ATOL = 1e-6  # the pieces' sum against the model's scores (float32 pieces, float64 toy)


def score_split(
    model: HookedModel, sentence: str, axes: Sequence[str], *, query: int = -1
) -> pd.DataFrame:
    """The toy head's scores of ``query`` (default the last word) against every word of
    ``sentence``, one row per source word and (query coordinate, key coordinate) pair:
    ``value`` in the model's score units (after its ``1/sqrt(d_k)``) and ``unscaled``
    (the plain dot product's share).

    Raises:
        InterpError: if ``axes`` do not name the model's coordinates, or the pieces do
            not add up to the model's own scores (a broken invariant).
    """
    if len(axes) != model.cfg.d_model:
        raise InterpError(f"{len(axes)} axes for a {model.cfg.d_model}-coordinate model")
    tokens = model.to_tokens(sentence)
    words = model.to_str_tokens(tokens)
    n = tokens.shape[1]
    q = query % n
    acts = cache_of(model, tokens, needed_hooks(model, 0))
    resid = acts["blocks.0.hook_resid_pre"].float()  # [1, pos, d_model]
    eye = torch.eye(len(axes))
    terms = [(a, "coordinate", None, resid * eye[c]) for c, a in enumerate(axes)]
    geometry = runtime_of(model).qk_geometry(0)
    side = dict(model=model, acts=acts, terms=terms, layer=0, head=0, geometry=geometry)
    names_q, Q = side_pieces(**side, side="q", rows=[q])  # [coordinate + bias, 1, 1, d_head]
    names_k, K = side_pieces(**side, side="k", rows=list(range(n)))
    share = torch.einsum("id,jkd->kij", Q[:, 0, 0], K[:, 0]).double() * geometry.scale
    scores = acts["blocks.0.attn.hook_attn_scores"][0, 0, q].double()  # [key]
    whole = qk_attribution(model, tokens, layer=0, head=0, query_positions=q, by="component")
    by_component = torch.tensor(whole.groupby("key_position")["value"].sum().to_numpy())
    gap = worst(
        [
            float((share.sum((1, 2)) - scores).abs().max()),
            float((by_component - scores).abs().max()),
        ]
    )
    if not within(gap, CHECK_ATOL):  # NaN fails
        raise InterpError(
            f"internal check failed: the coordinate pieces miss the toy head's scores by "
            f"{gap:.2g}; please report this"
        )
    rows = []
    for k, word in enumerate(words):
        for i, a in enumerate(names_q):
            for j, b in enumerate(names_k):
                if "bias" in (a, b):  # the toy has no biases: these pieces are 0
                    continue
                v = float(share[k, i, j])
                rows.append(
                    {
                        "sentence": sentence,
                        "query_word": words[q],
                        "source": word,
                        "query_coordinate": a,
                        "key_coordinate": b,
                        "value": v,
                        "unscaled": v / geometry.scale,
                    }
                )
    return pd.DataFrame(rows)


def sides(split: pd.DataFrame) -> pd.DataFrame:
    """Each source word's score by side: one row per side and coordinate, the coordinate's
    piece summed over the other side's, beside the whole score (``score``, ``unscaled``)."""
    out = []
    keys = ["sentence", "query_word", "source"]
    for (sentence, word, source), g in split.groupby(keys, sort=False):
        score, unscaled = float(g["value"].sum()), float(g["unscaled"].sum())
        for side, col in (("query", "query_coordinate"), ("key", "key_coordinate")):
            for coordinate, v in g.groupby(col, sort=False)["value"].sum().items():
                out.append(
                    {
                        "sentence": sentence,
                        "query_word": word,
                        "source": source,
                        "side": side,
                        "coordinate": coordinate,
                        "value": float(v),
                        "score": score,
                        "unscaled": unscaled,
                    }
                )
    return pd.DataFrame(out)


def article_splits() -> dict[str, pd.DataFrame]:
    """The article's two worked scores, split: bank's row in both bank sentences (identity
    projections) and tower's row under raw similarity and under the swap query."""
    bank = pd.concat([score_split(th.bank_model(), s, th.AXES) for s in th.SENTENCES])
    eye = np.eye(2)
    eiffel = []
    for variant, Wq in (("raw similarity", eye), ("swap query", th.SWAP)):
        model = th.toy_model(th.EIFFEL_X, Wq, eye, eye, vocab=th.EIFFEL_VOCAB)
        split = score_split(model, " ".join(th.EIFFEL_VOCAB), ("structure", "Paris identity"))
        eiffel.append(split.assign(sentence=f"{split['sentence'].iloc[0]} ({variant})"))
    both = pd.concat([bank, *eiffel], ignore_index=True)
    return {"score_split": both, "score_split_sides": sides(both)}

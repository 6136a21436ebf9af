"""One batch's QK attribution: each (query piece, key piece) pair's share of a head's scores.

:func:`attribute_scores` reads one layer's inputs for a batch (one forward pass stopped
after the layer, or a read of a cache), splits every score of the cells asked for into the
double sum of :mod:`interp.analysis.heads.qk.attribution` (the method, and its entry point
:func:`~interp.analysis.qk_attribution`, which runs this a chunk of sequences at a time),
checks the rows against the model's own ``hook_attn_scores``, and keeps what it read, so
that :func:`~interp.analysis.qk_interventions` and :func:`~interp.analysis.rotary_bands`
run no second forward pass.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> att = attribute_scores(model, torch.tensor([[0, 5, 6, 7, 5, 6]]), layer=1, head=1)
    >>> tuple(att.query.shape), bool(att.table.attrs["score_gap"] < CHECK_RTOL)
    ((1, 1, 32), True)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from interp.analysis.heads.qk.cells import Cells, check_read_padding, plan_cells
from interp.analysis.heads.qk.features import (
    Dictionaries,
    Side,
    component_side,
    describe,
    feature_rows,
    feature_side,
    qk_dictionaries,
)
from interp.analysis.heads.qk.inputs import head_inputs, residual_pieces, side_pieces
from interp.analysis.heads.qk.stream import writer_side
from interp.core.checks import check_tokens
from interp.core.errors import InterpError
from interp.core.head_checks import check_layer_head
from interp.core.hooks import head_label, hook_name
from interp.core.precision import FROM_MODEL, check_finite_values, rtol, within
from interp.core.protocol import HookedModel, check_model, eval_no_grad
from interp.core.shapes import Tokens
from interp.engine.batching import Cost
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry

By = Literal["head", "component", "layer"]
BYS = ("head", "component", "layer")
# rows vs the model's score, over the largest score: refused above this (float32; in float16 /
# bfloat16 the precision's rule, interp.core.precision, and df.attrs["check_rtol"] says which)
CHECK_RTOL = 1e-4
MASKED = -1e20  # a model's score below this is a mask, not a score


@dataclasses.dataclass(frozen=True)
class Attributed:
    """:func:`qk_attribution`'s table and what it read, for the analyses built on it (so
    that they run no second forward pass)."""

    table: pd.DataFrame
    acts: Any  # the activations read (hooks of :func:`needed_hooks`)
    pieces: dict[str, torch.Tensor]  # component -> [batch, pos, d_model]: what it wrote
    query: torch.Tensor  # [batch, query, d_head]: its rotated queries at cells.query_rows
    key: torch.Tensor  # [batch, pos, d_head]: its rotated keys at every position
    cells: Cells  # the scores the rows attribute
    cost: Cost  # the passes run
    sides: tuple[Side, Side] | None = None  # (query, key) with a dictionary: their pieces

    def piece(self, side: str, label: str) -> torch.Tensor:
        """``[batch, pos, d_model]``: what the piece ``label`` of ``side`` (``'q'`` / ``'k'``)
        wrote into the head's input: a component, or a dictionary's feature (``'F12'``: its
        activation times its decoder row, at every position; a token's embedding
        ``'embed:37'``, or a writer dictionary's feature, error or decoder bias)."""
        s = None if self.sides is None else self.sides[side != "q"]
        got = None if s is None else s.piece_of(label)
        return self.pieces[label] if got is None else got


def check_qk_options(
    model: HookedModel,
    *,
    layer: Any,
    head: Any,
    by: Any,
    dictionary: Any = None,
    query_dictionary: Any = None,
    key_dictionary: Any = None,
) -> tuple[int, int, Dictionaries]:
    """The model, head, ``by`` and dictionaries of a QK attribution, checked in one place
    (:func:`qk_attribution` before its plan, :func:`attribute_scores` for its other callers).

    Raises:
        InterpError: for a model that is not hooked, a layer or head out of range, an
            unknown ``by``, or a dictionary that does not fit the head's input.
    """
    check_model(model)
    layer, head = check_layer_head(model, layer, head)
    if by not in BYS:
        raise InterpError(f"unknown by {by!r}; choose one of {', '.join(BYS)}")
    dicts = qk_dictionaries(
        model,
        layer=layer,
        dictionary=dictionary,
        query_dictionary=query_dictionary,
        key_dictionary=key_dictionary,
    )
    return layer, head, dicts


def attribute_scores(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    contrast: Any = None,
    by: str = "component",
    dictionary: Any = None,
    query_dictionary: Any = None,
    key_dictionary: Any = None,
    cache: Any = None,
) -> Attributed:
    """:func:`qk_attribution`'s table with the activations, pieces and vectors it read."""
    layer, head, dicts = check_qk_options(
        model, layer=layer, head=head, by=by, dictionary=dictionary,
        query_dictionary=query_dictionary, key_dictionary=key_dictionary,
    )  # fmt: skip
    tokens = check_tokens(model, tokens)
    bsz, n = tokens.shape
    geometry = runtime_of(model).qk_geometry(layer)
    cells = plan_cells(
        bsz,
        n,
        query_positions=query_positions,
        key_positions=key_positions,
        contrast=contrast,
        geometry=geometry,
    )
    check_read_padding(model, tokens, cells)
    rows = cells.query_rows
    with eval_no_grad(model):
        acts, cost = head_inputs(model, tokens, cache, layer, extra=dicts.hooks)
        terms = residual_pieces(model, acts, layer, by=by)
        side = dict(model=model, acts=acts, terms=terms, layer=layer, head=head, geometry=geometry)
        if dicts.any:
            side.update(tokens=tokens, by=by)
            sq = _side(side, dicts.query, dicts.query_start, dicts.query_writers, "q", rows)
            sk = _side(side, dicts.key, dicts.key_start, dicts.key_writers, "k", list(range(n)))
            q_total, k_total = sq.total, sk.total
        else:
            names_q, Q = side_pieces(**side, side="q", rows=rows)  # [i, batch, query, d_head]
            names_k, K = side_pieces(**side, side="k", rows=list(range(n)))  # [j, batch, pos, ..]
            q_total, k_total = Q.sum(0), K.sum(0)
        # the whole scores of the query rows (every key: the check needs whole rows)
        explained = torch.einsum("bpd,bkd->bpk", q_total, k_total) * geometry.scale
        cause = (
            "a query or key dictionary's encoder or decoder overflows float32 on these "
            "activations or holds NaN; check the dictionaries' weights"
            if dicts.any
            else "a component's output overflows where the model's own scores do not; run the "
            "model in float32"
        )
        gap, scale_of, against = _check(acts, layer, head, rows, explained, geometry, cause)
        check_rtol = rtol(acts[hook_name("pattern", layer)].dtype, float32=CHECK_RTOL)
        if not within(gap, check_rtol):  # NaN fails
            raise InterpError(
                f"the pieces reproduce L{layer}H{head}'s {against} only to {gap:.2g} (above "
                f"{check_rtol:g}); this architecture does something to its queries or keys that "
                "QK attribution does not read, so no rows are returned"
            )
        if dicts.any:
            df = feature_rows(sq, sk, cells, scale=geometry.scale)
            total = float(df["value"].sum())
        else:
            qi = torch.full((n,), -1, dtype=torch.long)
            qi[rows] = torch.arange(len(rows))
            qi = qi[cells.query]  # each cell's row of Q
            Kc = K[:, cells.seq, cells.key]  # [j, cell, d_head]
            if cells.other is not None:
                Kc = Kc - K[:, cells.seq, cells.other]
            share = torch.einsum("icd,jcd->cij", Q[:, cells.seq, qi], Kc) * geometry.scale
            block = share.view(len(cells.groups), cells.per_group, *share.shape[1:]).mean(1)
            df = _rows(block, names_q, names_k, cells)
            total = float(block.sum())
    df.insert(0, "label", head_label(layer, head))
    df.insert(0, "head", head)
    df.insert(0, "layer", layer)
    notes = list(geometry.notes)
    if geometry.softcap:
        notes.append(
            f"scores are soft-capped ({geometry.softcap:g} * tanh(s / {geometry.softcap:g})) after "
            "the sum: the rows attribute the score before the cap"
        )
    df.attrs.update(
        table_attrs(
            "qk_attribution",
            description="each (query-side, key-side) pair's exact share of a head's pre-softmax "
            "score, every norm's scale frozen from this run",
            method="exact",
            metric="attention score" if contrast is None else "score[a] - score[b]",
            unit="score (pre-softmax, after the model's scale)",
            model=model,
            forward_equivalents=cost.forward_equivalents,
            by=by,
            total=total,
            score_gap=gap,
            score_scale=scale_of,
            checked_against=against,
            remainder=any(t[0] == "remainder" for t in terms),
            check_rtol=check_rtol,
            frozen="ln1" + (" and QK-norm" if geometry.q_norm is not None else "") + " scales",
            rotary=None if geometry.rotary is None else geometry.rotary.style,
            notes=notes,
            contrast=cells.contrast,
        )
    )
    if dicts.any:
        df.attrs.update(
            query_dictionary=describe(dicts.query or dicts.query_writers),
            key_dictionary=describe(dicts.key or dicts.key_writers),
            features_scored=max(int(s.ids.shape[-1]) for s in (sq, sk)),
        )
    return Attributed(
        table=df,
        acts=acts,
        pieces={t[0]: t[3] for t in terms},
        query=q_total,
        key=k_total,
        cells=cells,
        cost=cost,
        sides=(sq, sk) if dicts.any else None,
    )


def _side(
    side: dict[str, Any], D: Any, start: int, writers: tuple, which: str, rows: list[int]
) -> Side:
    """One side's pieces: over its writers' dictionaries where it has a list
    (:func:`~interp.analysis.heads.qk.writers.writer_side`), over ``D``'s features where it
    has one residual dictionary, else components."""
    opts = {k: v for k, v in side.items() if k not in ("tokens", "by")}
    if writers:
        return writer_side(**side, writers=writers, side=which, rows=rows)
    if D is None:
        return component_side(*side_pieces(**opts, side=which, rows=rows))
    return feature_side(**opts, D=D, start=start, side=which, rows=rows)


def _rows(block: torch.Tensor, names_q, names_k, cells: Cells) -> pd.DataFrame:
    """One row per group of ``cells`` and pair of pieces, from ``block [group, i, j]``."""
    g, nq, nk = block.shape
    data = {
        name: np.repeat(np.array([grp[c] for grp in cells.groups], dtype=int), nq * nk)
        for c, name in enumerate(cells.columns)
    }
    data["query_component"] = np.tile(np.repeat(np.array(names_q, dtype=object), nk), g)
    data["key_component"] = np.tile(np.array(names_k, dtype=object), g * nq)
    data["value"] = block.reshape(-1).double().numpy()
    return pd.DataFrame(data)


def _check(acts, layer, head, qpos, explained, geometry, cause) -> tuple[float, float, str]:
    """How far the explained scores ``[batch, query, key]`` (every key) are from the model's:
    its ``hook_attn_scores`` over the largest score where that hook holds scores, else (a
    bridge whose hook holds the pattern) its ``hook_pattern`` against the softmax of the
    explained scores over the keys the model lets each query see. Non-finite scores (the
    model's, or the pieces' sum: ``cause`` says why) are refused first."""
    scores = acts[hook_name("attn_scores", layer)][:, head].float()[:, qpos]
    pattern = acts[hook_name("pattern", layer)][:, head].float()[:, qpos]
    where = f"L{layer}H{head}'s attention"
    check_finite_values(
        scores.masked_fill(scores <= MASKED, 0.0),  # -inf is the mask's fill, not a score
        f"{where} scores from the model's own pass (hook_attn_scores, at the query positions read)",
        f"{FROM_MODEL}; no attribution of a non-finite score is returned",
    )
    check_finite_values(pattern, f"{where} pattern from the model's own pass", FROM_MODEL)
    check_finite_values(explained, f"the sum of the query and key pieces of {where} scores", cause)
    mine = _capped(explained, geometry)
    live = scores > MASKED
    holds_scores = not torch.allclose(scores.masked_fill(~live, 0.0), pattern, atol=1e-6)
    visible = geometry.visible(scores.shape[-1], device=scores.device)[qpos]  # [query, key]
    seen = live if holds_scores else pattern > 0
    # the mask rule against the model's own mask: a key the rule shows and the model hides
    # (or, where the hook holds scores, the other way round) is a rule this model breaks
    if bool((seen & ~visible).any()) or (holds_scores and bool((~seen & visible).any())):
        raise InterpError(
            f"layer {layer}'s mask is not the one the runtime's rule gives (causal="
            f"{geometry.causal}, sliding window {geometry.window}); this architecture masks "
            "its keys in a way QK attribution does not read, so no rows are returned"
        )
    if holds_scores:
        scale_of = float(scores[live].abs().max())
        gap = float((mine - scores)[live].abs().max()) / max(scale_of, 1e-12)
        return gap, scale_of, "scores"
    probs = torch.softmax(mine.masked_fill(~visible, float("-inf")), -1)
    return float((probs - pattern).abs().max()), float(mine[:, visible].abs().max()), "pattern"


def _capped(s: torch.Tensor, geometry: QKGeometry) -> torch.Tensor:
    """What the model's ``hook_attn_scores`` holds for explained scores ``s`` (after the
    soft cap, where there is one)."""
    if geometry.softcap:
        return geometry.softcap * torch.tanh(s / geometry.softcap)
    return s

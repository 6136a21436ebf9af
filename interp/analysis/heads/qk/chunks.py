"""QK attribution over any number of sequences: the sequences in chunks under a memory budget.

:func:`interp.analysis.qk_attribution` reads one layer's inputs for every
sequence and splits each score into pieces; its rows are either each
sequence's own (positions given per sequence) or means over the sequences. So
chunks of sequences (:mod:`interp.engine.chunks`) give one batch's rows: the
per-sequence rows of every chunk, renumbered, or the chunks' means weighted by
their sequences. Positions are checked for every sequence before any pass.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> tokens = torch.tensor([[0, 5, 6, 7, 5, 6]] * 4)
    >>> est = attribute_in_chunks(model, tokens, layer=1, head=1, estimate=True)
    >>> est.chunks, est.prompts
    (1, 4)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from interp.analysis.heads.qk.cells import (
    check_read_padding,
    contrast_index,
    per_sequence,
    plan_cells,
)
from interp.analysis.heads.qk.features import Dictionaries, qk_dictionaries
from interp.core.checks import check_tokens
from interp.core.errors import InterpError
from interp.core.head_checks import check_layer_head
from interp.core.memory import forward_bytes, stream_bytes
from interp.core.protocol import HookedModel, check_model, eval_no_grad
from interp.engine.cache import cache_rows, check_cache
from interp.engine.chunks import Estimate, Footprint, WeightedMean, chunk_bar, plan
from interp.runtime import runtime_of


def footprint(
    model: HookedModel, pos: int, layer: int, by: str, dicts: Dictionaries | None = None
) -> Footprint:
    """Per sequence: a forward pass stopped after ``layer`` (no logits), the activations it
    keeps (each earlier layer's heads' outputs and MLP, the layer's input) and the pieces
    built from them, twice (the pieces, then their normed copies; their projections to
    ``d_head`` are smaller): one per earlier head and MLP (``by="head"``), per earlier
    attention and MLP (``"component"``) or per earlier block (``"layer"``), and the
    embeddings, bias and remainder. A dictionary adds its encode (pre-activations and
    activations, ``2 d_sae`` a position) and its active features' writes (``k`` of them a
    position for a TopK dictionary; at most 64 assumed for others)."""
    cfg = model.cfg
    stream = stream_bytes(model, pos, element=4)
    per_layer = {"head": int(cfg.n_heads) + 2, "component": 2, "layer": 1}[by]
    pieces = layer * per_layer + 3
    forward = forward_bytes(model, 1, pos, rows=())
    extra = 0
    for D in () if dicts is None else (dicts.query, dicts.key):
        if D is not None:
            slots = D.k if D.k is not None else min(D.d_sae, 64)
            extra += 4 * pos * 2 * D.d_sae + 2 * slots * stream
    return Footprint(
        fixed=0, per_prompt=int(forward + (2 * pieces + 2 * layer + 2) * stream + extra)
    )


def _rows_of(value: Any, sl: slice) -> Any:
    """Positions for the sequences ``sl``: one list per sequence is sliced, shared ones
    pass through."""
    return list(value)[sl] if per_sequence(value) else value


def attribute_in_chunks(
    model: HookedModel,
    tokens: Any,
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
    memory_budget: Any = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """:func:`interp.analysis.qk_attribution` (its options), a chunk of sequences at a time.

    Raises:
        InterpError: as :func:`interp.analysis.qk_attribution`, and for a memory budget that
            cannot hold one sequence.
    """
    from interp.analysis.heads.qk.attribution import BYS, attribute_scores

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
    tokens = check_tokens(model, tokens, chunked=True)
    bsz, n = tokens.shape
    geometry = runtime_of(model).qk_geometry(layer)
    cells = plan_cells(bsz, n, query_positions=query_positions, key_positions=key_positions,
                       contrast=contrast, geometry=geometry)  # fmt: skip
    check_read_padding(model, tokens, cells)
    pl = plan(
        model, bsz, n, footprint(model, n, layer, by, dicts), memory_budget=memory_budget,
        analysis="qk_attribution", forward_equivalents=(layer + 1) / int(model.cfg.n_layers),
        fix="use shorter prompts", estimate=estimate, progress=progress,
    )  # fmt: skip
    if estimate:
        return pl.estimate
    options = dict(layer=layer, head=head, by=by, query_dictionary=dicts.query,
                   key_dictionary=dicts.key)  # fmt: skip
    if not pl.split:
        df = attribute_scores(model, tokens, query_positions=query_positions,
                              key_positions=key_positions, contrast=contrast, cache=cache,
                              **options).table  # fmt: skip
        df.attrs["chunks"] = 1
        return df
    if contrast is not None:
        a, b = contrast_index(contrast, n, bsz)
    with eval_no_grad(model):
        checked = check_cache(model, tokens, cache)
    parts: list[pd.DataFrame] = []
    for sl in chunk_bar(pl.chunks, progress=progress, desc="qk attribution"):
        part = attribute_scores(
            model, tokens[sl], query_positions=_rows_of(query_positions, sl),
            key_positions=_rows_of(key_positions, sl),
            contrast=None if contrast is None else (a[sl], b[sl]),
            cache=cache_rows(checked, sl), **options,
        ).table  # fmt: skip
        if "sequence" in part.columns:
            part["sequence"] += sl.start
        parts.append(part)
    return _combine(parts, pl)


def _weighted_pairs(parts: list[pd.DataFrame], sizes: list[int]) -> pd.DataFrame:
    """Feature tables of chunks as one batch's: each pair's mean over every sequence (a
    pair absent from a chunk counts 0 there)."""
    keys = [c for c in parts[0].columns if c != "value"]
    weighted = [p.assign(value=p["value"] * w) for p, w in zip(parts, sizes, strict=True)]
    out = pd.concat(weighted, ignore_index=True).groupby(keys, sort=True)["value"].sum()
    return (out / sum(sizes)).reset_index()


def _combine(parts: list[pd.DataFrame], pl: Any) -> pd.DataFrame:
    """The chunks' tables as one batch's: per-sequence rows joined, means weighted by each
    chunk's sequences; the attrs of the first, with the whole run's cost, total and gap."""
    sizes = [s.stop - s.start for s in pl.chunks]
    first = parts[0]
    if "sequence" in first.columns:
        df = pd.concat(parts, ignore_index=True)
        total = sum(float(p.attrs["total"]) for p in parts)
    elif "query_piece" in first.columns:  # feature rows: each chunk has its own pairs
        df = _weighted_pairs(parts, sizes)
        total = sum(float(p.attrs["total"]) * w for p, w in zip(parts, sizes, strict=True))
        total /= sum(sizes)
    else:
        mean, totals = WeightedMean(), WeightedMean()
        for part, w in zip(parts, sizes, strict=True):
            mean.add(part["value"].to_numpy(float), w)
            totals.add(float(part.attrs["total"]), w)
        df = first.copy()
        df["value"] = mean.value
        total = float(totals.value)
    df.attrs = dict(first.attrs)
    df.attrs.update(
        total=total,
        score_gap=max(float(p.attrs["score_gap"]) for p in parts),
        forward_equivalents=round(
            sum(
                float(p.attrs["forward_equivalents"]) * pl.share(s)
                for p, s in zip(parts, pl.chunks, strict=True)
            ),
            3,
        ),  # fmt: skip
        chunks=len(pl.chunks),
    )
    return df

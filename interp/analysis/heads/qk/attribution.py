"""Exact QK attribution: a head's scores split into where its query and key came from.

The residual stream a layer reads is a sum of what every earlier component
wrote: the embeddings, each head's output ``z_h W_O``, each layer's output
bias, each MLP. With every norm's scale *frozen* at its value in this run
(the layer's ``ln1``, and the per-head QK-norms of Qwen3-style models), the
head's query and key are affine in that sum, and the rotary rotation of a
position is linear, so the pre-softmax score is exactly a double sum

    s[p, k] = sum_i sum_j scale * (R_p q_i[p]) . (R_k k_j[k])

over a query-side piece ``i`` and a key-side piece ``j`` (Kamath et al. 2025
attribute attention the same way). Each piece is a component, or ``bias``: the
norm's bias, ``b_Q`` / ``b_K``, carried through the frozen norms and the
rotation. The rows add up to the score the model computed; the check is made
on every call against the model's own ``hook_attn_scores`` and reported in
``df.attrs`` (``score_gap``: the largest gap over the largest score, and a
rows-vs-model refusal above
:data:`~interp.analysis.heads.qk.shares.CHECK_RTOL`). What the pieces miss is an
explicit ``remainder`` row, never a silent gap.

Two things are not linear and are said so in ``df.attrs``: a soft cap
(Gemma-2's ``tanh``) is applied after the sum, so the rows attribute the
score *before* the cap; and the frozen scales are this run's, so removing a
component changes the real score by a different amount (the norms move):
:func:`qk_interventions` measures that change beside the attribution.

Example:
    >>> from interp.models import load_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_model("induction-2l")
    >>> tokens = repeated_random_tokens(2, 8, d_vocab=64, seed=0).tokens
    >>> df = qk_attribution(model, tokens, layer=1, head=1, key_positions=[9])
    >>> top = df.nlargest(1, "value")
    >>> bool(abs(df["value"].sum() - df.attrs["total"]) < 1e-4 * df.attrs["score_scale"])
    True
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
from interp.analysis.heads.qk.features import Dictionaries
from interp.analysis.heads.qk.inputs import inputs_work
from interp.analysis.heads.qk.shares import By, attribute_scores, check_qk_options
from interp.core.checks import check_tokens
from interp.core.precision import worst
from interp.core.protocol import HookedModel, eval_no_grad
from interp.core.shapes import Tokens
from interp.dictionaries import Dictionary
from interp.engine.cache import cache_rows, check_cache
from interp.engine.chunks import Estimate
from interp.engine.footprints import qk_footprint
from interp.engine.runner import Chunk, Run, Task, run
from interp.runtime import runtime_of


def qk_attribution(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    contrast: Any = None,
    by: By = "component",
    dictionary: Dictionary | list[Dictionary] | None = None,
    query_dictionary: Dictionary | list[Dictionary] | None = None,
    key_dictionary: Dictionary | list[Dictionary] | None = None,
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Each (query-side piece, key-side piece) pair's exact share of a head's score.

    With every norm's scale frozen at its value in this run, the pre-softmax score is a
    double sum ``s[p, k] = sum_i sum_j scale * (R_p q_i[p]) . (R_k k_j[k])`` over the
    components that wrote the query's and the key's residual stream (module docstring). The
    rows of one (query, key) sum to the score the model computed, checked on every call
    against its ``hook_attn_scores``. One forward pass, stopped after the head's layer
    (``forward_equivalents``: its share of the model's blocks), or a read of ``cache``. The
    sequences run in chunks under ``memory_budget`` (:mod:`interp.engine.chunks`; rows are
    per sequence or means over sequences, so chunks give one batch's rows).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        layer: A block index: the attending head's layer.
        head: A head index within ``layer``: the attending head.
        query_positions: The attending positions of a head's scores (ints, negative from the
            end, for every sequence; or one list per sequence, ``[[q0], [q1], ...]``, read per
            sequence, and then each sequence's rows are its own, in a ``sequence`` column);
            read, not edited. Default ``-1``, the last.
        key_positions: The attended positions, in the same forms; ``None`` is every key each
            query may see.
        contrast: Two key positions ``(a, b)`` (one for all sequences or one per sequence):
            the score of ``a`` minus the score of ``b`` is attributed (why key ``a`` and not
            ``b``); not beside ``key_positions``.
        by: What a table's row is: ``'component'`` (default: each layer's attention, its
            heads and output bias, and each MLP), ``'head'`` (every earlier head a piece) or
            ``'layer'`` (each block); with a dictionary, the components between its hook and
            the head.
        dictionary: A sparse dictionary (:class:`interp.dictionaries.Dictionary`) on the
            residual stream at or before the head's input, for both sides: each position's
            active features are pieces (``F123``), with its ``error`` and decoder bias
            ``b_dec`` (:mod:`interp.analysis.heads.qk.features`). Or a list of dictionaries,
            each at its own hook: at most one on the residual stream, and writers' outputs
            upstream of the head (``blocks.m.hook_attn_out``, ``blocks.m.attn.hook_z``
            through ``W_O``, ``blocks.m.hook_mlp_out``): the stream is then split into the
            token embedding (one piece per token, ``embed:<token>``), the positional
            embedding, each writer's active features, ``error`` and ``b_dec`` (named
            ``<hook>:F123`` when a side has several dictionaries) and the writers without
            one as components (:mod:`interp.analysis.heads.qk.writers`). A lone writer
            dictionary splits the same way.
        query_dictionary: The query side's dictionary alone (the other side: components,
            or ``key_dictionary``); not beside ``dictionary``.
        key_dictionary: The key side's dictionary alone; not beside ``dictionary``.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per (query position, key position, query-side piece, key-side
        piece): ``layer, head, label`` (the attending head), ``query_position,
        key_position`` (no ``key_position`` with ``contrast``), ``query_component,
        key_component, value``, where ``value`` is the mean over sequences of the share, in
        the model's score units (after its scale, before any soft cap); what the pieces miss
        is an explicit ``remainder`` row. ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``total`` (the sum of the mean scores the
        rows explain), ``score_gap`` (the largest gap to the model's own scores over the
        largest score), ``score_scale``, ``check_rtol``, ``frozen``, ``rotary``, ``notes``
        (a soft cap among them), ``contrast``, ``by`` and ``chunks``. With a dictionary the
        piece columns are ``query_piece, key_piece`` (``F123``, ``error``, ``b_dec``, a
        component between the hooks, ``remainder``, ``bias``; a side without one names its
        components), only the pairs present are rows (a pair absent from a sequence counts
        0 in the mean), and ``attrs`` add ``query_dictionary`` / ``key_dictionary`` (hook,
        architecture, width) and ``features_scored`` (the most features one position
        contributed). With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Example:
        >>> import torch
        >>> from interp.models import load_model
        >>> model = load_model("induction-2l")
        >>> tokens = torch.tensor([[0, 5, 6, 7, 5, 6]] * 4)
        >>> est = qk_attribution(model, tokens, layer=1, head=1, estimate=True)
        >>> est.chunks, est.prompts
        (1, 4)

    Raises:
        InterpError: for a layer or head out of range, an unknown ``by``,
            positions out of range or a key after its query, lists of positions
            that are not one per sequence, a ``contrast`` that is not two positions
            (or beside ``key_positions``), a model whose norms or rotation cannot be
            frozen, rows that do not reproduce the model's scores (above
            :data:`~interp.analysis.heads.qk.shares.CHECK_RTOL`), or a dictionary that does
            not fit (not a ``Dictionary``, another width or model, a hook that is neither
            the residual stream at or before the head's input nor a writer's output upstream
            of it, ``dictionary`` beside a side's own; in a list: a hook twice, two
            dictionaries for one writer, two residual ones, a writer before the residual
            one's hook, an empty list), a writer's pieces that do not add up to what it wrote
            (a hook that is not its output on this model), or scores (the model's, or the
            pieces' sum) that are NaN or infinite.
    """
    layer, head, dicts = check_qk_options(
        model, layer=layer, head=head, by=by, dictionary=dictionary,
        query_dictionary=query_dictionary, key_dictionary=key_dictionary,
    )  # fmt: skip
    tokens = check_tokens(model, tokens, chunked=True)
    bsz, n = tokens.shape
    geometry = runtime_of(model).qk_geometry(layer)
    cells = plan_cells(bsz, n, query_positions=query_positions, key_positions=key_positions,
                       contrast=contrast, geometry=geometry)  # fmt: skip
    check_read_padding(model, tokens, cells)
    options = dict(layer=layer, head=head, by=by, query_dictionary=dicts.given("query"),
                   key_dictionary=dicts.given("key"))  # fmt: skip
    # a chunk's rows: per sequence (joined), feature pairs (each chunk has its own) or
    # one batch's rows (means weighted by the chunk's sequences)
    mode = "rows" if "sequence" in cells.columns else "pairs" if dicts.any else "mean"
    shared: dict[str, Any] = {}

    def prepare(chunks: list[slice]) -> float:
        if len(chunks) > 1:  # one chunk reads the tokens and cache as given
            if contrast is not None:
                shared["contrast"] = contrast_index(contrast, n, bsz)
            with eval_no_grad(model):
                shared["cache"] = check_cache(model, tokens, cache)
        return 0.0  # the chunks' passes count

    def chunk(c: Chunk) -> dict[str, Any]:
        sl = c.rows
        if not c.split:
            part = attribute_scores(model, tokens, query_positions=query_positions,
                                    key_positions=key_positions, contrast=contrast,
                                    cache=cache, **options).table  # fmt: skip
            return _partials(part, mode, sl)
        ab = shared.get("contrast")
        part = attribute_scores(
            model, tokens[sl], query_positions=_rows_of(query_positions, sl),
            key_positions=_rows_of(key_positions, sl),
            contrast=None if ab is None else (ab[0][sl], ab[1][sl]),
            cache=cache_rows(shared["cache"], sl), **options,
        ).table  # fmt: skip
        if "sequence" in part.columns:
            part["sequence"] += sl.start
        return _partials(part, mode, sl)

    task = Task(
        "qk_attribution", qk_footprint(model, n, layer, by, **_sized(dicts)),
        work=inputs_work(model, n, layer), chunk=chunk, combine=COMBINE[mode],
        prepare=prepare, fix="use shorter prompts", desc="qk attribution",
        inputs=(tokens, query_positions, key_positions, contrast, options),
    )  # fmt: skip
    out = run(model, (bsz, n), task, memory_budget=memory_budget, estimate=estimate,
              progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    first = out.values["first"]
    if out.chunks == 1:
        first.attrs["chunks"] = 1
        return first
    return _combined(out, mode, bsz)


def _rows_of(value: Any, sl: slice) -> Any:
    """Positions for the sequences ``sl``: one list per sequence is sliced, shared ones
    pass through."""
    return list(value)[sl] if per_sequence(value) else value


# How each mode's partials combine over the chunks (the runner's rules).
COMBINE = {
    "rows": {"first": "same", "table": "rows", "total": "sum", "gap": "rows"},
    "pairs": {"first": "same", "table": "rows", "total": "mean", "gap": "rows"},
    "mean": {"first": "same", "value": "mean", "total": "mean", "gap": "rows"},
}


def _partials(part: pd.DataFrame, mode: str, sl: slice) -> dict[str, Any]:
    """One chunk's table as the partials of its ``mode`` (:data:`COMBINE`); a feature
    table's values are weighted by the chunk's sequences (a pair absent from a chunk counts
    0 there)."""
    out: dict[str, Any] = {
        "first": part, "total": float(part.attrs["total"]),
        "gap": [float(part.attrs["score_gap"])],
        "cost": float(part.attrs["forward_equivalents"]),
    }  # fmt: skip
    if mode == "rows":
        out["table"] = part
    elif mode == "pairs":
        out["table"] = part.assign(value=part["value"] * (sl.stop - sl.start))
    else:
        out["value"] = part["value"].to_numpy(float)
    return out


def _combined(out: Run, mode: str, bsz: int) -> pd.DataFrame:
    """The chunks' tables as one batch's: per-sequence rows joined, each feature pair's mean
    over every sequence, or the means; the attrs of the first, with the whole run's cost,
    total and gap."""
    first, values = out.values["first"], out.values
    if mode == "rows":
        df = values["table"]
    elif mode == "pairs":
        keys = [c for c in first.columns if c != "value"]
        sums = values["table"].groupby(keys, sort=True)["value"].sum()
        df = (sums / bsz).reset_index()
    else:
        df = first.copy()
        df["value"] = values["value"]
    df.attrs = dict(first.attrs)
    df.attrs.update(
        total=float(values["total"]),
        score_gap=worst(values["gap"]),
        forward_equivalents=round(out.forward_equivalents, 3),
        chunks=out.chunks,
    )
    return df


def _sized(dicts: Dictionaries | None) -> dict[str, Any]:
    """The dictionaries' sizes, as :func:`interp.engine.footprints.qk_footprint` takes them."""
    if dicts is None:
        return {}
    return {
        "dictionaries": [(D.d_sae, D.k) for D in dicts.all],
        "writers": bool(dicts.query_writers or dicts.key_writers),
    }


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    return renamed(__name__, name)  # an old name warns and names the new one

"""An atlas of every head: one row per head, every number measured, a role set against a control.

:func:`head_atlas` runs a probe (by default :func:`interp.analysis.probe_tokens`
with ``n=8``: BOS, 50 random tokens, the same 50 again) twice, once as it is
and once with each sequence's first token swapped, and reads the weights.
Its columns, per head (the atlas section of ``docs/heads.md`` says the same):

``previous_token``, ``induction``, ``duplicate_token``
    the stripe scores of :func:`interp.analysis.head_scores`, ``"interp"``
    convention: attention on the stripe, averaged over the query rows that
    have one, key 0 left out.
``sink``
    mean attention on the first position, over query rows ``1..``.
``sink_swapped``
    the same with every sequence's first token replaced by another of the
    probe's tokens (seeded): where a sink holds whatever token is first, the
    first key's pull is *positional*; where it goes, *content* (the token).
    (Rotary models carry no positional piece in the residual stream, so the
    key side's split is measured by this intervention, as Xiao et al. 2023
    tested attention sinks.)
``entropy``, ``distance``
    mean entropy of a query row's attention (nats) and mean ``|query - key|``
    it attends over (positions), over query rows ``1..``.
``kernel_peak``, ``kernel_range``
    the offset at which the head's positional kernel peaks and its max - min
    (:func:`interp.analysis.positional_kernel`, over the probe's tokens, offsets
    up to the probe's length): on learned-position models the learned
    positional circuit's strongest diagonal.
``rotary_band``, ``band_wavelength``, ``band_share``
    rotary models: the frequency pair with the largest mean absolute share of
    the head's scores over every query and the keys it sees (as
    :func:`interp.analysis.rotary_bands`' ``magnitude``; ``"unrotated"`` for the
    unrotated dimensions of partial rotary), its wavelength in positions and
    its share of the summed magnitudes. None and NaN on other models.
``copying``, ``copying_top1``, ``copy_suppression``, ``successor``
    from the OV circuit (:mod:`interp.analysis.heads.ov_scores`): Elhage
    et al.'s eigenvalue positivity; the share of sampled tokens the head raises
    most (its top output is the token itself) and the share it suppresses most
    (McDougall et al. 2024); Gould et al. 2024's succession score on ordinal
    sequences the tokenizer has (NaN without a tokenizer or with fewer than 3
    pairs, and on models whose logits mean nothing).
``role``, ``roles``
    set against a **control** computed in the same call: the same heads with
    their ``W_Q`` and ``W_K`` entries shuffled (seeded, per layer), reading the
    same residual stream (pattern scores), and with their ``W_V`` entries
    shuffled (OV scores); enough shuffles that the control has at least
    :data:`CONTROL_HEADS` heads. A head *has* a role (previous-token,
    induction, duplicate-token, successor, copy-suppression, copying, sink)
    when its score exceeds the control's **maximum** over all control heads
    *and* reaches the role's **effect-size floor**
    (:mod:`interp.analysis.heads.atlas.roles`, which gives each floor's
    reason): 0.3 of the row's attention on the stripe (previous-token,
    induction, duplicate-token), most of it on key 0 (sink: 0.5), and most
    sampled tokens or ordinal pairs (0.5) for successor, copying
    (``copying_top1``; ``copying`` itself must beat its control and be
    positive) and copy suppression, which must also attend to the copy (pass
    the induction role: McDougall et al.'s mechanism has both halves).
    ``roles`` lists the roles it has by ``(score - control mean) / (control max
    - control mean)`` (copy-suppression before the induction it refines);
    ``role`` is the first, or ``"none"``. A sink is a ``"positional sink"``
    when ``sink_swapped`` keeps at least half of ``sink``, else a ``"content
    sink"``. ``df.attrs["thresholds"]`` holds each score's bar,
    ``df.attrs["effect_sizes"]`` the floor, the control's maximum, which binds
    and why.

Example:
    >>> from interp.models import load_model
    >>> df = head_atlas(load_model("induction-2l"))
    >>> df.set_index("label").loc[["L0H1", "L1H1"], "role"].tolist()
    ['previous-token', 'induction']
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.analysis.heads.atlas import probe as P
from interp.analysis.heads.atlas.roles import assign_roles, effect_sizes
from interp.analysis.heads.ov_scores import (
    MIN_PAIRS,
    OVCircuits,
    ordinal_runs,
    sample_ids,
    self_shares,
    successor_scores,
)
from interp.analysis.heads.positional import layer_kernels
from interp.analysis.heads.scores import probe_tokens
from interp.core.checks import check_seed, check_tokens
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.precision import FROM_MODEL, rtol, within, worst
from interp.core.protocol import (
    HookedModel,
    check_model,
    eval_no_grad,
    is_causal,
    logits_meaningful,
)
from interp.core.shapes import Tokens
from interp.engine.batching import Cost
from interp.engine.cache import cache_rows, check_cache
from interp.engine.chunks import Estimate
from interp.engine.cost import Flops, cache_pass_work
from interp.engine.footprints import atlas_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import head_frame, table_attrs
from interp.runtime.attention import QKGeometry

CONTROL_HEADS = 256
PROBE_SEQUENCES = 8
OV_SCORES = ("copying", "copying_top1", "copy_suppression", "successor")
PATTERN_SCORES = ("previous_token", "induction", "duplicate_token", "sink", "entropy", "distance")
COLUMNS = (  # the table's value columns, in order (module docstring)
    "previous_token", "induction", "duplicate_token", "sink", "sink_swapped", "entropy",
    "distance", "kernel_peak", "kernel_range", "rotary_band", "band_wavelength", "band_share",
    "copying", "copying_top1", "copy_suppression", "successor",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Atlas:
    """What :func:`measure_atlas` found: the table, and what a page shows beside it."""

    table: pd.DataFrame
    kernels: np.ndarray  # [layer, head, offset]: positional kernels over the probe's tokens
    first_patterns: dict[int, torch.Tensor]  # layer -> [head, query, key] of sequence 0
    tokens: torch.Tensor  # the probe
    sample: torch.Tensor  # the token ids the OV scores sample


def head_atlas(
    model: HookedModel,
    tokens: Tokens | None = None,
    *,
    seed: int = 0,
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """One row per head: every score of the module docstring and a ``role`` against a control.

    A head has a role when its score beats a shuffled-weights control computed in the same
    call (the control's maximum over all its heads) and reaches the role's effect-size
    floor. Two passes over the probe (as it is, and with each sequence's first token
    swapped) and reads of the weights; the probe runs in chunks under ``memory_budget``
    (:mod:`interp.engine.chunks`: every score is a mean of sums and counts, so chunks give
    one batch's numbers).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence) with repeats (the
            induction and duplicate stripes need them); ``None`` is
            :func:`interp.analysis.probe_tokens` (``n=8``, ``seed``).
        seed: Every random draw (the default probe, the swapped first tokens, the control's
            shuffles); the same seed gives the same numbers.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; it serves
            the clean pass (the swapped pass always runs).
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per head: ``layer, head, label, role, roles``, then the value
        columns of :data:`COLUMNS` (module docstring). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus the thresholds, the effect sizes (floor,
        control maximum, which binds, why) and the control's statistics. With
        ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for bad tokens or a bad seed, tokens without repeats, a cache of other
            tokens, or a model whose queries and keys the runtime cannot reproduce (the
            recomputed patterns differ from the model's by more than
            :data:`interp.analysis.heads.atlas.probe.PATTERN_RTOL`).
    """
    out = measure_atlas(
        model, tokens, seed=seed, cache=cache, memory_budget=memory_budget, progress=progress,
        estimate=estimate,
    )  # fmt: skip
    return out if isinstance(out, Estimate) else out.table


def measure_atlas(
    model: HookedModel,
    tokens: Tokens | None = None,
    *,
    seed: int = 0,
    cache: Any = None,
    keep_patterns: bool = False,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> Atlas | Estimate:
    """:func:`head_atlas`'s table and what a page shows beside it (kernels, the first
    sequence's patterns when ``keep_patterns``).

    Raises:
        InterpError: as :func:`head_atlas`.
    """
    cfg = check_model(model)
    seed = check_seed(seed)
    if tokens is None:
        tokens = probe_tokens(model, n=PROBE_SEQUENCES, seed=seed)
    tokens = check_tokens(model, tokens, min_len=3, chunked=True)
    causal = is_causal(model)
    for stripe, mask in P.stripe_masks(tokens, causal=causal).items():
        if not mask.any():
            raise InterpError(
                f"no query position has a {stripe} stripe in these tokens; the atlas needs "
                "repeated tokens (tokens=None gives the standard probe)"
            )
    swapped = P.swap_first(tokens, seed)
    L, H = int(cfg.n_layers), int(cfg.n_heads)
    draws = max(1, math.ceil(CONTROL_HEADS / (L * H)))
    n, pos = tokens.shape
    names = functools.partial(P.layer_hooks, model)
    pattern = functools.partial(hook_name, "pattern")
    shared: dict[str, Any] = {}

    def prepare(chunks: list[slice]) -> float:
        shared["reader"] = P.PatternReader(model, draws=draws, seed=seed,
                                           keep_first=keep_patterns, causal=causal)  # fmt: skip
        with eval_no_grad(model):
            shared["cache"] = check_cache(model, tokens, cache)
        return 0.0  # the chunks' passes count

    def chunk(c: Chunk) -> dict[str, Any]:
        # each chunk's sums of patterns, added over the chunks (and ranks) in chunk order:
        # the means are the whole probe's
        part, sinks, reader = Cost(L), P.Sums(), shared["reader"]
        part.add(P.reader_work(model, pos, draws))
        with eval_no_grad(model):
            P.probe_pass(model, tokens[c.rows], reader, names=names, cost=part,
                         cache=cache_rows(shared["cache"], c.rows))  # fmt: skip
            P.probe_pass(model, swapped[c.rows], P.sink_reader(sinks),
                         names=lambda l: [pattern(l)], cost=part)  # fmt: skip
        sums, first, gap = reader.chunk()
        if c.rows.start > 0:  # the first sequence's patterns: the first chunk's
            first = {}
        return {"cost": part.total, "sums": sums, "sinks": sinks, "gap": [gap], "first": [first]}

    # FLOPs (interp.engine.cost): the two probe passes, each stopped at the last pattern,
    # the reader's recomputed queries, keys and scores (the control's too), and the OV
    # columns' products on the weights, counted once for the whole probe
    sample = sample_ids(model, seed)
    tok = getattr(model, "tokenizer", None)
    runs = ordinal_runs(tok) if tok is not None else []
    probe = 2 * cache_pass_work(model, pos, [pattern(L - 1)]) + P.reader_work(model, pos, draws)
    weights_work = _weight_work(model, draws, sample, runs) / (n * Flops.of(model).plain(pos))
    task = Task(
        "head_atlas", atlas_footprint(model, pos, draws), work=probe + weights_work, chunk=chunk,
        prepare=prepare,
        combine={"sums": "sum", "sinks": "sum", "gap": "rows", "first": "rows"},
        fix="use a smaller or shorter probe", desc="head atlas",
        inputs=(tokens, swapped, seed, keep_patterns, causal),
    )  # fmt: skip
    out = run(model, (n, pos), task, memory_budget=memory_budget, estimate=estimate,
              progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    work = out.forward_equivalents + weights_work
    reader, sink_sums = shared["reader"], out.values["sinks"]
    reader.sums, reader.gap = out.values["sums"], worst(out.values["gap"])
    reader.first = next((f for f in out.values["first"] if f), {})
    with eval_no_grad(model):
        dtype = reader.rt.layer(0).W["q"].dtype
        # patterns are probabilities (magnitude 1); in float16 / bfloat16 four eps of the
        # model's precision (bfloat16: 0.031), the one rule of interp.core.precision
        tol = rtol(dtype, float32=P.PATTERN_RTOL, ulps=4)
        if not math.isfinite(reader.gap):
            raise InterpError(
                "the model's attention patterns (or the atlas's recomputation of them) hold NaN "
                f"or infinity on the probe; {FROM_MODEL}; no atlas is made"
            )
        if not within(reader.gap, tol):
            raise InterpError(
                f"the atlas's recomputed attention patterns differ from the model's by "
                f"{reader.gap:.2g} (above {tol:g}); this architecture does something to its "
                "queries or keys the runtime does not read, so no atlas is made"
            )
        values, control = _pattern_values(reader, sink_sums, L, H, draws)
        weights, wcontrol, wnotes = _weight_values(model, L, H, draws, seed, sample, runs)
        kernels, kvals, knotes = _kernel_values(model, tokens, L, reader.geometry)
    values.update(weights)
    values.update(kvals)
    control.update(wcontrol)
    values.update(_band_values(model, reader, L, H))
    stats = {
        k: {"max": float(np.nanmax(v)), "mean": float(np.nanmean(v)), "std": float(np.nanstd(v))}
        for k, v in control.items()
        if np.isfinite(v).any()
    }
    roles = assign_roles(values, stats, L, H)
    sizes = effect_sizes(stats)
    table = head_frame({"role": [r[0] for r in roles], "roles": [r[1] for r in roles]}, L, H)
    for name in COLUMNS:
        v = values[name]
        table[name] = np.asarray(v, dtype=object if name == "rotary_band" else float).reshape(-1)
    table.attrs.update(
        table_attrs(
            "head_atlas",
            description="every head's pattern, positional and OV scores on a probe, and a role "
            "that beats a shuffled-weights control and reaches an effect-size floor",
            method="exact",
            unit="per column (docs/heads.md: the atlas)",
            model=model,
            seed=seed,
            forward_equivalents=round(work, 3),
            probe=list(tokens.shape),
            control=f"{draws} seeded shuffle(s) of each layer's W_Q and W_K entries (pattern "
            "scores) and W_V entries (OV scores): "
            f"{draws * L * H} control heads",
            thresholds={k: e["bar"] for k, e in sizes.items()},
            effect_sizes=sizes,
            control_stats=stats,
            pattern_gap=reader.gap,
            chunks=out.chunks,
            notes=wnotes + knotes,
        )
    )
    return Atlas(
        table=table,
        kernels=kernels,
        first_patterns=reader.first,
        tokens=tokens.cpu(),
        sample=sample,
    )


def _pattern_values(reader: Any, sink_sums: Any, L: int, H: int, draws: int):
    """The pattern columns ``[layer, head]`` and their control values ``[draw, layer, head]``."""
    s = reader.sums
    values = {c: P.stack_means(s, [f"{l}.{c}" for l in range(L)]) for c in PATTERN_SCORES}
    values["sink_swapped"] = P.stack_means(sink_sums, [f"sink{l}" for l in range(L)])
    control = {  # [draw, layer, head]: the control heads of layer l are draws x heads
        c: P.stack_means(s, [f"{l}.control.{c}" for l in range(L)])
        .view(L, draws, H)
        .transpose(0, 1)
        .numpy()
        for c in ("previous_token", "induction", "duplicate_token", "sink")
    }
    return {k: v.numpy() for k, v in values.items()}, control


def _weight_work(model: HookedModel, draws: int, ids: torch.Tensor, runs: list) -> float:
    """The FLOPs of :func:`_weight_values` (:meth:`OVCircuits.flops`)."""
    if not logits_meaningful(model):
        return 0.0
    union = len({t for run in runs for t in run})
    n_ordinals = union if sum(len(r) - 1 for r in runs) >= MIN_PAIRS else 0
    return OVCircuits(model).flops(1 + draws, len(ids), n_ordinals)


def _weight_values(
    model: HookedModel, L: int, H: int, draws: int, seed: int, ids: torch.Tensor, runs: list
):
    """The OV columns and their control values (NaN, with a note, where they mean nothing).
    Each layer's real value weights and its shuffles go through one stacked product."""
    nan = np.full((L, H), np.nan)
    if not logits_meaningful(model):
        note = "copying, copy_suppression and successor read the unembedding, which this "
        note += "model's logits make meaningless: NaN"
        return {c: nan for c in OV_SCORES}, {}, [note]
    ov = OVCircuits(model)
    tok = getattr(model, "tokenizer", None)
    n_pairs = sum(len(r) - 1 for r in runs)
    notes = []
    if n_pairs < MIN_PAIRS:
        why = "the model has no tokenizer" if tok is None else f"only {n_pairs} ordinal pairs"
        notes.append(f"successor: NaN, {why} (it needs {MIN_PAIRS})")
    cols: dict[str, list] = {c: [] for c in OV_SCORES}
    for l in range(L):
        W = ov.rt.layer(l).W["v"]
        V = torch.cat(
            [ov.values(l)]
            + [ov.values(l, P.shuffled(W, P.control_seed(seed, l, r, "V"))) for r in range(draws)]
        )  # [(1 + draws) * head, d_model, d_head]: the real heads, then each shuffle's
        cols["copying"].append(ov.copying(l, V))
        highest, lowest = self_shares(ov, l, V, ids)
        cols["copying_top1"].append(highest)
        cols["copy_suppression"].append(lowest)
        if n_pairs >= MIN_PAIRS:
            cols["successor"].append(successor_scores(ov, l, V, runs))
    values, control = {}, {}
    for c, per_layer in cols.items():
        if not per_layer:
            values[c] = nan
            continue
        x = torch.stack(per_layer).view(L, 1 + draws, H).numpy()  # [layer, copy, head]
        values[c], control[c] = x[:, 0], x[:, 1:].transpose(1, 0, 2)
    return values, control, notes


def _kernel_values(model: HookedModel, tokens: torch.Tensor, L: int, geometry: QKGeometry):
    """Every head's positional kernel over the probe's tokens, its peak offset and range."""
    n = tokens.shape[1]
    try:
        kernels = np.stack(
            [
                layer_kernels(
                    model, l, distribution=tokens.cpu(), max_offset=n - 1, geometry=geometry(l)
                ).numpy()
                for l in range(L)
            ]
        )
    except InterpError as exc:
        H = int(model.cfg.n_heads)
        nan = np.full((L, H), np.nan)
        empty = np.full((L, H, n), np.nan)
        return empty, {"kernel_peak": nan, "kernel_range": nan}, [f"kernel: NaN, {exc}"]
    with np.errstate(all="ignore"):
        peak = np.nanargmax(np.where(np.isnan(kernels), -np.inf, kernels), axis=-1).astype(float)
        span = np.nanmax(kernels, -1) - np.nanmin(kernels, -1)
    return kernels, {"kernel_peak": peak, "kernel_range": span}, []


def _band_values(model: HookedModel, reader: Any, L: int, H: int) -> dict[str, np.ndarray]:
    """The dominant rotary band of every head (None and NaN without rotary embeddings)."""
    band = np.full((L, H), None, dtype=object)
    wavelength = np.full((L, H), np.nan)
    share = np.full((L, H), np.nan)
    s = reader.sums
    for l in range(L):
        key = f"bands{l}"
        if key not in s.total:
            continue
        mag = s.mean(key)  # [head, band]
        rotary = reader.geometry(l).rotary
        best = mag.argmax(-1)
        for h in range(H):
            i = int(best[h])
            f = float(rotary.freqs[i]) if i < rotary.n_pairs else 0.0
            band[l, h] = str(i) if i < rotary.n_pairs else "unrotated"
            wavelength[l, h] = 2 * math.pi / f if f > 0 else math.inf
            share[l, h] = float(mag[h, i] / mag[h].sum())
    return {"rotary_band": band, "band_wavelength": wavelength, "band_share": share}

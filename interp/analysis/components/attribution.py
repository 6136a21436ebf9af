"""Attribution patching: a first-order estimate of every head's effect, from one backward pass.

Ablating or patching each head exactly costs a forward pass per head (about
half of one on the exact engine). Attribution patching (Nanda 2023; Syed,
Rager and Conmy 2023) linearises the metric ``M`` around one run instead:
for an edit that moves head ``h``'s output from ``z`` to ``z'`` at
``blocks.{l}.attn.hook_z``,

    delta_h ~ sum over positions and d_head of (z' - z) * dM/dz,

so one forward pass with a backward pass gives every head at once. ``z'`` is
the ``ablation``'s: 0 (``"zero"``), the mean of ``z`` over the batch or a
reference batch (``"mean"``), another sequence's ``z`` (``"resample"``), or, for
``"patch"``, the head's ``z`` in the source run while the gradient is taken on
the base run (``direction``, :mod:`interp.engine.direction`: noising takes the
gradient on the clean run and ``z'`` from the corrupted one, denoising the
other way round; one more forward pass).

Know its limits. Zero-ablating a head is not a small change, and the
linearisation misses effects that pass through a saturated attention
softmax: a previous-token head whose removal makes an induction head look
elsewhere moves that head's keys, and the softmax's gradient at a confident
pattern is near zero (Kramar et al. 2024, AtP*). Estimates rank heads; they
are not effects. ``verify`` makes the exact numbers one argument away.

``correction="qk"`` applies AtP*'s QK fix to the heads an edit reaches
through their queries and keys: for each edited head and each later layer
``j``, the change of ``j``'s attention pattern caused directly by the edit's
change of the residual stream (the first hop) is computed exactly, by the
model's own layer ``j`` (its normalisation, rotary embeddings and grouped
keys) on the edited residual, and replaces that term's linearisation; every
other path stays first-order. It costs one resumed, early-stopped pass of
layer ``j`` per edited head, batched: far less than the exact sweep, more
than the plain estimate (``df.attrs["forward_equivalents"]`` counts the passes,
``benchmarks/attribution.py`` times them).

The table has one row per head: ``layer, head, label, clean`` (and
``corrupted`` for ``"patch"``), then the first-order ``estimate`` of the
effect (the metric's change from the base run), and ``exact``, the exact
effect where it was computed (``verify=k`` runs the exact engine on the ``k``
heads with the largest ``|estimate|``) and NaN elsewhere. No column mixes the
two. ``"patch"`` adds ``estimate_normalized`` and ``exact_normalized`` (as a
fraction of ``source run - base run``).

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.datasets import repeated_tokens
    >>> model = load_induction_model()
    >>> data = repeated_tokens(32, d_vocab=64, seq_len=48, segment_lengths=(8, 12), seed=1)
    >>> table = attribute_heads(model, data.tokens, loss_mask=data.loss_mask, verify=2)
    >>> table.dropna(subset="exact").nlargest(2, "exact")["label"].tolist()
    ['L1H1', 'L0H1']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from interp.analysis.components.ablation import MetricArg, ablate_heads
from interp.analysis.components.first_order import (
    estimate_agreement,
    first_order,
    qk_correction,
)
from interp.analysis.components.patching import patch_heads
from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.core.head_checks import parse_heads
from interp.core.hooks import hook_name
from interp.core.precision import model_dtype
from interp.core.protocol import HookedModel, check_model, eval_no_grad, positions_label
from interp.core.shapes import Mask, Tokens
from interp.engine.ablations import (
    Replacements,
    check_ablation,
    check_reference,
    source_run,
    values_work,
)
from interp.engine.batching import CPU_TOKENS_PER_PASS, Cost
from interp.engine.cache import cache_rows, cache_work, check_cache
from interp.engine.chunks import Estimate
from interp.engine.direction import Direction, check_span, clean_first
from interp.engine.edges.gradients import head_gradients
from interp.engine.footprints import attribution_footprint
from interp.engine.runner import Chunk, Task, run
from interp.engine.runs import check_runs
from interp.engine.sweeps.sites import head_edits
from interp.engine.sweeps.sweep import sweep_work
from interp.outputs.frames import rows_frame, table_attrs
from interp.runtime import runtime_of

__all__ = ["CORRECTIONS", "attribute_heads", "estimate_agreement"]  # the last: first_order's

Ablation = Literal["zero", "mean", "resample", "patch"]
CORRECTIONS: tuple[str, ...] = ("none", "qk")


def attribute_heads(
    model: HookedModel,
    tokens: Tokens,
    *,
    metric: MetricArg = None,
    ablation: Ablation = "zero",
    corrupted_tokens: Tokens | None = None,
    direction: Direction = "noising",
    heads: Iterable[Any] | None = None,
    loss_mask: Mask | None = None,
    positions: Any = None,
    reference_tokens: Tokens | None = None,
    correction: Literal["none", "qk"] = "none",
    verify: int = 0,
    cache: Any = None,
    seed: int = 0,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """First-order estimate of every head's effect (module docstring), exact on request.

    ``delta_h ~ sum over positions and d_head of (z' - z) * dM/dz`` at each head's
    ``hook_z``, from one forward and one backward pass (Nanda 2023; Syed, Rager and Conmy
    2023). ``ablation="zero"``/``"mean"``/``"resample"`` estimate :func:`ablate_heads` on
    ``tokens``; ``"patch"`` estimates :func:`patch_heads` with ``tokens`` as the clean and
    ``corrupted_tokens`` as the corrupted run, in ``direction``. Estimates rank heads; they
    are not effects (the module docstring says where they fail). The prompts run in chunks
    under ``memory_budget`` (:mod:`interp.engine.chunks`: the estimate of a metric that is a
    mean over prompts is the same as one batch's).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``; differentiable. ``None`` is the next-token
            loss over ``loss_mask`` (required for ``"patch"``).
        ablation: What replaces an activation: ``'zero'`` (default), ``'mean'`` (over the
            batch or ``reference_tokens``), ``'resample'`` (another sequence's, seeded) or
            ``'patch'`` (the other run's, in ``direction``).
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``;
            for ``ablation="patch"`` only.
        direction: Which run a patch edits: ``'noising'`` (the default: the corrupted run's
            activations into the clean run; does the metric *need* this?) or
            ``'denoising'`` (the clean run's into the corrupted run; is this *enough*?);
            ``'denoising'`` for ``ablation="patch"`` only.
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning.
        loss_mask: ``[batch, pos]`` bool: which positions count (the predictions the default
            loss metric averages); not with a metric of your own, nor with ``"patch"``.
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position.
        reference_tokens: The sequences a mean or resample ablation draws from (default: the
            tokens).
        correction: ``'none'`` (default) or ``'qk'``: AtP*'s QK fix, the first hop through
            each later layer's attention pattern computed exactly (module docstring).
        verify: Also compute the exact effects of the ``k`` heads with the largest
            ``|estimate|`` (default 0: none).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. The clean run's: ``"mean"`` and ``"resample"``
            take their values from it, a denoising patch its ``hook_z``.
        seed: Every random draw (the resample ablation's); the same seed gives the same
            numbers.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.
            With ``verify=k`` it is an upper bound: the heads verified are known only after
            the estimates, so it counts the ``k`` costliest.

    Returns:
        A table with one row per head of ``heads`` (in layer, head order): ``layer, head,
        label, clean`` (and ``corrupted`` for ``"patch"``), then ``estimate``, the
        first-order estimate of the effect (the metric's change from the base run), and
        ``exact``, the exact effect where ``verify`` computed it (NaN elsewhere; no column
        mixes the two). ``"patch"`` adds ``estimate_normalized`` and ``exact_normalized`` (as
        a fraction of ``m(source run) - m(base run)``). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (``method="attribution"``), plus
        ``correction``, ``verified`` and ``chunks``. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown ablation, direction or correction,
            ``corrupted_tokens`` missing for ``"patch"`` (or given otherwise),
            ``direction="denoising"`` or ``loss_mask`` where they do not belong, shapes
            that do not fit, a metric that is not differentiable or needs an LM head
            the model lacks, a negative ``verify``, ``correction="qk"`` on a model that
            cannot resume a forward pass at a block, or (after the passes) two runs
            that give the same metric.
    """
    check_model(model)
    ablation = check_ablation(ablation)
    if correction not in CORRECTIONS:
        raise InterpError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    rt = runtime_of(model)
    if correction == "qk" and not rt.can_resume:
        raise InterpError(
            f"correction='qk' recomputes later layers' patterns from their block inputs, and "
            f"{type(model).__name__} cannot resume a forward pass at a block; use "
            "correction='none' on this model"
        )
    patching = ablation == "patch"
    r = check_runs(
        model, tokens, patching=patching, corrupted_tokens=corrupted_tokens, direction=direction,
        metric=metric, loss_mask=loss_mask, positions=positions, ablation=ablation, min_len=2,
        what="ablation='patch'",
    )  # fmt: skip
    tokens, corrupted_tokens, direction, m, pos = (
        r.tokens, r.corrupted, r.direction, r.metric, r.positions
    )  # fmt: skip
    reference_tokens = check_reference(model, tokens, ablation, reference_tokens)
    verify = check_int(verify, "verify", minimum=0)
    seed = check_seed(seed)
    chosen = sorted(parse_heads(model, heads))
    layers = sorted({l for l, _ in chosen})
    names = [hook_name("z", l) for l in layers]
    base, source = r.base, r.source
    pattern_layers = list(range(min(layers) + 1, rt.n_layers)) if correction == "qk" else []
    n, P = tokens.shape
    # a forward and backward pass (logits at the metric's rows), the heads' outputs,
    # replacement values and gradients at hook_z, patterns where corrected
    foot = attribution_footprint(
        model, P, rows=rt.unembedded(m.rows), edited=names,
        patterns=[hook_name("pattern", l) for l in pattern_layers],
    )  # fmt: skip
    shared: dict[str, Any] = {}

    def work(chunks: list[slice]) -> float:
        # the cache is checked once the plan stands (a budget's refusal comes first), and
        # before the estimate, whose work counts its reads
        with eval_no_grad(model):
            checked = shared["cache"] = check_cache(model, tokens, cache)
        # what the run counts: a forward and a backward pass, the source run or the values'
        # pass, the cache's own, and verify's exact sweep
        count = cost.like()  # FLOPs of its passes (interp.engine.cost)
        count.forward()
        count.backward()
        if patching:
            count.forward()  # the source run
            reads = names if direction == "denoising" else []
        else:
            count.add(values_work(rt.n_layers, tokens, ablation, names, split=len(chunks) > 1,
                                  reference_tokens=reference_tokens, cache=checked)
                      * cost.block_share)  # fmt: skip
            reads = names if reference_tokens is None and ablation != "zero" else []
        count.add(cache_work(checked, reads) * cost.block_share)
        if verify:  # at most: the k earliest heads (no edit costs more than an earlier layer's)
            source = cost.like()
            source.forward()
            also = source.total if patching else cost.block_share * max(values_work(
                rt.n_layers, tokens, ablation, names, reference_tokens=reference_tokens,
                cache=None, split=split) for split in (False, True))  # fmt: skip
            count.add(sweep_work(model, head_edits(chosen[:verify]), pos=P, rows=m.rows) + also)
        return count.total

    cost = Cost.of(model, P, m.rows)  # the values' pass (the chunks': the runner's count)

    def prepare(chunks: list[slice]) -> float:
        if not patching:
            with eval_no_grad(model):
                shared["values"] = Replacements(
                    model, tokens, ablation, names, reference_tokens=reference_tokens,
                    cache=shared["cache"], seed=seed, cost=cost, chunks=chunks,
                )  # fmt: skip
        return 0.0  # counted in cost, as the chunks draw on it

    def chunk(c: Chunk) -> dict[str, Any]:
        sl, part, out = c.rows, cost.like(), {}
        with eval_no_grad(model):
            if patching:
                src_cache = cache_rows(shared["cache"], sl) if direction == "denoising" else None
                out["source"], by_hook = source_run(
                    model, source[sl], c.metric, names, src_cache, tokens[sl]
                )
                part.forward()
            else:
                by_hook = shared["values"].rows(sl)
            target = None if by_hook is None else {l: by_hook[hook_name("z", l)] for l in layers}
        value, z, g_z, g_p = head_gradients(
            rt, base[sl], c.metric, layers, pattern_layers, score_tokens=tokens[sl]
        )
        part.forward()
        part.backward()
        diff = {}
        for l in layers:
            t = torch.zeros_like(z[l]) if target is None else target[l].to(z[l].device)
            d = t.float() - z[l].float()  # [batch, pos, head, d_head], float32 in any precision
            diff[l] = d if pos is None else d * pos.to(d.device).view(1, -1, 1, 1)
        first = first_order(chosen, diff, g_z)
        if correction == "qk" and pattern_layers:
            per_pass = max(1, CPU_TOKENS_PER_PASS // base[sl].numel())
            fix = qk_correction(rt, base[sl], chosen, diff, g_p, per_pass)
            first = {k: first[k] + fix[k] for k in chosen}
        out.update(value=value, first=np.asarray([first[k] for k in chosen]), cost=part.total)
        return out

    means = ("value", "first", "source") if patching else ("value", "first")
    task = Task(
        "attribute_heads", foot, work=work, chunk=chunk, prepare=prepare,
        combine=dict.fromkeys(means, "mean"), metric=m, fix="use shorter prompts",
        inputs=(tokens, corrupted_tokens, reference_tokens, ablation, direction, heads,
                positions, correction, verify, seed),
    )  # fmt: skip
    out = run(model, (n, P), task, memory_budget=memory_budget, estimate=estimate,
              progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    cache = shared["cache"]
    cost.add(out.forward_equivalents)
    value = float(out.values["value"])
    source_value = float(out.values["source"]) if patching else None
    estimate = dict(zip(chosen, (float(x) for x in out.values["first"])))
    est = [estimate[k] for k in chosen]
    exact: dict[tuple[int, int], float] = {}
    if verify:
        top = sorted(chosen, key=lambda k: -abs(estimate[k]))[:verify]
        if patching:
            ex = patch_heads(
                model, tokens, corrupted_tokens=corrupted_tokens, metric=m, direction=direction,
                heads=top, positions=positions, cache=cache, progress=progress,
                memory_budget=memory_budget,
            )  # fmt: skip
        else:
            ex = ablate_heads(
                model, tokens, ablation=ablation, metric=m, heads=top, positions=positions,
                reference_tokens=reference_tokens, seed=seed, progress=progress,
                memory_budget=memory_budget,
            )  # fmt: skip
        # the cache's share is counted once, below
        cost.add(ex.attrs["forward_equivalents"] - cache_work(cache) * cost.block_share)
        exact = {(int(r.layer), int(r.head)): float(r.effect) for r in ex.itertuples()}
    ex_col = [exact.get(k, float("nan")) for k in chosen]
    if patching:
        span = source_value - value
        check_span(value, source_value, "the normalized estimate", model_dtype(model))
        clean, corrupted = clean_first(direction, value, source_value)
        df = rows_frame(
            chosen,
            {
                "clean": [clean] * len(chosen),
                "corrupted": [corrupted] * len(chosen),
                "estimate": est,
                "estimate_normalized": [e / span for e in est],
                "exact": ex_col,
                "exact_normalized": [x / span for x in ex_col],
            },
        )
    else:
        df = rows_frame(chosen, {"clean": [value] * len(chosen), "estimate": est, "exact": ex_col})
    df.attrs.update(
        table_attrs(
            "attribute_heads",
            description="a first-order estimate of each head's effect (exact where verified)",
            method="attribution",
            ablation=ablation,
            direction=direction,
            metric=m,
            model=model,
            positions=positions_label(pos),
            seed=seed,
            forward_equivalents=round(cost.total + cache_work(cache) * cost.block_share, 3),
            correction=correction,
            verified=len(exact),
            chunks=out.chunks,
        )
    )
    return df

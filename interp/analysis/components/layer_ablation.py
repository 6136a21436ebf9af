"""Ablating MLPs and whole attention layers: "attention or MLP?" in one call.

The same ablations as for heads (:mod:`interp.analysis.components.ablation`):
``zero``, ``mean`` (over the batch or ``reference_tokens``), ``resample`` (a
seeded draw of another sequence), at every position or at ``positions``, exact
on the engine of :mod:`interp.engine.sweeps.sweep` (each edit resumed at its layer).

* :func:`ablate_mlps`: each MLP's output (``blocks.{l}.hook_mlp_out``), or,
  with ``neuron_groups=g``, each of ``g`` contiguous groups of its hidden
  neurons (``blocks.{l}.mlp.hook_post``).
* :func:`ablate_layers`: each layer's attention (every head's ``hook_z``:
  the output bias stays, as in head ablation) and MLP, one row each.

Example:
    >>> from interp.models.hf import random_gpt2
    >>> from interp.datasets import repeated_random_tokens
    >>> model = random_gpt2(2, vocab=30)
    >>> tokens = repeated_random_tokens(3, 6, d_vocab=30, seed=0).tokens
    >>> ablate_layers(model, tokens)["label"].tolist()
    ['L0.attn', 'L0.mlp', 'L1.attn', 'L1.mlp']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from interp.analysis.components._pipeline import ablate, check_ablating
from interp.analysis.components.ablation import Ablation, MetricArg
from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.glossary import retired_words
from interp.core.head_checks import check_layer
from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel, check_model, hook_names
from interp.core.shapes import Mask, Tokens
from interp.engine.chunks import Estimate
from interp.engine.sweeps.sites import Site, site

PARTS = ("attn", "mlp")


def _layers(model: HookedModel, layers: Iterable[Any] | None) -> list[int]:
    if layers is None:
        return list(range(model.cfg.n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise InterpError(f"layers must be a list of block indices, got {layers!r}")
    out = sorted({check_layer(model, l) for l in layers})
    if not out:
        raise InterpError("layers is empty; pass block indices, or None for every layer")
    return out


def _check_mlps(model: HookedModel) -> int:
    """``d_mlp``, refusing models without MLPs."""
    if hook_name("mlp_out", 0) not in hook_names(model):
        raise InterpError(
            "this model has no MLPs (no blocks.0.hook_mlp_out): it is attention-only; ablate "
            "its heads (ablate_heads) or its attention layers (ablate_layers(parts=['attn']))"
        )
    return int(getattr(model.cfg, "d_mlp", 0) or 0)


@retired_words(method="ablation")
def ablate_mlps(
    model: HookedModel,
    tokens: Tokens,
    *,
    ablation: Ablation = "zero",
    metric: MetricArg = None,
    layers: Sequence[int] | None = None,
    neuron_groups: int | None = None,
    loss_mask: Mask | None = None,
    positions: Any = None,
    reference_tokens: Tokens | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Ablate each MLP (or each of ``neuron_groups`` groups of its neurons) alone.

    Each MLP's output (``blocks.{l}.hook_mlp_out``), or each of ``neuron_groups``
    contiguous groups of its hidden neurons (``blocks.{l}.mlp.hook_post``), replaced by the
    ablation's values; ``effect = m(ablated) - m(clean)``. Exact, on
    :mod:`interp.engine.sweeps.sweep` (each edit resumed at its layer); the prompts run in chunks
    under ``memory_budget`` (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        ablation: What replaces an activation: ``'zero'`` (default), ``'mean'`` (over the
            batch or ``reference_tokens``) or ``'resample'`` (another sequence's, seeded).
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``; ``None`` is the next-token loss over
            ``loss_mask``.
        layers: Block indices whose MLPs to ablate; ``None`` is every layer.
        neuron_groups: Split each MLP's ``d_mlp`` hidden neurons into this many contiguous
            groups and ablate each alone; ``None`` ablates whole MLPs.
        loss_mask: ``[batch, pos]`` bool: which positions count (the predictions the default
            loss metric averages); not with a metric of your own.
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position.
        reference_tokens: The sequences a mean or resample ablation draws from (default: the
            tokens).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. It supplies the activations mean and resample
            ablation need.
        batch_size: How many edits share a forward pass; ``None`` is as many as
            ``memory_budget`` and the CPU rule of :mod:`interp.engine.batching` allow.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks, and its edits share passes, to stay under it; ``None`` is a quarter
            of the memory free on the model's device.
        seed: Every random draw (the resample ablation's); the same seed gives the same
            numbers.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per MLP (or neuron group), layer-major: ``layer, neuron_group,
        label, neurons, clean, ablated, effect`` (``neuron_group`` and ``neurons`` are empty
        for whole MLPs; labels ``L3.mlp`` or ``L3.mlp[384:768]``). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``engine_note``, ``reference`` and
        ``chunks``. With ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate`
        instead.

    Raises:
        InterpError: for a model without MLPs, ``neuron_groups`` below 1 or
            above ``d_mlp``, layers out of range, a retired parameter name
            (``method=``), and as :func:`ablate_heads`.
    """
    check_model(model)
    d_mlp = _check_mlps(model)
    chosen = _layers(model, layers)
    if neuron_groups is not None:
        g = check_int(neuron_groups, "neuron_groups", minimum=1)
        if g > d_mlp:
            raise InterpError(f"neuron_groups={g} is more than the MLP's {d_mlp} neurons")
    a = check_ablating(
        model, tokens, ablation=ablation, metric=metric, loss_mask=loss_mask,
        reference_tokens=reference_tokens, positions=positions, seed=seed, cache=cache,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    if neuron_groups is None:
        for l in chosen:
            rows.append({"layer": l, "neuron_group": None, "label": f"L{l}.mlp", "neurons": ""})
            edits.append([site("mlp_out", l)])
    else:
        bounds = [round(i * d_mlp / g) for i in range(g + 1)]
        for l in chosen:
            for i in range(g):
                lo, hi = bounds[i], bounds[i + 1]
                rows.append(
                    {
                        "layer": l,
                        "neuron_group": i,
                        "label": f"L{l}.mlp[{lo}:{hi}]",
                        "neurons": f"{lo}-{hi - 1}",
                    }
                )
                edits.append([Site(f"blocks.{l}.mlp.hook_post", l, channels=(lo, hi))])
    table = pd.DataFrame(rows)
    table["neuron_group"] = table["neuron_group"].astype("Int64")
    return ablate(
        model,
        a,
        edits,
        table,
        analysis="ablate_mlps",
        description=f"the metric with each MLP{'' if neuron_groups is None else ' neuron group'} "
        f"{a.ablation}-ablated alone, exactly",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )


@retired_words(method="ablation")
def ablate_layers(
    model: HookedModel,
    tokens: Tokens,
    *,
    ablation: Ablation = "zero",
    metric: MetricArg = None,
    layers: Sequence[int] | None = None,
    parts: Sequence[str] = PARTS,
    loss_mask: Mask | None = None,
    positions: Any = None,
    reference_tokens: Tokens | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Ablate each layer's attention (all its heads) and MLP alone: one row per layer and part.

    A layer's attention is every head's ``hook_z`` (the output bias stays, as in head
    ablation), its MLP ``hook_mlp_out``; ``effect = m(ablated) - m(clean)``. Exact, on
    :mod:`interp.engine.sweeps.sweep`; the prompts run in chunks under ``memory_budget``
    (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        ablation: What replaces an activation: ``'zero'`` (default), ``'mean'`` (over the
            batch or ``reference_tokens``) or ``'resample'`` (another sequence's, seeded).
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``; ``None`` is the next-token loss over
            ``loss_mask``.
        layers: Block indices to ablate; ``None`` is every layer.
        parts: ``'attn'``, ``'mlp'`` or both (default): which part of each layer to ablate.
            On an attention-only model the default is its attention alone.
        loss_mask: ``[batch, pos]`` bool: which positions count (the predictions the default
            loss metric averages); not with a metric of your own.
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position.
        reference_tokens: The sequences a mean or resample ablation draws from (default: the
            tokens).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. It supplies the activations mean and resample
            ablation need.
        batch_size: How many edits share a forward pass; ``None`` is as many as
            ``memory_budget`` and the CPU rule of :mod:`interp.engine.batching` allow.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks, and its edits share passes, to stay under it; ``None`` is a quarter
            of the memory free on the model's device.
        seed: Every random draw (the resample ablation's); the same seed gives the same
            numbers.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per layer and part: ``layer, part, label, clean, ablated,
        effect`` (labels ``L3.attn``, ``L3.mlp``). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``engine_note``, ``reference`` and
        ``chunks``. With ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate`
        instead.

    Raises:
        InterpError: for an unknown part, ``"mlp"`` on a model without MLPs,
            layers out of range, a retired parameter name (``method=``), and as
            :func:`ablate_heads`.
    """
    check_model(model)
    parts = tuple(parts) if not isinstance(parts, str) else (parts,)
    if not parts or any(p not in PARTS for p in parts):
        raise InterpError(f"parts must be a subset of {', '.join(PARTS)}, got {parts}")
    if "mlp" in parts:
        if hook_name("mlp_out", 0) not in hook_names(model) and parts == PARTS:
            parts = ("attn",)  # an attention-only model: its layers are their attention
        else:
            _check_mlps(model)
    chosen = _layers(model, layers)
    a = check_ablating(
        model, tokens, ablation=ablation, metric=metric, loss_mask=loss_mask,
        reference_tokens=reference_tokens, positions=positions, seed=seed, cache=cache,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    for l in chosen:
        for part in parts:
            rows.append({"layer": l, "part": part, "label": f"L{l}.{part}"})
            edits.append([site("z", l)] if part == "attn" else [site("mlp_out", l)])
    return ablate(
        model,
        a,
        edits,
        pd.DataFrame(rows),
        analysis="ablate_layers",
        description=f"the metric with each layer's attention and MLP {a.ablation}-ablated alone",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )

"""Head ablations: what a metric does when a head's output is removed.

An ablation replaces a head's output *before* the output projection, at
``blocks.{l}.attn.hook_z`` (``[batch, pos, head, d_head]``), so nothing of the
head reaches the residual stream through ``W_O`` (the output bias ``b_O`` is
shared by the layer's heads and stays). The ``ablation``:

* ``zero``: ``z = 0``;
* ``mean``: ``z`` replaced by its mean over a reference batch, per position
  (reference sequences must have the same length as ``tokens``; default: the
  tokens themselves);
* ``resample``: each sequence's ``z`` replaced by the head's ``z`` on a
  randomly drawn (seeded) sequence: any row of ``reference_tokens``, or,
  without them, a *different* sequence of ``tokens``.

``positions`` restricts the ablation to some positions (all by default). The
default metric is the mean next-token loss over ``loss_mask``. Each table has
``clean``, ``ablated`` and ``effect = ablated - clean``. All sweeps run on the
exact engine (:mod:`interp.engine.sweeps.sweep`); ``df.attrs["engine"]`` says which
path ran, and every result equals one ``run_with_hooks`` per edit (to 1e-5).
The model runs in eval mode under ``torch.no_grad()`` (its mode is restored).

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.datasets import repeated_tokens
    >>> model = load_induction_model()
    >>> data = repeated_tokens(32, d_vocab=64, seq_len=48, segment_lengths=(8, 12), seed=1)
    >>> table = ablate_heads(model, data.tokens, loss_mask=data.loss_mask)
    >>> table.nlargest(2, "effect")["label"].tolist()
    ['L1H1', 'L0H1']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis.components._pipeline import ablate, check_ablating
from interp.core.checks import check_tokens
from interp.core.errors import InterpError
from interp.core.glossary import retired_words
from interp.core.head_checks import parse_heads
from interp.core.hooks import hook_name
from interp.core.metrics import Metric
from interp.core.protocol import HookedModel, check_model, eval_no_grad
from interp.core.shapes import Mask, Tokens
from interp.engine.chunks import Estimate
from interp.engine.sweeps.sites import head_edits, site
from interp.engine.sweeps.sweep import sweep_outline
from interp.outputs.frames import head_columns

Ablation = Literal["zero", "mean", "resample"]
MetricArg = Metric | Callable[[torch.Tensor, torch.Tensor], Any] | None


def zero_head_hooks(model: HookedModel, *, heads: Iterable[Any]) -> list[tuple[str, Callable]]:
    """``fwd_hooks`` for ``run_with_hooks`` that zero the given heads' ``hook_z``.

    One hook per layer that has a head in ``heads`` (layer order); each returns a copy of
    ``z [batch, pos, head, d_head]`` with those heads' slices zero. Reads no weights and runs
    nothing: the hooks are for the caller's own ``run_with_hooks``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its sizes are read.
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning.

    Returns:
        ``[(hook name, hook)]``: ``blocks.{l}.attn.hook_z`` and its hook, one per layer.

    Example:
        >>> from interp.models import load_induction_model
        >>> model = load_induction_model()
        >>> [name for name, _ in zero_head_hooks(model, heads=["L1H1", "L0H1"])]
        ['blocks.0.attn.hook_z', 'blocks.1.attn.hook_z']

    Raises:
        InterpError: for a head out of range or a malformed label.
    """
    by_layer: dict[int, list[int]] = {}
    for layer, head in parse_heads(model, heads):
        by_layer.setdefault(layer, []).append(head)

    def make(hs: list[int]) -> Callable:
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            z = z.clone()  # [batch, pos, head, d_head]
            z[:, :, hs] = 0.0
            return z

        return hook

    return [(hook_name("z", l), make(hs)) for l, hs in sorted(by_layer.items())]


@retired_words(method="ablation")
def ablate_heads(
    model: HookedModel,
    tokens: Tokens,
    *,
    ablation: Ablation = "zero",
    metric: MetricArg = None,
    heads: Iterable[Any] | None = None,
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
    """Ablate each head alone: columns ``layer, head, label, clean, ablated, effect``.

    ``effect = ablated - clean``, where ``clean`` is the metric of the unedited run and
    ``ablated`` the metric with one head's ``hook_z`` replaced (module docstring). Exact, on
    :mod:`interp.engine.sweeps.sweep`: every row equals one ``run_with_hooks`` (to 1e-5);
    the prompts run in chunks under ``memory_budget`` (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        ablation: What replaces an activation: ``'zero'`` (default), ``'mean'`` (over the
            batch or ``reference_tokens``, per position) or ``'resample'`` (another
            sequence's, seeded).
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``; ``None`` is
            the mean next-token loss over ``loss_mask``.
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning.
        loss_mask: ``[batch, pos]`` bool: which positions count (the predictions the
            default loss averages); only beside the default metric.
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position.
        reference_tokens: The sequences a mean or resample ablation draws from (default: the
            tokens); the same length as ``tokens``.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; it supplies
            the ``hook_z`` a mean or resample ablation needs.
        batch_size: How many edits share a forward pass; ``None`` is as many as
            ``memory_budget`` and the CPU rule of :mod:`interp.engine.batching` allow.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks, and its edits share passes, to stay under it; ``None`` is a quarter
            of the memory free on the model's device.
        seed: Every random draw (the resampled sequences); the same seed gives the same
            numbers.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per head of ``heads`` (layer-major): ``layer, head, label,
        clean, ablated, effect`` (metric values). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (the ablation, metric and engine path), plus
        ``engine_note`` and ``chunks``. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown ablation, heads out of range, a ``loss_mask``
            or reference batch that does not fit the tokens, ``loss_mask`` beside a
            custom metric, a metric that needs an LM head the model lacks, a bad
            batch size, or a metric that returns a non-scalar or non-finite value.
    """
    a = check_ablating(
        model, tokens, ablation=ablation, metric=metric, loss_mask=loss_mask,
        reference_tokens=reference_tokens, positions=positions, seed=seed, cache=cache,
    )  # fmt: skip
    chosen = sorted(parse_heads(model, heads))
    return ablate(
        model,
        a,
        head_edits(chosen),
        head_columns(chosen),
        analysis="ablate_heads",
        description=f"the metric with each head's hook_z {a.ablation}-ablated alone, exactly",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )


@retired_words(method="ablation")
def ablate_head_groups(
    model: HookedModel,
    tokens: Tokens,
    *,
    groups: Mapping[str, Iterable[Any]],
    ablation: Ablation = "zero",
    metric: MetricArg = None,
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
    """Ablate named sets of heads together: one row per group.

    ``effect = ablated - clean`` with every head of a group ablated at once, e.g. "top-6
    induction heads" against several sets of 6 random heads (redundant heads hide from
    single-head ablations). Exact, on the same engine as :func:`ablate_heads`.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        groups: ``{name: heads}``: each named set of heads (``(layer, head)`` pairs or
            ``'L1H4'`` labels) is ablated together, one row per name.
        ablation: What replaces an activation: ``'zero'`` (default), ``'mean'`` (over the
            batch or ``reference_tokens``, per position) or ``'resample'`` (another
            sequence's, seeded).
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``; ``None`` is
            the mean next-token loss over ``loss_mask``.
        loss_mask: ``[batch, pos]`` bool: which positions count (the predictions the
            default loss averages); only beside the default metric.
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position.
        reference_tokens: The sequences a mean or resample ablation draws from (default: the
            tokens); the same length as ``tokens``.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; it supplies
            the ``hook_z`` a mean or resample ablation needs.
        batch_size: How many edits share a forward pass; ``None`` is as many as
            ``memory_budget`` and the CPU rule of :mod:`interp.engine.batching` allow.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks, and its edits share passes, to stay under it; ``None`` is a quarter
            of the memory free on the model's device.
        seed: Every random draw (the resampled sequences); the same seed gives the same
            numbers.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per group, in the order given: ``group, heads`` (its labels,
        comma-separated), ``n_heads, clean, ablated, effect``. ``attrs`` as
        in :func:`ablate_heads`. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Example:
        >>> from interp.models import load_induction_model
        >>> from interp.datasets import repeated_tokens
        >>> model = load_induction_model()
        >>> data = repeated_tokens(8, d_vocab=64, seq_len=32, segment_lengths=(6, 10), seed=0)
        >>> df = ablate_head_groups(model, data.tokens, loss_mask=data.loss_mask,
        ...                         groups={"induction": ["L1H1", "L0H1"], "other": ["L0H0"]})
        >>> df["group"].tolist(), df["n_heads"].tolist()
        (['induction', 'other'], [2, 1])

    Raises:
        InterpError: as :func:`ablate_heads`, for ``groups`` that is not a
            mapping of names to heads, or for an empty group.
    """
    check_model(model)
    if not isinstance(groups, Mapping):
        raise InterpError(
            f"groups must be a mapping {{name: heads}}, got {type(groups).__name__}; e.g. "
            "{'induction': ['L1H1', 'L1H0'], 'random': [(0, 1)]}"
        )
    if not groups:
        raise InterpError("no groups given: pass {name: [heads]}")
    a = check_ablating(
        model, tokens, ablation=ablation, metric=metric, loss_mask=loss_mask,
        reference_tokens=reference_tokens, positions=positions, seed=seed, cache=cache,
    )  # fmt: skip
    parsed = {str(g): parse_heads(model, hs) for g, hs in groups.items()}
    rows = pd.DataFrame(
        {
            "group": list(parsed),
            "heads": [",".join(f"L{l}H{h}" for l, h in hs) for hs in parsed.values()],
            "n_heads": [len(hs) for hs in parsed.values()],
        }
    )
    return ablate(
        model,
        a,
        [[site("z", l, head=h) for l, h in hs] for hs in parsed.values()],
        rows,
        analysis="ablate_head_groups",
        description=f"the metric with each named set of heads {a.ablation}-ablated together",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )


def head_sweep_outline(
    model: HookedModel,
    tokens: Tokens,
    *,
    heads: Iterable[Any] | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """What a per-head sweep of ``heads`` on ``tokens`` will run, without running it.

    Keys: ``path`` (the engine path, see :mod:`interp.engine.sweeps.sweep`),
    ``note`` (why a slower path, if so), ``edits``, ``edits_per_pass`` and
    ``passes`` (forward passes, the clean one included). Choosing the path may
    run its one-time exactness check on a small slice of ``tokens``.

    Raises:
        InterpError: for bad tokens or heads.
    """
    check_model(model)
    tokens = check_tokens(model, tokens, chunked=True)
    chosen = sorted(parse_heads(model, heads))
    with eval_no_grad(model):
        return sweep_outline(model, tokens, head_edits(chosen), batch_size)


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    return renamed(__name__, name)  # an old name warns and names the new one

"""Per-head activation patching: one head's ``hook_z`` from one run, spliced into the other.

Run the model on a clean prompt and on a corrupted one that changes the
answer (for name movers, swap the names). Patching head ``h``'s output asks,
in the ``direction`` (:mod:`interp.engine.direction`): ``"noising"`` (the
default) splices the corrupted run's ``hook_z`` into the clean run (does the
metric need this head?); ``"denoising"`` the clean run's into the corrupted run
(is this head enough to restore the clean answer? TransformerLens's
``get_act_patch_attn_head_out_all_pos``, tested equal). ``effect = patched -
base run`` and ``normalized = effect / (source run - base run)``: 1 means this
head alone moves the metric all the way. Exact, on :mod:`interp.engine.sweeps.sweep`.

Example:
    >>> import torch
    >>> from interp.models import load_induction_model
    >>> model = load_induction_model()
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])
    >>> corrupted = torch.tensor([[0, 5, 6, 9, 8, 5, 6, 9]])
    >>> table = patch_heads(model, clean, corrupted_tokens=corrupted,
    ...                     metric=logit_diff_metric(8, 10), direction="denoising")
    >>> table.nlargest(1, "normalized")["label"].item()
    'L1H1'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import torch

from interp.analysis.components._pipeline import check_patching, patch
from interp.analysis.components.ablation import MetricArg
from interp.core.head_checks import parse_heads
from interp.core.hooks import hook_name
from interp.core.metrics import logit_diff_metric
from interp.core.protocol import HookedModel
from interp.core.shapes import Tokens
from interp.engine.chunks import Estimate
from interp.engine.direction import Direction
from interp.engine.sweeps.sites import head_edits, mask_positions
from interp.outputs.frames import head_columns

__all__ = ["logit_diff_metric", "patch_heads"]


def patch_heads(
    model: HookedModel,
    tokens: Tokens,
    *,
    corrupted_tokens: Tokens,
    metric: MetricArg,
    direction: Direction = "noising",
    heads: Iterable[Any] | None = None,
    positions: Any = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Patch each head's ``hook_z`` from one run into the other, one head at a time.

    ``effect = m(patched) - m(base run)`` and ``normalized = effect / (m(source run) -
    m(base run))``: 1 means this head alone moves the metric all the way (module
    docstring). Exact, on :mod:`interp.engine.sweeps.sweep`; the prompts run in chunks under
    ``memory_budget`` (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``.
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``.
        direction: Which run a patch edits: ``'noising'`` (the default: the corrupted run's
            activations into the clean run; does the metric *need* this?) or
            ``'denoising'`` (the clean run's into the corrupted run; is this *enough*?).
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning.
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. The clean run's: denoising reads its ``hook_z``
            instead of re-running.
        batch_size: How many edits share a forward pass; ``None`` is as many as
            ``memory_budget`` and the CPU rule of :mod:`interp.engine.batching` allow.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks, and its edits share passes, to stay under it; ``None`` is a quarter
            of the memory free on the model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per head of ``heads`` (in layer, head order): ``layer, head,
        label, clean, corrupted, patched, effect, normalized`` (metric values).
        ``attrs`` follow :data:`interp.outputs.frames.SCHEMA` (``ablation="patch"``,
        the direction, metric and engine path), plus ``engine_note`` and ``chunks``. With
        ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown direction, clean and corrupted tokens of
            different shapes, a metric that needs an LM head the model lacks, ids or
            positions that do not fit, a metric that returns a non-scalar, or clean
            and corrupted runs with equal metrics (``normalized`` would divide by zero).
    """
    p = check_patching(
        model, tokens, corrupted_tokens=corrupted_tokens, metric=metric, direction=direction,
        positions=positions, cache=cache, what="patch_heads",
    )  # fmt: skip
    chosen = sorted(parse_heads(model, heads))
    layers = sorted({l for l, _ in chosen})
    at = mask_positions(p.positions)

    def cells(values: dict[str, torch.Tensor]) -> tuple[dict[str, list], list]:
        return head_columns(chosen), head_edits(chosen, at)

    return patch(
        model,
        p,
        [hook_name("z", l) for l in layers],
        cells,
        analysis="patch_heads",
        description=f"the metric with each head's hook_z patched alone ({p.direction})",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
    )

"""The runs an analysis compares, checked once for every engine: direction, tokens, metric and
positions.

An ablation runs the model on the clean ``tokens`` and replaces activations (zero, mean,
resample); a patch runs it on two prompts of one shape, the clean ``tokens`` and the
``corrupted_tokens``, and splices activations of one run into the other, the way
``direction`` says (:mod:`interp.engine.direction`). Every analysis that patches or ablates,
in the sweep engine (``ablate_heads``, ``patch_heads``, ``patch_components``), in
``attribute_heads`` and in the edge engine (``attribute_edges``, ``path_patch``,
``evaluate_circuit``), checks the same sequence before any pass, here:

1. ``direction`` is ``"noising"`` or ``"denoising"``; denoising needs a corrupted run;
2. the tokens: a pair of one shape that differ, for a patch; one batch, and no corrupted
   tokens, for an ablation;
3. the metric (:func:`interp.core.metrics.prepare_metric`: the next-token loss over
   ``loss_mask`` when none is given, where the analysis has that default);
4. the positions an edit touches (:func:`interp.core.checks.position_mask`).

Example:
    >>> import torch
    >>> from interp.core.metrics import logit_diff_metric
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> r = check_runs(model, torch.tensor([[1, 2, 3]]), corrupted_tokens=torch.tensor([[1, 2, 4]]),
    ...                metric=logit_diff_metric(1, 2), direction="denoising", patching=True)
    >>> r.base.tolist(), r.source.tolist(), r.positions
    ([[1, 2, 4]], [[1, 2, 3]], None)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from interp.core.checks import check_prompts, position_mask
from interp.core.errors import InterpError
from interp.core.metrics import Metric, prepare_metric
from interp.core.protocol import HookedModel
from interp.engine.direction import check_direction, runs

__all__ = ["CheckedRuns", "check_runs"]


@dataclasses.dataclass(frozen=True)
class CheckedRuns:
    """What :func:`check_runs` returns.

    Attributes:
        tokens: The clean prompts ``[batch, pos]`` (the metric is scored against them).
        corrupted: The corrupted prompts, for a patch (None for an ablation).
        direction: ``"noising"`` or ``"denoising"``.
        metric: The checked metric.
        positions: ``[pos]`` bool, the positions an edit touches (None: every position).
    """

    tokens: torch.Tensor
    corrupted: torch.Tensor | None
    direction: str
    metric: Metric
    positions: torch.Tensor | None

    @property
    def base(self) -> torch.Tensor:
        """The run that is edited (the clean one when noising, or for an ablation)."""
        return runs(self.direction, self.tokens, self.corrupted)[0]

    @property
    def source(self) -> torch.Tensor | None:
        """The run patched from (None for an ablation)."""
        return runs(self.direction, self.tokens, self.corrupted)[1]


def check_runs(
    model: HookedModel,
    tokens: Any,
    *,
    patching: bool,
    corrupted_tokens: Any = None,
    direction: Any = "noising",
    metric: Any = None,
    loss_mask: Any = None,
    positions: Any = None,
    ablation: str = "patch",
    needs_metric: bool = False,
    min_len: int = 1,
    what: str = "a patch",
) -> CheckedRuns:
    """Check the runs of a patch (``patching``) or an ablation (module docstring), before
    any pass.

    Args:
        model: The hooked model (already checked by the caller).
        tokens: The clean prompts.
        patching: Whether the analysis patches from a corrupted run.
        corrupted_tokens: The corrupted prompts (a patch needs them; an ablation refuses
            them).
        direction: ``"noising"`` or ``"denoising"`` (an ablation is always noising).
        metric: The metric; a patch needs one (so does every analysis with
            ``needs_metric``); otherwise None is the next-token loss over ``loss_mask``.
        loss_mask: The default loss's positions (refused beside a metric, and for a patch).
        positions: The positions an edit touches (None: every one).
        ablation: The ablation's name, for the messages.
        needs_metric: Whether a metric is needed even for an ablation.
        min_len: The fewest tokens a prompt may have.
        what: The analysis, in the messages (``"patch_heads"``, ``"ablation='patch'"``).

    Returns:
        The :class:`CheckedRuns`.

    Raises:
        InterpError: for an unknown direction, a patch without corrupted tokens or a metric,
            clean and corrupted tokens that do not pair up, corrupted tokens or denoising for
            an ablation, bad tokens, ``loss_mask`` beside a metric or with a patch, a metric
            the model cannot score, or positions out of range.
    """
    direction = check_direction(direction)
    if patching and corrupted_tokens is None:
        raise InterpError(f"{what} needs corrupted_tokens (the run patched from)")
    if not patching:
        if corrupted_tokens is not None:
            raise InterpError(
                f"corrupted_tokens are for ablation='patch', not {ablation!r} (or use a "
                "patching function)"
            )
        if direction != "noising":
            raise InterpError(
                f"direction='denoising' patches the clean run into the corrupted one; "
                f"ablation={ablation!r} has no corrupted run (use ablation='patch')"
            )
    tokens, corrupted = check_prompts(
        model, tokens, corrupted_tokens, pair=patching, chunked=True, min_len=min_len
    )
    if patching and loss_mask is not None:
        raise InterpError(
            "loss_mask is for the default loss metric of an ablation; a patch scores its "
            "metric (build the mask into it, e.g. loss_metric(loss_mask))"
        )
    if metric is None and (patching or needs_metric):
        who = what if patching else f"ablation={ablation!r}"
        raise InterpError(f"{who} needs a metric, e.g. logit_diff_metric(answer, wrong)")
    m = prepare_metric(model, tokens, metric, loss_mask)
    pos = position_mask(tokens.shape[1], positions)
    return CheckedRuns(tokens, corrupted, direction, m, pos)

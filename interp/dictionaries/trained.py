"""What training a dictionary returns, and Gao et al.'s learning rate: shared by
:mod:`interp.dictionaries.train` (dictionaries) and :mod:`interp.dictionaries.train_transcoder`
(transcoders).

Example:
    >>> round(default_lr(2**14), 6)
    0.0002
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from interp.core.protocol import HookedModel
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.report import DictionaryReport


@dataclasses.dataclass(frozen=True)
class TrainedDictionary:
    """A trained dictionary and its figures.

    Attributes:
        dictionary: the :class:`Dictionary` (its ``metadata['training']`` holds ``training``).
        report: its :class:`DictionaryReport` on the evaluation tokens.
        training: how it was trained: options, steps, positions seen, the final losses and
            the dead share at the end of training.
        attrs: how it was computed (:data:`interp.outputs.frames.SCHEMA`): its
            ``forward_equivalents`` count the activation passes, the training steps'
            products and the report, in plain passes of the training tokens.
    """

    dictionary: Dictionary
    report: DictionaryReport
    training: dict[str, Any]
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)


def step_flops(
    n: int, d_in: int, d_out: int, n_features: int, *, aux: bool, input_grad: bool
) -> float:
    """The matrix products of one training step, forward and backward, as
    ``torch.utils.flop_counter`` counts them (the optimiser's elementwise work is not).

    Args:
        n: positions in the step's batch.
        d_in: the input's width.
        d_out: the output's width (``d_in`` for a dictionary, the target's for a transcoder).
        n_features: the dictionary's width.
        aux: whether the AuxK loss ran (dead features): a second decoder product.
        input_grad: whether the encoder's input takes a gradient (a dictionary subtracts
            ``b_dec`` before encoding; a transcoder encodes its input as it is).

    Returns:
        FLOPs: the encoder's product, its weight's gradient (and its input's), and each
        decoder product with the gradients of its weight and its activations.
    """
    enc = 2.0 * n * d_in * n_features
    dec = 2.0 * n * n_features * d_out
    return enc * (3 if input_grad else 2) + dec * 3 * (2 if aux else 1)


def report_share(model: HookedModel, report: DictionaryReport, tokens: Any, plain: float) -> float:
    """The report's forward-equivalents (of its own tokens) over a training run's plain
    passes of its tokens, ``plain`` FLOPs (:mod:`interp.engine.cost`).

    Args:
        model: the hooked model.
        report: the training run's report (its ``attrs``).
        tokens: ``[batch, pos]``: the tokens the report scored.
        plain: FLOPs of one plain pass of the training tokens.

    Returns:
        Forward-equivalents, in plain passes of the training tokens.
    """
    from interp.engine.cost import Flops

    batch, pos = tokens.shape[0], tokens.shape[-1]
    own = batch * Flops.of(model).plain(pos)
    return float(report.attrs.get("forward_equivalents", 0.0)) * own / plain


def default_lr(n_features: int) -> float:
    """Gao et al.'s learning rate for ``n_features`` features: ``2e-4 / sqrt(n / 2**14)``.

    Args:
        n_features: the dictionary's width.

    Returns:
        The Adam learning rate.
    """
    return 2e-4 / math.sqrt(n_features / 2**14)

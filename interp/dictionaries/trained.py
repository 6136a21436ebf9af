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


@dataclasses.dataclass
class TrainingCount:
    """A training run's counted work in plain passes of its tokens (:mod:`interp.engine.cost`):
    each activation pass stopped at the hooks it reads, each step's matrix products
    (:func:`step_flops`) and, at the end, its report's share. Shared by dictionary and
    transcoder training, which differ only in their widths and hooks.

    Example:
        >>> from interp.models import load_model
        >>> c = TrainingCount(load_model("induction-2l"), 4, 12, ["blocks.1.hook_resid_pre"],
        ...                   d_in=128, d_out=128, n_features=256, input_grad=True)
        >>> c.planned([slice(0, 4)], epochs=1, positions=12) > 0
        True

    Args:
        model: the hooked model.
        batch: sequences trained on.
        pos: tokens per sequence.
        hooks: the hooks each activation pass reads (it stops at the last).
        d_in: the input's width.
        d_out: the output's width (``d_in`` for a dictionary).
        n_features: the dictionary's width.
        input_grad: whether the encoder's input takes a gradient (:func:`step_flops`).
    """

    model: HookedModel
    batch: int
    pos: int
    hooks: list[str]
    d_in: int
    d_out: int
    n_features: int
    input_grad: bool
    rows: int = 0  # sequences read by the activation passes so far
    steps: float = 0.0  # FLOPs of the steps so far

    def __post_init__(self) -> None:
        from interp.engine.cost import Flops, cache_pass_work

        self.plain = self.batch * Flops.of(self.model).plain(self.pos)
        self.stop_work = cache_pass_work(self.model, self.pos, self.hooks)

    def step(self, n: int, *, aux: bool) -> None:
        """Count one training step over ``n`` positions (``aux``: the AuxK loss ran)."""
        self.steps += step_flops(n, self.d_in, self.d_out, self.n_features, aux=aux,
                                 input_grad=self.input_grad)  # fmt: skip

    def work(self, rows: float, steps: float) -> float:
        """Forward-equivalents of ``rows`` sequences' activation passes and ``steps`` FLOPs."""
        return rows / self.batch * self.stop_work + steps / self.plain

    def planned(self, chunks: list[slice], *, epochs: int, positions: int) -> float:
        """The plan's work (no AuxK steps foreseen): the activation passes, once per epoch
        over several chunks (else the first chunk is read once and kept), and every step
        over ``positions`` trained positions per sequence."""
        again = epochs > 1 and len(chunks) > 1
        rows = epochs * self.batch + (chunks[0].stop - chunks[0].start if again else 0)
        steps = step_flops(epochs * self.batch * positions, self.d_in, self.d_out,
                           self.n_features, aux=False, input_grad=self.input_grad)  # fmt: skip
        return self.work(rows, steps)

    def total(self, report: DictionaryReport, tokens: Any) -> float:
        """What ran: the counted passes and steps, and the report on ``tokens``."""
        return self.work(self.rows, self.steps) + report_share(
            self.model, report, tokens, self.plain
        )


def default_lr(n_features: int) -> float:
    """Gao et al.'s learning rate for ``n_features`` features: ``2e-4 / sqrt(n / 2**14)``.

    Args:
        n_features: the dictionary's width.

    Returns:
        The Adam learning rate.
    """
    return 2e-4 / math.sqrt(n_features / 2**14)

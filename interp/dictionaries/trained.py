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
    """

    dictionary: Dictionary
    report: DictionaryReport
    training: dict[str, Any]


def default_lr(n_features: int) -> float:
    """Gao et al.'s learning rate for ``n_features`` features: ``2e-4 / sqrt(n / 2**14)``.

    Args:
        n_features: the dictionary's width.

    Returns:
        The Adam learning rate.
    """
    return 2e-4 / math.sqrt(n_features / 2**14)

"""The bank-sense dataset: ambiguous words, each in two senses, each sense with a clue word.

Example:
    >>> df = ambiguous_words()
    >>> {"word", "sense", "clue", "sentence"} <= set(df.columns)
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interp.core.errors import InterpError
from interp.core.paths import data_dir

AMBIGUOUS_WORDS = "ambiguous_words.csv"
_SENSE_COLUMNS = ("word", "sense", "clue", "sentence")


def ambiguous_words(path: str | None = None) -> Any:
    """The bank-sense dataset: ambiguous words, each in two senses, with a clue word.

    The shipped file (``data/ambiguous_words.csv``, written for this project) has 26
    words x 2 senses x 2 sentences; in every sentence the clue comes *before*
    the word, so causal models can use it, and the word is never first (so a
    BPE tokenizer gives it the same leading-space token everywhere).

    Args:
        path: A CSV file with the columns ``word, sense, clue, sentence``; ``None`` is the
            shipped file.

    Returns:
        A pandas DataFrame with one row per sentence: ``word, sense, clue, sentence``.

    Example:
        >>> df = ambiguous_words()
        >>> df[df.word == "bank"].sense.unique().tolist()
        ['river', 'money']

    Raises:
        InterpError: for a missing file, missing columns, empty cells, or a
            word with fewer than two senses.
    """
    import pandas as pd

    file = data_dir() / AMBIGUOUS_WORDS if path is None else Path(path)
    if not file.is_file():
        raise InterpError(f"ambiguous-word dataset not found at {file}")
    df = pd.read_csv(file, dtype=str, keep_default_na=False)
    missing = [c for c in _SENSE_COLUMNS if c not in df.columns]
    if missing:
        raise InterpError(f"{file} lacks column(s) {', '.join(missing)}; need {_SENSE_COLUMNS}")
    df = df[list(_SENSE_COLUMNS)]
    empty = (df.apply(lambda c: c.str.strip()) == "").any(axis=1)
    if empty.any():
        raise InterpError(f"{file} row {int(empty.idxmax()) + 2} has an empty cell")
    thin = df.groupby("word")["sense"].nunique()
    if (thin < 2).any():
        raise InterpError(f"the word {thin[thin < 2].index[0]!r} in {file} has only one sense")
    return df.reset_index(drop=True)

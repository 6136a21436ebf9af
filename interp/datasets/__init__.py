"""Datasets for probing and training heads: repeated tokens, ambiguous words, name movers.

* :mod:`interp.datasets.repeated`: the induction probe (a segment of random length
  repeated after a random prefix) and ARENA's fixed probe;
* :mod:`interp.datasets.ambiguous`: the bank-sense sentences;
* :mod:`interp.datasets.ioi`: name-mover prompts with their corrupted twins;
* :mod:`interp.datasets.python_text`: real text offline, the Python standard library's
  source, tokenized for a model (dictionaries are trained on it).

Example:
    >>> data = repeated_tokens(4, d_vocab=64, seq_len=48, segment_lengths=(6, 12), seed=0)
    >>> data.tokens.shape
    torch.Size([4, 48])
"""

from __future__ import annotations

from interp.datasets.ambiguous import AMBIGUOUS_WORDS, ambiguous_words
from interp.datasets.ioi import (
    FIRST_NAMES,
    NAME_MOVER_TEMPLATES,
    SPLITS,
    NameMoverPrompts,
    first_names,
    name_mover_prompts,
    name_mover_templates,
)
from interp.datasets.python_text import TextCorpus, python_text, stdlib_files
from interp.datasets.repeated import (
    BOS,
    HELD_OUT_LENGTHS,
    TRAIN_LENGTHS,
    RepeatedTokens,
    repeated_random_tokens,
    repeated_seq_lens,
    repeated_tokens,
    training_sequences,
)

__all__ = [
    "AMBIGUOUS_WORDS",
    "BOS",
    "FIRST_NAMES",
    "HELD_OUT_LENGTHS",
    "NAME_MOVER_TEMPLATES",
    "NameMoverPrompts",
    "RepeatedTokens",
    "SPLITS",
    "TRAIN_LENGTHS",
    "TextCorpus",
    "ambiguous_words",
    "first_names",
    "name_mover_prompts",
    "name_mover_templates",
    "python_text",
    "repeated_random_tokens",
    "repeated_seq_lens",
    "training_sequences",
    "repeated_tokens",
    "stdlib_files",
]

"""A nearest-neighbour probe: does a stage's word vector tell the word's senses apart?

For every word, each split puts one randomly chosen sentence of each sense
in the training set and the rest in the test set. A test sentence is
assigned the sense of the training sentence *of the same word* whose vector
is most similar (cosine, after subtracting the training sentences' mean
vector at that stage). An exact tie (as at the token embedding, where every
use of a word has the same vector) scores 1/2, the chance level for two
senses. Accuracy is averaged over ``n_splits`` seeded splits.

A high accuracy says the senses are *linearly findable* in that stage's
vectors by this probe; it does not say the model itself reads them out.

Example:
    >>> import torch
    >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # two senses, far apart
    >>> states = torch.stack([x[0], x[1], x[0] * 2, x[1] * 2])[:, None]  # one stage
    >>> probe = nearest_neighbour_probe(states, words=["bat"] * 4, senses=["a", "b"] * 2)
    >>> probe[["stage_name", "accuracy", "chance"]].values.tolist()
    [['token embedding', 1.0, 0.5]]
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from interp.analysis.senses.states import by_word_sense, check_labels, state_names
from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.outputs.frames import described

TIE = 1e-6


def _split_table(words: Sequence[str], senses: Sequence[str]) -> dict[str, dict[str, list[int]]]:
    table = by_word_sense(words, senses)
    for w, by_sense in table.items():
        thin = [s for s, ids in by_sense.items() if len(ids) < 2]
        if thin:
            raise InterpError(
                f"the word {w!r} needs at least two sentences per sense for a train/test split "
                f"(sense {thin[0]!r} has one)"
            )
    return table


def nearest_neighbour_probe(
    states: torch.Tensor,
    *,
    words: Sequence[str],
    senses: Sequence[str],
    n_splits: int = 20,
    seed: int = 0,
) -> pd.DataFrame:
    """Held-out sense accuracy of a 1-nearest-neighbour probe at every stage.

    For every word, each split puts one randomly chosen sentence of each sense in the
    training set and the rest in the test set; a test sentence gets the sense of the
    training sentence *of the same word* whose vector is most similar (cosine, after
    subtracting the training sentences' mean vector at that stage). An exact tie scores
    1/2 (module docstring). A high accuracy says the senses are *linearly findable*; it does
    not say the model reads them out. No model runs.

    Args:
        states: ``[sentence, stage, d_model]``, as
            :func:`interp.analysis.senses.states.word_states` gives them.
        words: The word of each sentence, one per row of ``states``.
        senses: The sense label of each sentence; each word needs at least two senses, and
            at least two sentences of each.
        n_splits: How many seeded train/test splits to average over (at least 1; default 20).
        seed: Every random draw (the splits); the same seed gives the same numbers.

    Returns:
        A table with one row per stage: ``stage`` (0 = token embedding), ``stage_name``,
        ``accuracy`` (mean over splits), ``accuracy_std``, ``chance`` (1 / number of senses
        of a word, averaged) and ``n_test`` (test sentences per split). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (``model`` is ``None``).

    Raises:
        InterpError: for mismatched labels, or a word with one sense or fewer
            than two sentences in a sense.
    """
    check_labels(states, words, senses)
    n_splits = check_int(n_splits, "n_splits", minimum=1)
    seed = check_seed(seed)
    table = _split_table(words, senses)
    gen = torch.Generator().manual_seed(seed)
    n_stages = states.shape[1]
    acc = torch.zeros(n_splits, n_stages)
    n_test = 0
    for split in range(n_splits):
        train, test = [], []  # (index, word, sense)
        for w, by_sense in table.items():
            for s, ids in by_sense.items():
                pick = int(torch.randint(len(ids), (1,), generator=gen))
                train.append((ids[pick], w, s))
                test += [(i, w, s) for k, i in enumerate(ids) if k != pick]
        n_test = len(test)
        train_idx = torch.tensor([t[0] for t in train])
        test_idx = torch.tensor([t[0] for t in test])
        same_word = torch.tensor([[tw == cw for _, cw, _ in train] for _, tw, _ in test])
        right = torch.tensor([[ts == cs for _, _, cs in train] for _, _, ts in test])
        for stage in range(n_stages):
            x = states[:, stage]  # [sentence, d_model]
            x = torch.nn.functional.normalize(x - x[train_idx].mean(0), dim=-1)
            sims = x[test_idx] @ x[train_idx].T  # [test, train]
            sims = sims.masked_fill(~same_word, -torch.inf)
            winners = sims >= sims.max(-1, keepdim=True).values - TIE  # ties share the credit
            credit = (winners & right).sum(-1) / winners.sum(-1)
            acc[split, stage] = credit.float().mean()
    chance = sum(1 / len(b) for b in table.values()) / len(table)
    names = state_names(n_stages - 1)
    df = pd.DataFrame(
        {
            "stage": range(n_stages),
            "stage_name": names,
            "accuracy": acc.mean(0).tolist(),
            "accuracy_std": (acc.std(0) if n_splits > 1 else torch.zeros(n_stages)).tolist(),
            "chance": chance,
            "n_test": n_test,
        }
    )
    return described(
        df,
        "nearest_neighbour_probe",
        description="held-out accuracy of a nearest-neighbour sense probe on the states, by stage",
        method="exact",
        unit="accuracy",
        model=None,
        seed=seed,
        forward_equivalents=0.0,
    )

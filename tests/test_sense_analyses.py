"""Sense similarity, the nearest-neighbour probe, the dataset loader and bidirectional stripes,
on hand-made inputs whose answers are known exactly (no model needed)."""

import pandas as pd
import pytest
import torch

from interp import InterpError
from interp.analysis.heads.stripes import stripe_mask
from interp.analysis.senses.probe import nearest_neighbour_probe
from interp.analysis.senses.states import sense_similarity
from interp.datasets import ambiguous_words

WORDS = ["bank"] * 4 + ["bat"] * 4
SENSES = ["river", "river", "money", "money", "animal", "animal", "sport", "sport"]


def _states() -> torch.Tensor:
    """[8 sentences, 2 stages, 3 dims]: stage 0 identical per word, stage 1 one axis per sense."""
    s = torch.zeros(8, 2, 3)
    s[:4, 0] = torch.tensor([1.0, 1.0, 0.0])
    s[4:, 0] = torch.tensor([0.0, 1.0, 1.0])
    axes = {"river": 0, "money": 1, "animal": 0, "sport": 2}
    for i, sense in enumerate(SENSES):
        s[i, 1, axes[sense]] = 1.0
    return s


def test_similarity_is_exact_on_known_vectors():
    sim = sense_similarity(_states(), words=WORDS, senses=SENSES)
    assert list(sim["stage_name"]) == ["token embedding", "L0"]
    assert list(sim["stage"]) == [0, 1] and "layer" not in sim.columns  # stages are not blocks
    assert sim["cross_sense"].tolist() == pytest.approx([1.0, 0.0])
    assert sim["same_sense"].tolist() == pytest.approx([1.0, 1.0])
    by_word = sense_similarity(_states(), words=WORDS, senses=SENSES, by_word=True)
    assert len(by_word) == 4 and set(by_word["word"]) == {"bank", "bat"}


def test_probe_is_chance_on_ties_and_perfect_when_separated():
    probe = nearest_neighbour_probe(_states(), words=WORDS, senses=SENSES, n_splits=5)
    assert probe["accuracy"].tolist() == pytest.approx([0.5, 1.0])
    assert probe["chance"].iloc[0] == 0.5 and probe["n_test"].iloc[0] == 4


def test_probe_and_similarity_reject_bad_labels():
    with pytest.raises(InterpError, match="one word and one sense label per sentence"):
        sense_similarity(_states(), words=WORDS[:-1], senses=SENSES)
    with pytest.raises(InterpError, match="only one sense"):
        sense_similarity(_states(), words=WORDS, senses=["river"] * 8)
    with pytest.raises(InterpError, match="at least two sentences per sense"):
        nearest_neighbour_probe(_states()[:3], words=WORDS[:3], senses=SENSES[:3])


def test_dataset_loader_checks_its_file(tmp_path):
    df = ambiguous_words()
    assert list(df.columns) == ["word", "sense", "clue", "sentence"]
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"word": ["bank"], "sentence": ["the bank"]}).to_csv(bad, index=False)
    with pytest.raises(InterpError, match="lacks column"):
        ambiguous_words(bad)
    df.assign(sense="one").to_csv(bad, index=False)
    with pytest.raises(InterpError, match="only one sense"):
        ambiguous_words(bad)
    with pytest.raises(InterpError, match="not found"):
        ambiguous_words(tmp_path / "missing.csv")


def test_bidirectional_stripes_look_both_ways():
    t = torch.tensor([[0, 5, 6, 7, 5, 6, 7]])
    causal = stripe_mask(t, "duplicate_token")
    both = stripe_mask(t, "duplicate_token", causal=False)
    assert not causal[0, 1, 4] and both[0, 1, 4]  # the later copy counts for an encoder
    ind = stripe_mask(t, "induction", causal=False)
    assert ind[0, 1, 5]  # the token after the later copy of 5
    assert not ind[0, 1, 2]  # k = q + 1 is the next token, not induction
    assert stripe_mask(t, "induction")[0, 4, 2]  # causal: the token after the earlier copy

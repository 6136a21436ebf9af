"""The induction lab in features: why L1H1 attends, read off the shipped dictionary.

Every number is computed here from the shipped model and dictionary: the features'
meanings from their own activations, the pairs from feature-level QK attribution, and the
check from removing each prompt's top key feature from L1H1's key input alone.
"""

import pytest

from interp.core.paths import data_dir
from interp.dictionaries import load_dictionary
from interp.experiments.induction import eval_data
from interp.experiments.induction.features import (
    DICTIONARY,
    WITHIN,
    feature_lines,
    why_attend_in_features,
)


@pytest.fixture(scope="module")
def why(induction_model):
    # the lab's held-out prompts: segment lengths never used in training
    return why_attend_in_features(induction_model, eval_data(induction_model))


def test_the_shipped_dictionary_says_how_it_was_made():
    D = load_dictionary(data_dir() / DICTIONARY)
    assert D.hook_name == "blocks.1.hook_resid_pre" and D.architecture == "topk"
    meta = D.metadata
    assert meta["command"].startswith("interp train dictionary --model induction-2l")
    assert meta["corpus"]["name"] == "repeated-random-tokens"
    assert meta["report"]["fraction_variance_explained"] > 0.99


def test_the_top_pair_is_current_a_times_previous_a(why):
    """(query feature 'current token is A') x (key feature 'previous token is A'), the same A:
    the query's token, in at least 90% of held-out prompts."""
    per = why.per_prompt
    assert why.match_rate >= 0.9, feature_lines(why)
    matched = per[per["match"]]
    meanings = why.meanings.set_index("feature")
    q = meanings.loc[[int(f[1:]) for f in matched["top_query"]]]
    k = meanings.loc[[int(f[1:]) for f in matched["top_key"]]]
    # meanings read from activations: the query features are about the current token, the
    # key features about the previous one
    assert (q["current_share"] > q["previous_share"]).mean() > 0.9
    assert (k["previous_share"] > k["current_share"]).mean() > 0.9
    assert why.attrs["score_gap"] < 1e-4


def test_removing_the_key_feature_changes_the_score_as_attributed(why):
    per = why.per_prompt
    assert why.agree_rate >= 0.9, feature_lines(why)
    mean_a, mean_m = per["attribution"].mean(), per["measured"].mean()
    assert abs(mean_m - mean_a) <= WITHIN * abs(mean_a)
    assert mean_a < 0  # the key feature raises the score: removing it lowers it

"""The pretrained-heads lab: word sense and induction in SmolLM2-135M and MiniLM-L6.

Uses the session-wide models from conftest (each loaded once).
"""

import pandas as pd
import pytest
import torch
from conftest import run_cli

from interp import InterpError
from interp.analysis.clue_attention import clue_attention
from interp.analysis.induction import head_scores
from interp.analysis.sense_probe import nearest_neighbour_probe
from interp.analysis.sense_states import sense_similarity, word_states
from interp.analysis.words import encode_word, ordinary_word_ids
from interp.datasets import ambiguous_words, repeated_random_tokens

pytestmark = pytest.mark.slow

MODELS = ["smollm", "minilm"]


@pytest.fixture(scope="module")
def data():
    return ambiguous_words()


@pytest.fixture(scope="module", params=MODELS)
def sense(request, data):
    """(model, items, states) on the shipped dataset, per model."""
    model = request.getfixturevalue(request.param)
    items = [encode_word(model, r.sentence, r.word, clue=r.clue) for r in data.itertuples()]
    return model, items, word_states(model, items)


def test_dataset_is_big_enough(data):
    assert data["word"].nunique() >= 20
    assert (data.groupby("word")["sense"].nunique() == 2).all()
    assert (data.groupby(["word", "sense"]).size() >= 2).all()


def test_bank_cosine_falls_from_embedding_to_last_layer(sense, data):
    model, items, states = sense
    assert states.shape == (len(data), model.cfg.n_layers + 1, model.cfg.d_model)
    sim = sense_similarity(states, data["word"].tolist(), data["sense"].tolist())
    first, last = sim.iloc[0], sim.iloc[-1]
    # the token embedding is the same vector in every sentence
    assert first["cross_sense"] == pytest.approx(1.0, abs=1e-5)
    assert last["cross_sense"] < first["cross_sense"] - 0.1
    # the control: same-sense uses stay closer than cross-sense uses
    assert last["same_sense"] > last["cross_sense"]
    bank = sense_similarity(
        states, data["word"].tolist(), data["sense"].tolist(), by_word=True
    ).query("word == 'bank'")
    assert bank["cross_sense"].iloc[-1] < bank["cross_sense"].iloc[0]


def test_probe_separates_senses_better_than_the_embedding(sense, data):
    _, _, states = sense
    probe = nearest_neighbour_probe(states, data["word"].tolist(), data["sense"].tolist())
    assert probe["accuracy"].iloc[0] == pytest.approx(0.5)  # identical vectors: chance
    assert probe["accuracy"].iloc[1:].max() > 0.85
    assert probe["n_test"].iloc[0] == len(data) - 2 * data["word"].nunique()
    again = nearest_neighbour_probe(states, data["word"].tolist(), data["sense"].tolist())
    pd.testing.assert_frame_equal(probe, again)  # deterministic by seed


def test_clue_heads_find_the_clue(sense):
    model, items, _ = sense
    heads = clue_attention(model, items)
    assert len(heads) == model.cfg.n_layers * model.cfg.n_heads
    assert heads["clue_attention"].between(0, 1).all()
    # some head singles the clue out well beyond the other tokens
    assert heads["lift"].max() > 3


def test_multi_token_word_is_read_at_its_last_token(smollm, minilm):
    for model in (smollm, minilm):
        w = encode_word(model, "The greedy moneylender raised the rate.", "moneylender")
        assert len(w.word_positions) > 1
        assert w.word_pos == w.word_positions[-1]
        assert "".join(w.str_tokens[p] for p in w.word_positions).strip().lower() == (
            "moneylender" if model is smollm else "money##len##der"
        )


def test_missing_word_and_misplaced_clue_are_named(smollm, minilm):
    with pytest.raises(InterpError, match="'bank' does not occur"):
        encode_word(smollm, "The river was wide.", "bank")
    with pytest.raises(InterpError, match="put the clue before the word"):
        encode_word(smollm, "The bank of the river.", "bank", clue="river")
    # a bidirectional model sees the right context, so a later clue is allowed
    w = encode_word(minilm, "The bank of the river.", "bank", clue="river")
    assert w.clue_pos and w.clue_pos[0] > w.word_pos
    with pytest.raises(InterpError, match="'money' does not occur"):
        encode_word(minilm, "The bank of the river.", "bank", clue="money")


def test_text_longer_than_the_context(minilm):
    long = "the river bank " + "and so on " * 200
    with pytest.raises(InterpError, match="longer than the model's context of 512"):
        encode_word(minilm, long, "bank", occurrence=0)
    w = encode_word(minilm, long, "bank", occurrence=0, truncate=True)
    assert w.truncated and w.n_tokens == 512
    with pytest.raises(InterpError, match="cuts off 'bank'"):
        encode_word(minilm, "so " * 600 + "the river bank", "bank", truncate=True)


def test_minilm_bidirectional_stripes_find_its_previous_token_head(minilm):
    ids = ordinary_word_ids(minilm)
    words = minilm.tokenizer.convert_ids_to_tokens(ids[:50].tolist())
    assert all(w.isalpha() for w in words)
    probe = repeated_random_tokens(8, 50, d_vocab=minilm.cfg.d_vocab, bos=101, token_ids=ids)
    scores = head_scores(minilm, probe.tokens)
    assert scores["previous_token"].max() > 0.9
    causal = head_scores(minilm, probe.tokens, causal=True)
    # later keys count for an encoder: the bidirectional duplicate score is not the causal one
    assert not torch.allclose(
        torch.tensor(scores["duplicate_token"].to_numpy()),
        torch.tensor(causal["duplicate_token"].to_numpy()),
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    out = tmp_path_factory.mktemp("pre") / "report"
    return run_cli("lab", "pretrained", "--out", str(out)), out


def test_lab_cli_writes_report_and_tables(lab):
    proc, out = lab
    assert proc.returncode == 0, proc.stderr
    assert "smollm2-135m: best heads: induction L18H6" in proc.stdout
    html = (out / "report.html").read_text()
    assert html.count("var CircuitsVis") == 1
    assert "A heatmap is not an explanation" in html
    abl = pd.read_csv(out / "smollm2-135m_induction_ablation.csv")
    top, rand = abl.iloc[0], abl[abl["kind"] == "random"]["delta"]
    assert top["delta"] > 3 and rand.median() < 1 and len(rand) == 5
    # a costly random draw is explained: it holds a strong previous-token head
    costly = abl[(abl["kind"] == "random") & (abl["delta"] > 3)]
    assert costly["strong_heads"].str.contains("previous_token").all()
    sim = pd.read_csv(out / "minilm-l6_sense_similarity.csv")
    assert sim["cross_sense"].iloc[-1] < sim["cross_sense"].iloc[0]
    scores = pd.read_csv(out / "smollm2-135m_induction_scores.csv")
    assert len(scores) == 270 and list(scores.columns[:3]) == ["layer", "head", "label"]
    assert not (out / "minilm-l6_induction_ablation.csv").exists()  # no LM head: refused


@pytest.mark.browser
def test_lab_report_renders_offline(lab, chromium_paths):
    from browser import render_page

    _, out = lab
    result = render_page(out / "report.html", chromium_paths)
    # per model: best head per stripe, (SmolLM2) top induction heads, two bank sentences
    assert result["widgets"] == 7 and result["rendered"] == 7, result
    assert result["severe_logs"] == []


def test_lab_cli_bad_model_is_one_line(tmp_path):
    proc = run_cli("lab", "pretrained", "--model", "nope", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "aliases: smollm2-135m" in proc.stderr
    proc = run_cli("lab", "induction", "--model", "minilm-l6", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "--model is for the pretrained lab" in proc.stderr


def test_lab_refuses_a_model_without_a_tokenizer(tmp_path):
    proc = run_cli("lab", "pretrained", "--model", "induction-2l", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "induction-2l has no Hugging Face tokenizer" in proc.stderr.splitlines()[-1]

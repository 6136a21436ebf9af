"""The pretrained-heads lab: word sense and induction in SmolLM2-135M and MiniLM-L6.

Lab-level claims are read from the one run of the lab in this session (its
notebook, conftest.lab_run); the word-level analyses are tested directly on
small inputs with the session-wide models.
"""

import pandas as pd
import pytest
import torch

from interp import InterpError
from interp.analysis.heads.scores import head_scores
from interp.analysis.senses.clue import clue_attention
from interp.analysis.senses.states import word_states
from interp.analysis.senses.words import encode_word, ordinary_word_ids
from interp.datasets import ambiguous_words, repeated_random_tokens

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def out(lab_run):
    return lab_run("pretrained")


def table(out, name):
    return pd.read_csv(out / f"{name}.csv")


def test_dataset_is_big_enough():
    data = ambiguous_words()
    assert data["word"].nunique() >= 20
    assert (data.groupby("word")["sense"].nunique() == 2).all()
    assert (data.groupby(["word", "sense"]).size() >= 2).all()


def test_smollm_has_induction_heads_that_matter(out):
    scores = table(out, "smollm2-135m_induction_scores")
    assert len(scores) == 270 and list(scores.columns[:3]) == ["layer", "head", "label"]
    assert scores["induction"].max() > 0.7
    abl = table(out, "smollm2-135m_induction_ablation")
    top, rand = abl.iloc[0], abl[abl["kind"] == "random"]["effect"]
    assert top["effect"] > 3 and rand.median() < 1 and len(rand) == 5
    # a costly random draw is explained: it holds a strong previous-token head
    costly = abl[(abl["kind"] == "random") & (abl["effect"] > 3)]
    assert costly["strong_heads"].str.contains("previous_token").all()
    losses = table(out, "smollm2-135m_induction_losses").iloc[0]
    assert losses["repeated"] < losses["first_half"] - 5


def test_smollm_k_composition_links_a_previous_token_head_to_an_induction_head(out):
    top = table(out, "smollm2-135m_induction_composition_k").iloc[0]
    scores = table(out, "smollm2-135m_induction_scores").set_index("label")
    assert top["score"] > 3 * top["baseline"]
    assert scores.loc[top["src_label"], "previous_token"] > 0.5
    assert top["label"] in scores.nlargest(6, "induction").index


def test_sense_separates_with_depth(out):
    for model in ("smollm2-135m", "minilm-l6"):
        sim = table(out, f"{model}_sense_similarity")
        assert list(sim["stage"]) == list(range(len(sim)))
        first, last = sim.iloc[0], sim.iloc[-1]
        assert first["cross_sense"] == pytest.approx(1.0, abs=1e-5)  # the same embedding row
        assert last["cross_sense"] < first["cross_sense"] - 0.1
        assert last["same_sense"] > last["cross_sense"]  # the control
        probe = table(out, f"{model}_sense_probe")
        assert probe["accuracy"].iloc[0] == pytest.approx(0.5)  # identical vectors: chance
        assert probe["accuracy"].iloc[1:].max() > 0.85
        heads = table(out, f"{model}_clue_heads")
        assert heads["clue_attention"].between(0, 1).all() and heads["lift"].max() > 3


def test_minilm_parts_that_need_an_lm_head_are_skipped(out):
    assert not (out / "minilm-l6_induction_ablation.csv").exists()
    prev = table(out, "minilm-l6_head_leaders").query("kind == 'previous_token'").iloc[0]
    assert prev["score"] > 0.9


@pytest.mark.browser
def test_lab_report_renders_offline(out, chromium_paths):
    from browser import render_page

    html = (out / "report.html").read_text()
    assert html.count("var CircuitsVis") == 1 and "A heatmap is not an explanation" in html
    result = render_page(out / "report.html", chromium_paths)
    # per model: best head per stripe, two bank sentences; SmolLM2: the top induction heads
    assert result["widgets"] == 7 and result["rendered"] == 7, result
    assert set(result["figures"]) == {
        "sense_by_stage",
        "smollm2-135m_induction_scores",
        "smollm2-135m_group_ablation",
        "minilm-l6_induction_scores",
    }
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert result["severe_logs"] == []


def test_word_states_from_a_cache_equal_a_run(smollm):
    items = [
        encode_word(smollm, s, word="bank", clue=c)
        for s, c in (
            ("We sat by the river bank.", "river"),
            ("We went to the money bank.", "money"),
        )
    ]
    assert items[0].n_tokens == items[1].n_tokens
    tokens = torch.cat([it.tokens for it in items])
    _, cache = smollm.run_with_cache(tokens)
    # the cache holds whole sentences, the run stops at the word (a causal model's state there
    # is the same): equal to rounding, 1e-6 of each stage's largest entry
    got, ref = word_states(smollm, items, cache=cache), word_states(smollm, items)
    scale = ref.abs().amax(dim=(0, 2), keepdim=True)  # [1, stage, 1]
    assert ((got - ref).abs() <= 1e-6 * scale).all()
    a, b = clue_attention(smollm, items, cache=cache), clue_attention(smollm, items)
    torch.testing.assert_close(
        torch.tensor(a["lift"].to_numpy()), torch.tensor(b["lift"].to_numpy())
    )


def test_multi_token_word_is_read_at_its_last_token(smollm, minilm):
    for model in (smollm, minilm):
        w = encode_word(model, "The greedy moneylender raised the rate.", word="moneylender")
        assert len(w.word_positions) > 1
        assert w.word_pos == w.word_positions[-1]
        assert "".join(w.str_tokens[p] for p in w.word_positions).strip().lower() == (
            "moneylender" if model is smollm else "money##len##der"
        )


def test_missing_word_and_misplaced_clue_are_named(smollm, minilm):
    with pytest.raises(InterpError, match="'bank' does not occur"):
        encode_word(smollm, "The river was wide.", word="bank")
    with pytest.raises(InterpError, match="put the clue before the word"):
        encode_word(smollm, "The bank of the river.", word="bank", clue="river")
    # a bidirectional model sees the right context, so a later clue is allowed
    w = encode_word(minilm, "The bank of the river.", word="bank", clue="river")
    assert w.clue_pos and w.clue_pos[0] > w.word_pos
    with pytest.raises(InterpError, match="'money' does not occur"):
        encode_word(minilm, "The bank of the river.", word="bank", clue="money")


def test_text_longer_than_the_context(minilm):
    long = "the river bank " + "and so on " * 200
    with pytest.raises(InterpError, match="longer than the model's context of 512"):
        encode_word(minilm, long, word="bank", occurrence=0)
    w = encode_word(minilm, long, word="bank", occurrence=0, truncate=True)
    assert w.truncated and w.n_tokens == 512
    with pytest.raises(InterpError, match="cuts off 'bank'"):
        encode_word(minilm, "so " * 600 + "the river bank", word="bank", truncate=True)


def test_minilm_bidirectional_stripes_find_its_previous_token_head(minilm):
    ids = ordinary_word_ids(minilm)
    words = minilm.tokenizer.convert_ids_to_tokens(ids[:50].tolist())
    assert all(w.isalpha() for w in words)
    probe = repeated_random_tokens(4, 50, d_vocab=minilm.cfg.d_vocab, bos=101, token_ids=ids)
    scores = head_scores(minilm, probe.tokens)
    assert scores["previous_token"].max() > 0.9
    causal = head_scores(minilm, probe.tokens, causal=True)
    # later keys count for an encoder: the bidirectional duplicate score is not the causal one
    assert not torch.allclose(
        torch.tensor(scores["duplicate_token"].to_numpy()),
        torch.tensor(causal["duplicate_token"].to_numpy()),
    )


def test_lab_refuses_a_model_without_a_tokenizer():
    from interp.experiments import pretrained_heads

    with pytest.raises(InterpError, match="induction-2l has no Hugging Face tokenizer"):
        pretrained_heads.analyse(["induction-2l"])


def test_every_model_name_is_checked_before_any_loads(tmp_path, monkeypatch):
    """A bad folder given as a Path, after a good alias, fails before SmolLM2 loads."""
    from interp.experiments import pretrained_heads
    from interp.models import pretrained as weights

    loads = []
    original = weights.load_smollm2
    monkeypatch.setattr(weights, "load_smollm2", lambda **kw: loads.append(kw) or original(**kw))
    with pytest.raises(InterpError, match="not found"):
        pretrained_heads.analyse(["smollm2-135m", tmp_path / "nowhere"])
    assert loads == []


@pytest.mark.notebook
def test_notebook_runs_and_writes_its_lab(lab_run):
    from conftest import check_notebook_output

    check_notebook_output(lab_run("pretrained"), "pretrained")

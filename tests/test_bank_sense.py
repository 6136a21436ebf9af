"""Every number the article prints for the hand-set head, computed by interp."""

import numpy as np
import pytest

from interp import InterpError
from interp.experiments.bank_sense import causal_masking as cm
from interp.experiments.bank_sense import qk_split as qs
from interp.experiments.bank_sense import toy_heads as bs


def r2(x):
    return np.round(np.asarray(x, dtype=float), 2).tolist()


def r4(x):
    return np.round(np.asarray(x, dtype=float), 4).tolist()


def test_a_identity_forward_river_and_money():
    river, money = bs.identity_forward("the river bank"), bs.identity_forward("the money bank")
    assert r2(river["bank_input"]) == [0.5, 0.5, 0.8, 0.2]
    for r in (river, money):
        assert r2(r["weights"]) == [0.26, 0.31, 0.43]
        assert r2(r["unscaled_scores"]) == [0.20, 0.54, 1.18]
        assert r2(r["scaled_scores"]) == [0.10, 0.27, 0.59]
        assert r["scale"] == 2.0
    assert r2(river["mixture"]) == [0.21, 0.52, 0.34, 0.41]
    assert r2(money["mixture"]) == [0.52, 0.21, 0.34, 0.41]
    assert r2(river["residual"]) == [0.71, 1.02, 1.14, 0.61]
    assert r2(money["residual"]) == [1.02, 0.71, 1.14, 0.61]
    # The plain average separates the sentences too: water 0.50, finance 0.17.
    water, finance = bs.AXES.index("water"), bs.AXES.index("finance")
    assert r2(river["plain_average"])[water] == 0.50
    assert r2(river["plain_average"])[finance] == 0.17


def test_a_tables_are_tidy():
    t = bs.bank_weights_table()
    assert list(t.columns) == ["sentence", "source", "unscaled_score", "scaled_score", "weight"]
    assert len(t) == 6
    np.testing.assert_allclose(t.groupby("sentence")["weight"].sum(), 1.0)
    v = bs.identity_forward_table()
    assert set(v["vector"]) == {"bank_input", "mixture", "residual", "plain_average"}


def test_b_score_scale_sweep_sharpens_and_flattens():
    sweep = bs.score_scale_sweep((5, 1, 0.1)).set_index("multiplier")
    # x5 favours bank itself (the highest score), not river.
    assert sweep.loc[5.0, "w[bank]"] > 0.75
    assert sweep.loc[5.0, "w[bank]"] > sweep.loc[1.0, "w[bank]"]
    # x0.1 approaches uniform: entropy close to log(3).
    assert abs(sweep.loc[0.1, "entropy"] - np.log(3)) < 1e-3
    assert sweep["entropy"].is_monotonic_increasing


def test_b_softmax_table():
    t = bs.softmax_table()
    assert np.round(t.iloc[0, 1:].astype(float), 1).tolist() == [86.7, 11.7, 1.6]
    assert np.round(t.iloc[1, 1:].astype(float), 1).tolist() == [66.5, 24.5, 9.0]


def test_b_similarity_and_scaled_dot_tables():
    s = bs.similarity_table()
    assert s["dot"].tolist() == [1.0, 100.0, 0.0, -1.0]
    assert s["cosine"].tolist() == [1.0, 1.0, 0.0, -1.0]
    d = bs.scaled_dot_table()
    assert d["divisor"].unique().tolist() == [8.0]
    assert d["scaled_dot"].tolist() == [0.125, 1.0, 5.0, 12.5]
    spread = bs.dot_product_spread(64, n=100_000, seed=0)
    assert abs(spread["var_dot"] - 64) < 2 and abs(spread["var_scaled"] - 1) < 0.03
    with pytest.raises(InterpError, match="zero vector"):
        bs.similarity_table([((0, 0), (1, 0))])


def test_c_eiffel_tower():
    e = bs.eiffel().set_index("variant")
    w = ["w[the]", "w[Eiffel]", "w[tower]"]
    assert r4(e.loc["raw similarity", w]) == [0.2483, 0.2483, 0.5035]
    assert r4(e.loc["raw similarity", ["mix_structure", "mix_paris"]]) == [0.5035, 0.2483]
    assert r4(e.loc["swap query", w]) == [0.2483, 0.5035, 0.2483]
    assert r4(e.loc["swap query", ["mix_structure", "mix_paris"]]) == [0.2483, 0.5035]
    assert r4(e.loc["swap query and values", w]) == [0.2483, 0.5035, 0.2483]
    assert r4(e.loc["swap query and values", ["mix_structure", "mix_paris"]]) == [0.5035, 0.2483]
    assert r4(e.loc["swap query", ["resid_structure", "resid_paris"]]) == [1.2483, 0.5035]
    q = bs.eiffel_queries()
    assert q.to_numpy().tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]


def test_c_scores_split_into_query_and_key_pieces():
    """The article's hand numbers, from the split: bank's row sums to its unscaled dot products
    [0.20, 0.54, 1.18] (scaled [0.10, 0.27, 0.59]), river's share is water x water plus
    generic x generic; the swap query's 0.7071 on Eiffel is tower's structure coordinate
    meeting Eiffel's identity coordinate, a pair that scores 0 under raw similarity."""
    t = qs.article_splits()
    split, sides = t["score_split"], t["score_split_sides"]
    for sentence, clue in (("the river bank", "water"), ("the money bank", "finance")):
        g = split[split["sentence"] == sentence]
        per = g.groupby("source", sort=False)
        assert list(per.groups) == ["the", sentence.split()[1], "bank"]
        assert r2(per["unscaled"].sum()) == [0.20, 0.54, 1.18]
        assert r2(per["value"].sum()) == [0.10, 0.27, 0.59]
        pair = g.set_index(["source", "query_coordinate", "key_coordinate"])["unscaled"]
        assert r2([pair[(sentence.split()[1], clue, clue)]]) == [0.50]
        assert r2([pair[(sentence.split()[1], "generic", "generic")]]) == [0.04]
        assert r2([pair[("bank", "structure", "structure")]]) == [0.64]
        off = g[g["query_coordinate"] != g["key_coordinate"]]
        assert (off["value"].abs() < 1e-7).all()  # identity projections: only like meets like
        s = sides[sides["sentence"] == sentence]
        # float64 sums of the same pieces (of order 1) in two orders: 1e-7 is far above their
        # rounding (about 1e-16)
        for side in ("query", "key"):  # each side's pieces sum to the score
            by = s[s["side"] == side].groupby("source", sort=False)
            np.testing.assert_allclose(by["value"].sum(), by["score"].first(), atol=1e-7)
    swap = split[split["sentence"] == "the Eiffel tower (swap query)"]
    live = swap[swap["value"].abs() > 1e-7]
    assert live[["source", "query_coordinate", "key_coordinate"]].values.tolist() == [
        ["Eiffel", "structure", "Paris identity"]
    ]
    assert r4(live["value"]) == [0.7071] and r4(live["unscaled"]) == [1.0]
    raw = split[split["sentence"] == "the Eiffel tower (raw similarity)"]
    eiffel = raw[(raw["source"] == "Eiffel")]
    assert (eiffel["value"].abs() < 1e-7).all()  # tower . Eiffel = 0: no pair scores
    weights = np.exp(swap.groupby("source", sort=False)["value"].sum())
    assert r4(weights / weights.sum()) == [0.2483, 0.5035, 0.2483]  # the article's weights


def test_d_matching_directions_water_preset():
    t = bs.matching_directions("water").set_index("token")
    assert t.loc["bank", "query"] == "[0.0, 3.0, 0.0]"
    assert t.loc["river", "key"] == "[0.0, 1.0, 0.0]"
    assert np.round(t["score"], 3).tolist() == [0.0, 1.732, 0.866]
    assert np.round(t["weight"] * 100, 1).tolist() == [11.1, 62.6, 26.3]


def test_d_other_presets_and_custom_wq():
    fin = bs.matching_directions("finance", sentence="the money bank").set_index("token")
    assert fin["weight"].idxmax() == "money"
    zero = bs.matching_directions(Wq=np.zeros((4, 3)))
    np.testing.assert_allclose(zero["weight"], 1 / 3)
    with pytest.raises(InterpError, match="unknown preset"):
        bs.matching_directions("gravy")
    with pytest.raises(InterpError, match=r"\[4, 3\]"):
        bs.matching_directions(Wq=np.zeros((3, 3)))
    with pytest.raises(InterpError, match="unknown token 'banc'"):
        bs.matching_directions("water", sentence="the river banc")


def test_e_null_space_example_is_computed():
    ns = bs.null_space_example()
    assert ns["rank"] == 2 and ns["nullity"] == 1
    # float64 (numpy SVD) on entries of order 1: 1e-12 is about 1e4 ulps
    np.testing.assert_allclose(ns["n"], [1, 1, -1], atol=1e-12)
    np.testing.assert_allclose(ns["Mn"], [0, 0], atol=1e-12)
    np.testing.assert_allclose(ns["Me"], [4, 5])
    np.testing.assert_allclose(ns["M_e_plus_n"], [4, 5], atol=1e-12)
    np.testing.assert_allclose(ns["e_plus_n"], [2, 3, 2], atol=1e-12)


def test_i_causal_mask():
    d = cm.causal_mask_demo()
    assert np.all(d["future_weight_causal"] == 0)
    assert d["future_weight_zero_mask"][0] > 0.5  # a 0 "mask" still gives the future a share
    assert np.all(d["self_weight_causal"] > 0)
    # bank is last in "the river bank": its row is unchanged by the mask (float64, weights of
    # order 1: 1e-12 is about 1e4 ulps).
    np.testing.assert_allclose(d["causal"][-1], d["bidirectional"][-1], atol=1e-12)
    c = cm.causal_comparison().set_index(["sentence", "mode"])
    assert c.loc[("the bank river", "causal"), "w[river]"] == 0.0
    assert c.loc[("the bank river", "bidirectional"), "w[river]"] > 0.3


def test_i_tired_cat_patterns():
    t = cm.tired_cat()
    assert t["tokens"] == ["the", "tired", "cat", "finally", "slept"]
    C = t["causal"]
    assert np.all(C[np.triu_indices(5, 1)] == 0)
    np.testing.assert_allclose(C.sum(1), 1.0)
    np.testing.assert_allclose(C[-1], t["bidirectional"][-1])  # the last row sees everything
    np.testing.assert_allclose(C[1], [0.1, 0.9, 0, 0, 0])  # renormalised over allowed keys


def test_lab_output(lab_run):
    """The lab's one run (its notebook): tables, the report's widgets and figures."""
    import pandas as pd

    out = lab_run("bank-sense")
    sense = pd.read_csv(out / "sense_classifier.csv")
    assert sense["prediction"].tolist()[:2] == ["water", "finance"]
    split = pd.read_csv(out / "score_split.csv")
    assert r2(split.groupby(["sentence", "source"], sort=False)["unscaled"].sum().head(3)) == [
        0.20,
        0.54,
        1.18,
    ]
    html = (out / "report.html").read_text()
    assert "river 0.27 = water x water 0.25 + generic x generic 0.02" in html
    assert html.count("var CircuitsVis") == 1 and html.count('class="cv-widget"') == 6
    assert "unpkg.com" not in html  # nothing loads from a CDN
    assert sorted(p.stem for p in (out / "figures").iterdir()) == [
        "attention_identity",
        "attention_trained",
        "sgd_trace",
    ]


@pytest.mark.browser
def test_lab_report_renders_offline(lab_run, chromium_paths):
    from browser import render_page

    result = render_page(lab_run("bank-sense") / "report.html", chromium_paths)
    assert result["widgets"] == 6 and result["rendered"] == 6, result
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert len(result["figures"]) == 3 and result["severe_logs"] == []


def test_data_files_come_from_interp_data(tmp_path, monkeypatch):
    """$INTERP_DATA moves every shipped data file, the toy experiments' included."""
    import shutil

    from interp import InterpError
    from interp.core.paths import data_dir

    src = data_dir() / "tired_cat_attention.csv"
    monkeypatch.setenv("INTERP_DATA", str(tmp_path))
    with pytest.raises(InterpError, match="not found at"):
        cm.tired_cat()
    shutil.copy(src, tmp_path / "tired_cat_attention.csv")
    assert len(cm.tired_cat()["tokens"]) == 5


@pytest.mark.notebook
def test_notebook_runs_and_writes_its_lab(lab_run):
    from conftest import check_notebook_output

    check_notebook_output(lab_run("bank-sense"), "bank-sense")

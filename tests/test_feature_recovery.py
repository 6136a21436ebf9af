"""The feature-recovery task recovers the known solution and passes its intervention checks.

The task's pieces are tested on a fresh seed-0 run; the lab's own outputs come
from its notebook's run (conftest.lab_run).
"""

import pandas as pd
import pytest

from interp import InterpError
from interp.experiments.feature_recovery import feature_task as fr


@pytest.fixture(scope="module")
def result():
    return fr.run(0)


def test_held_out_beats_baselines(result):
    h = result.held_out
    assert h["accuracy"] > 0.99  # attention argmax lands on the wanted source
    # far below both baselines: predicting zero (~1) and uniform attention (~0.75)
    assert h["mse"] < 0.05 * h["mse_uniform_baseline"]


def test_maps_recover_the_known_features(result):
    assert all(fr.recovered(result.alignment).values())
    a = result.alignment.set_index("feature")
    assert a.loc[["want_A", "want_B", "want_C"], "q_in_row_space"].min() > 0.5
    assert a.loc[["pay_0", "pay_1", "pay_2"], "v_in_row_space"].min() > 0.95


def test_interventions_behave_as_predicted(result):
    t = result.interventions.set_index("intervention")
    switch = t.loc["switch want (relevant)"]
    assert switch["accuracy_on_new_target"] > 0.99 and switch["d_attention"] > 1.0
    null = t.loc["random null(W_Q^T) direction"]
    assert null["d_query"] < 1e-5  # exactly invisible to the query map
    both = t.loc["random null(W_Q^T) & null(W_K^T) direction"]
    assert both["d_query"] < 1e-5 and both["d_attention"] < 1e-5 and both["d_receiver_value"] > 0.1
    pay = t.loc["+2 pay_0 (irrelevant to Q)"]
    assert pay["d_attention"] < 0.01 and pay["d_receiver_value"] > 1.0
    typ = t.loc["+1 type_A (~null for W_Q, read by fixed W_K)"]
    assert typ["d_receiver_key"] == pytest.approx(1.0) and typ["d_attention"] > 0.1


def test_determinism_and_bad_input():
    a, b = fr.train(3, steps=20), fr.train(3, steps=20)
    assert (a.W_Q == b.W_Q).all()
    with pytest.raises(InterpError, match="at least one seed"):
        fr.seed_summary(())


def test_lab_output(lab_run):
    out = lab_run("feature-recovery")
    seeds = pd.read_csv(out / "seeds.csv")
    assert seeds["seed"].tolist() == [0, 1, 2] and (seeds["accuracy"] > 0.99).all()
    probe = pd.read_csv(out / "null_space_probe.csv")
    worst = probe.groupby("space")["d_query"].max()
    assert worst["null_space"] < 1e-5 < 0.5 < worst["row_space"]
    assert set(probe["label"]) == {"L1H1"}
    q = pd.read_csv(out / "query_map_arithmetic.csv").iloc[0]
    assert q["nullity"] == q["d_in"] - q["d_out"] == 12_288 - 128
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "held_out_accuracy.svg",
        "interventions.svg",
        "null_space_probe.svg",
    ]


@pytest.mark.browser
def test_lab_report_renders_offline(lab_run, chromium_paths):
    from browser import render_page

    result = render_page(lab_run("feature-recovery") / "report.html", chromium_paths)
    assert result["widgets"] == 0 and len(result["figures"]) == 3
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert result["severe_logs"] == []


@pytest.mark.notebook
def test_notebook_runs_and_writes_its_lab(lab_run):
    from conftest import check_notebook_output

    check_notebook_output(lab_run("feature-recovery"), "feature-recovery")

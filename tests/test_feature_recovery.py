"""The feature-recovery lab recovers the known solution and passes its intervention checks."""

import pytest

from interp import InterpError
from interp.labs import feature_recovery as fr


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


def test_seeds_and_determinism():
    s = fr.seed_summary((0, 1))
    assert (s["accuracy"] > 0.99).all()
    a, b = fr.train(3, steps=20), fr.train(3, steps=20)
    assert (a.W_Q == b.W_Q).all()
    with pytest.raises(InterpError, match="at least one seed"):
        fr.seed_summary(())


def test_cli_writes_report(tmp_path):
    from conftest import run_cli

    proc = run_cli("lab", "feature-recovery", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "held-out accuracy 1.000" in proc.stdout
    assert (tmp_path / "report.html").is_file() and (tmp_path / "alignment.csv").is_file()
    bad = run_cli("lab", "feature-recovery", "--out", str(tmp_path), "--format", "md")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1

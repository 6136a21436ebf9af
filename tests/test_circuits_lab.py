"""The circuits lab on the shipped induction model, read from its notebook's one run.

Ground truth: every edge patched exactly. The estimates are scored against it
(ROC AUC, Spearman), the found circuit is the one the exact edges give, it
holds on held-out prompts, and the report renders offline with its figures.
"""

import pandas as pd
import pytest


@pytest.fixture(scope="module")
def out(lab_run):
    return lab_run("circuits")


def table(out, name):
    return pd.read_csv(out / f"{name}.csv")


def test_every_edge_is_patched_exactly_and_scored(out):
    scores = table(out, "edge_scores")
    assert len(scores) == 42 and scores["exact"].notna().all()
    assert {"eap", "eap_ig", "exact", "receiver_input"} <= set(scores.columns)
    ag = table(out, "agreement")
    auc = ag[ag["measure"].str.startswith("ROC AUC")].set_index("estimator")["value"]
    assert auc["eap-ig"] >= auc["eap"] - 1e-9 and auc["eap-ig"] > 0.9


def test_the_circuit_is_what_the_exact_edges_say(out):
    circuit = table(out, "circuit")
    labels = set(circuit["label"])
    # The induction circuit under this corruption (the first copy replaced): L0H1 moves the
    # previous token (its value reads the token embedding), L1H1's keys read L0H1, its value
    # copies the token, and it writes the answer. Positional edges carry nothing here.
    assert {"L0H1 -> L1H1.k", "embed -> L1H1.v", "L1H1 -> logits"} <= labels
    assert not any(label.startswith("pos_embed") for label in labels)
    summary = table(out, "circuit_summary").iloc[0]
    assert summary["faithfulness"] >= 0.8 and summary["n_edges"] == len(circuit)
    held = table(out, "held_out").iloc[0]
    assert held["faithfulness"] >= 0.8  # other prompts of the same task
    exact = table(out, "edge_scores").set_index("label")["exact"]
    top = exact.abs().nlargest(len(circuit)).index
    assert set(top) <= labels | {label for label in top if abs(exact[label]) < 0.05}


def test_curves_and_paths(out):
    curves = table(out, "curves")
    assert set(curves["kind"]) == {"eap", "eap-ig", "random"}
    top = curves[curves["kind"] == "eap-ig"].set_index("n_edges")["faithfulness"]
    assert top[42] == pytest.approx(1.0)
    rand = curves[curves["kind"] == "random"].groupby("n_edges")["faithfulness"].median()
    assert top[4] > rand[4] + 0.5
    paths = table(out, "path_patching")
    k = paths[paths["receiver"] == "L1H1.k"].set_index("sender")["normalized"]
    assert k["L0H1"] == k.abs().max()  # the previous-token head is what L1H1's keys read


def test_edges_and_paths_are_noising_and_say_so(out):
    """Edge effects and path patching send the corrupted run's outputs into the clean run."""
    import json

    meta = json.loads((out / "path_patching.meta.json").read_text())["meta"]
    assert meta["direction"] == "noising" and meta["analysis"] == "path_patch"
    assert "Direction: noising" in (out / "report.html").read_text()


@pytest.mark.browser
def test_report_renders_offline(out, chromium_paths):
    from browser import render_page

    result = render_page(out / "report.html", chromium_paths)
    assert set(result["figures"]) == {
        "circuit",
        "faithfulness",
        "estimate_vs_exact",
        "path_patching",
    }
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert result["severe_logs"] == []


@pytest.mark.notebook
def test_notebook_runs_and_writes_its_lab(lab_run):
    from conftest import check_notebook_output

    check_notebook_output(lab_run("circuits"), "circuits")

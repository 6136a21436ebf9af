"""`interp lab bank-sense`: the real console script, its files, and its one-line errors."""

import pandas as pd
import pytest
from conftest import run_cli


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab") / "bs"
    return run_cli("lab", "bank-sense", "--out", str(out)), out


def test_lab_bank_sense_writes_report_and_tables(lab_run):
    proc, out = lab_run
    assert proc.returncode == 0, proc.stderr
    assert "weights [0.26, 0.31, 0.43]" in proc.stdout
    html = (out / "report.html").read_text()
    assert html.count("var CircuitsVis") == 1  # the bundle is inlined once
    assert html.count('class="cv-widget"') >= 6
    assert "unpkg.com" not in html  # nothing loads from a CDN
    sense = pd.read_csv(out / "sense_classifier.csv")
    assert sense["prediction"].tolist()[:2] == ["water", "finance"]
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temp files


def test_cli_error_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    proc = run_cli("lab", "bank-sense", "--out", str(f))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "is a file" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_unknown_lab_is_usage_error():
    proc = run_cli("lab", "nope")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.mark.browser
def test_lab_report_renders_offline(lab_run, chromium_paths):
    from browser import render_page

    proc, out = lab_run
    assert proc.returncode == 0, proc.stderr
    result = render_page(out / "report.html", chromium_paths)
    assert result["widgets"] >= 6
    assert result["rendered"] == result["widgets"], result
    assert result["severe_logs"] == []

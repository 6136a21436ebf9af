"""`interp lab induction` and `interp train induction` through the real console script."""

import pandas as pd
import pytest
from conftest import run_cli


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    out = tmp_path_factory.mktemp("ind") / "report"
    return run_cli("lab", "induction", "--out", str(out)), out


def test_lab_writes_report_and_tables(lab):
    proc, out = lab
    assert proc.returncode == 0, proc.stderr
    assert "induction head L1H" in proc.stdout
    html = (out / "report.html").read_text()
    assert html.count("var CircuitsVis") == 1
    abl = pd.read_csv(out / "ablation.csv")
    assert list(abl.columns[:3]) == ["layer", "head", "label"]


@pytest.mark.browser
def test_lab_report_renders_offline(lab, chromium_paths):
    from browser import render_page

    proc, out = lab
    result = render_page(out / "report.html", chromium_paths)
    assert result["widgets"] == 2 and result["rendered"] == 2, result
    assert result["severe_logs"] == []


@pytest.mark.parametrize("fmt", ["parquet", "md", "json"])
def test_formats(tmp_path, fmt):
    proc = run_cli("lab", "induction", "--out", str(tmp_path), "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / f"ablation.{fmt}").is_file()


def test_bad_checkpoint_is_one_line(tmp_path):
    proc = run_cli(
        "lab", "induction", "--out", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "missing")
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "not found" in proc.stderr


def test_train_cli_writes_checkpoint(tmp_path):
    out = tmp_path / "ck"
    proc = run_cli("train", "induction", "--out", str(out), "--steps", "100", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    bad = run_cli("train", "induction", "--out", str(out / "config.json"), "--steps", "2")
    assert bad.returncode == 2 and "is a file" in bad.stderr

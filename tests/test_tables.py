"""interp.export: format by extension, full precision where it matters, valid JSON."""

import json
import math

import pandas as pd
import pytest

import interp
from interp import InterpError


@pytest.fixture
def df():
    return pd.DataFrame(
        {
            "layer": [0, 1, 1],
            "head": [1, 0, 1],
            "label": ["L0H1", "L1H0", "L1H1"],
            "delta": [0.1234567890123456, -2.0000000001, float("nan")],
            "ratio": [float("inf"), 1.0, -float("inf")],
        }
    )


def test_csv_parquet_json_keep_full_precision(tmp_path, df):
    for ext in ("csv", "parquet", "json"):
        path = interp.export(df, tmp_path / f"t.{ext}")
        back = {
            "csv": pd.read_csv,
            "parquet": pd.read_parquet,
            "json": lambda p: pd.DataFrame(json.loads(p.read_text())),
        }[ext](path)
        assert back["delta"].tolist()[:2] == df["delta"].tolist()[:2], ext
        assert math.isnan(back["delta"].iloc[2]), ext


def test_json_is_valid_for_nan_and_infinity(tmp_path, df):
    text = interp.export(df, tmp_path / "t.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    rows = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert rows[2]["delta"] is None and rows[0]["ratio"] is None and rows[1]["ratio"] == 1.0


def test_markdown_and_html_round(tmp_path, df):
    md = interp.export(df, tmp_path / "t.md").read_text()
    assert "0.1235" in md and md.startswith("|") and "layer" in md.splitlines()[0]
    html = interp.export(df, tmp_path / "t.html").read_text()
    assert "background-color" in html and "0.1235" in html


def test_bad_paths_fail_before_writing(tmp_path, df):
    with pytest.raises(InterpError, match="unknown output extension '.xlsx'"):
        interp.export(df, tmp_path / "t.xlsx")
    with pytest.raises(InterpError, match="does not exist"):
        interp.export(df, tmp_path / "nope" / "t.csv")
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(InterpError, match="is a folder"):
        interp.export(df, tmp_path / "folder.csv")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InterpError, match="is a file, not a folder"):
        interp.export(df, tmp_path / "afile" / "t.csv")
    with pytest.raises(InterpError, match="not writable"):
        interp.export(df, "/proc/t.csv")
    with pytest.raises(InterpError, match="needs a pandas DataFrame"):
        interp.export([1, 2], tmp_path / "t.csv")

"""interp.export: format by extension, full precision where it matters, atomic."""

import json

import pandas as pd
import pytest

import interp
from interp import InterpError


@pytest.fixture
def df():
    return pd.DataFrame(
        {
            "layer": [0, 1],
            "head": [1, 0],
            "label": ["L0H1", "L1H0"],
            "delta": [0.1234567890123456, -2.0000000001],
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
        assert back["delta"].tolist() == df["delta"].tolist(), ext


def test_markdown_and_html_round(tmp_path, df):
    md = interp.export(df, tmp_path / "t.md").read_text()
    assert "0.1235" in md and md.startswith("|") and "layer" in md.splitlines()[0]
    html = interp.export(df, tmp_path / "t.html").read_text()
    assert "background-color" in html and "0.1235" in html


def test_bad_paths(tmp_path, df):
    with pytest.raises(InterpError, match="unknown output extension '.xlsx'"):
        interp.export(df, tmp_path / "t.xlsx")
    with pytest.raises(InterpError, match="does not exist"):
        interp.export(df, tmp_path / "nope" / "t.csv")

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
            "effect": [0.1234567890123456, -2.0000000001, float("nan")],
            "ratio": [float("inf"), 1.0, -float("inf")],
        }
    )


def test_csv_parquet_json_keep_full_precision(tmp_path, df):
    for ext in ("csv", "parquet", "json"):
        path = interp.export(df, tmp_path / f"t.{ext}")
        back = {
            "csv": pd.read_csv,
            "parquet": pd.read_parquet,
            "json": lambda p: pd.DataFrame(json.loads(p.read_text())["rows"]),
        }[ext](path)
        assert back["effect"].tolist()[:2] == df["effect"].tolist()[:2], ext
        assert math.isnan(back["effect"].iloc[2]), ext


def test_json_is_valid_for_nan_and_infinity(tmp_path, df):
    text = interp.export(df, tmp_path / "t.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    rows = doc["rows"]
    assert rows[2]["effect"] is None and rows[0]["ratio"] is None and rows[1]["ratio"] == 1.0


def test_markdown_and_html_round(tmp_path, df):
    md = interp.export(df, tmp_path / "t.md").read_text()
    caption, blank, header = md.splitlines()[:3]
    assert caption.startswith("Table: ") and blank == ""  # a pandoc-style caption line
    assert "0.1235" in md and header.startswith("|") and "layer" in header
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


def _described(df):
    df = df.copy()
    df.attrs.update(
        method="exact",
        ablation="zero",
        metric="loss",
        unit="nats (mean next-token cross-entropy)",
        model="induction-2l",
        positions=[3, -1],
        seed=7,
    )
    return df


def test_every_format_carries_how_the_table_was_computed(tmp_path, df):
    described = _described(df)
    for ext in ("csv", "parquet", "json"):
        path = interp.export(described, tmp_path / f"t.{ext}", meta={"lab": "x", "seed": 99})
        back = interp.read_table(path)
        for key in ("method", "ablation", "metric", "unit", "model", "positions", "seed"):
            assert back.attrs[key] == described.attrs[key], (ext, key)
        assert back.attrs["lab"] == "x"  # extra keys fill gaps; the table's own seed wins
        assert back.attrs["interp_version"] == interp.__version__
        assert back["label"].tolist() == df["label"].tolist()
    side = json.loads((tmp_path / "t.meta.json").read_text())
    assert side["table"] == "t.csv" and side["meta"]["unit"].startswith("nats")
    for ext in ("md", "html"):
        text = interp.export(described, tmp_path / f"t.{ext}").read_text()
        assert "method: exact; ablation: zero; metric: loss; unit: nats" in text, ext
        assert "seed: 7" in text and f"interp {interp.__version__}" in text, ext
    assert "<caption>" in (tmp_path / "t.html").read_text()


def test_floats_are_written_with_the_digits_they_need(tmp_path):
    values = [0.1, 1 / 3, 2.5e-12, 123456.789, -0.0]
    path = interp.export(pd.DataFrame({"x": values}), tmp_path / "f.csv")
    lines = path.read_text().splitlines()[1:]
    assert lines[0] == "0.1" and lines[3] == "123456.789"  # not 0.10000000000000001
    assert [float(x) for x in lines] == values  # and every value round-trips exactly


def test_a_csv_changed_after_export_is_not_believed(tmp_path, df):
    path = interp.export(_described(df), tmp_path / "t.csv")
    path.write_text(path.read_text().replace("L0H1", "L9H9"))
    with pytest.raises(InterpError, match="describes another version of t.csv"):
        interp.read_table(path)
    with pytest.raises(InterpError, match="read_table reads"):
        interp.read_table(interp.export(df, tmp_path / "t.md"))
    with pytest.raises(InterpError, match="not found"):
        interp.read_table(tmp_path / "none.csv")


def test_styled_html_is_byte_identical_between_runs(tmp_path, df):
    a = interp.export(_described(df), tmp_path / "a.html").read_bytes()
    b = interp.export(_described(df), tmp_path / "b.html").read_bytes()
    assert a == b

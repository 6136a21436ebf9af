"""`interp ablate` / `interp patch`: real console script, exported tables, one-line errors."""

import pandas as pd
import pytest
from conftest import run_cli


def test_ablate_exports_every_format(tmp_path):
    for ext in ("csv", "md", "json", "parquet", "html"):
        out = tmp_path / f"t.{ext}"
        proc = run_cli("ablate", "--model", "induction-2l", "--out", str(out), "--repeated", "20")
        assert proc.returncode == 0, proc.stderr
        assert out.is_file()
    df = pd.read_csv(tmp_path / "t.csv")
    assert list(df.columns) == ["layer", "head", "label", "clean", "ablated", "delta"]
    assert "L1H1" in proc.stdout


def test_ablate_heads_method_and_tokens_file(tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("0 5 6 7 5 6 7\n0 9 8 3 9 8 3\n")
    out = tmp_path / "t.csv"
    proc = run_cli(
        "ablate", "--out", str(out), "--tokens", str(f), "--heads", "L1H1,L0H1", "--method", "mean"
    )
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(out)["label"].tolist() == ["L0H1", "L1H1"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "{d}/missing/t.csv"], "does not exist"),
        (["--out", "{d}/t.xlsx"], "unknown output extension"),
        (["--out", "{d}/t.csv", "--method", "median"], "unknown method"),
        (["--out", "{d}/t.csv", "--metric", "kl"], "unknown metric"),
        (["--out", "{d}/t.csv", "--heads", "L9H0"], "out of range"),
        (["--out", "{d}/t.csv", "--metric", "logit-diff"], "needs --logit-diff"),
        (["--out", "{d}/t.csv", "--model", "nope"], "unknown model 'nope'"),
    ],
)
def test_ablate_errors_are_one_line(tmp_path, args, message):
    proc = run_cli("ablate", *[a.format(d=tmp_path) for a in args])
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert not list(tmp_path.glob("t.*"))


def test_patch(tmp_path):
    out = tmp_path / "p.csv"
    proc = run_cli(
        "patch",
        "--clean",
        "0 5 6 7 5 6",
        "--corrupted",
        "0 5 6 7 8 9",
        "--logit-diff",
        "7,9",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "normalized" in pd.read_csv(out).columns
    bad = run_cli(
        "patch", "--clean", "0 5 6", "--corrupted", "0 5", "--logit-diff", "7,9", "--out", str(out)
    )
    assert bad.returncode == 2 and "same length" in bad.stderr


def test_interrupted_sweep_leaves_no_file(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the sweep: exit 130, nothing written (tables are exported at the end)."""
    import interp.analysis.ablation as ablation
    from interp.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ablation, "sweep", interrupted)
    out = tmp_path / "t.csv"
    assert main(["ablate", "--out", str(out)]) == 130
    assert not out.exists() and not list(tmp_path.iterdir())
    assert "interrupted" in capsys.readouterr().err

"""The command line: real console-script runs, and every bad input answered in one line, exit 2.

Error cases run ``interp.cli.main`` in-process (the same code the console
script runs, without starting an interpreter per case); a few cases run the
installed script itself. Each error case checks that nothing was written.
"""

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

import interp
from interp.cli import main


def one_line_error(capsys, argv, message, code=2):
    rc = main(argv) if code != "usage" else None
    if code == "usage":
        with pytest.raises(SystemExit) as e:
            main(argv)
        rc = e.value.code
        code = 2
    err = capsys.readouterr().err
    assert rc == code, err
    assert message in err, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err


def test_ablate_and_patch_through_the_console_script(tmp_path):
    out = tmp_path / "t.csv"
    proc = run_cli("ablate", "--model", "induction-2l", "--out", str(out), "--repeated", "20")
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(out)
    assert list(df.columns) == ["layer", "head", "label", "clean", "ablated", "effect"]
    assert "L1H1" in proc.stdout and "forward passes (resume-after-block path)" in proc.stdout
    pout = tmp_path / "p.csv"
    proc = run_cli(
        "patch",
        "--clean",
        "0 5 6 7 5 6",
        "--corrupted",
        "0 5 6 7 8 9",
        "--logit-diff",
        "7,9",
        "--out",
        str(pout),
        "--positions",
        "4,5",
    )
    assert proc.returncode == 0, proc.stderr
    assert "normalized" in pd.read_csv(pout).columns


def test_ablate_tokens_file_heads_method_and_formats(tmp_path, capsys):
    f = tmp_path / "ids.txt"
    f.write_text("0 5 6 7 5 6 7\n0 9 8 3 9 8 3\n")
    for ext in ("csv", "json", "md", "html", "parquet"):
        out = tmp_path / f"t.{ext}"
        assert (
            main(
                [
                    "ablate",
                    "--out",
                    str(out),
                    "--tokens",
                    str(f),
                    "--heads",
                    "L1H1,L0H1",
                    "--ablation",
                    "mean",
                    "--top",
                    "0",
                ]
            )
            == 0
        )
        assert out.is_file()
    assert pd.read_csv(tmp_path / "t.csv")["label"].tolist() == ["L0H1", "L1H1"]
    npy = tmp_path / "ids.npy"
    np.save(npy, np.array([[0, 5, 6, 7, 5, 6, 7]], dtype=np.int64))
    assert (
        main(["ablate", "--out", str(tmp_path / "n.csv"), "--tokens", str(npy), "--top", "0"]) == 0
    )


def test_attribute_and_scores(tmp_path, capsys):
    out = tmp_path / "a.csv"
    assert (
        main(["attribute", "--out", str(out), "--repeated", "20", "--verify", "2", "--top", "0"])
        == 0
    )
    df = interp.read_table(out)
    assert df["exact"].notna().sum() == 2 and df["estimate"].notna().all()
    assert df.attrs["ablation"] == "zero" and df.attrs["method"] == "attribution"
    assert df.attrs["metric"] == "loss"
    assert df.attrs["inputs"] == "--repeated 20" and df.attrs["model"] == "induction-2l"
    assert (
        main(["ablate", "--first-order", "--out", str(out), "--repeated", "20", "--top", "0"]) == 0
    )
    assert interp.read_table(out)["exact"].isna().all()
    for convention in ("interp", "transformer_lens", "arena"):
        sout = tmp_path / f"s-{convention}.csv"
        assert main(["scores", "--out", str(sout), "--convention", convention]) == 0
    s = {
        c: pd.read_csv(tmp_path / f"s-{c}.csv").set_index("label")
        for c in ("interp", "transformer_lens", "arena")
    }
    assert s["interp"].loc["L1H1", "induction"] > s["transformer_lens"].loc["L1H1", "induction"]
    assert "best induction head: L1H1" in capsys.readouterr().out


@pytest.fixture
def files(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.csv").mkdir()
    np.save(tmp_path / "float.npy", np.array([[0.0, 5.5, 6.2]]))
    np.save(tmp_path / "bool.npy", np.array([[True, False]]))
    np.save(tmp_path / "obj.npy", np.array([[0, "a"]], dtype=object), allow_pickle=True)
    (tmp_path / "ragged.txt").write_text("0 1 2\n0 1\n")
    (tmp_path / "words.txt").write_text("0 a b\n")
    return tmp_path


ERRORS = [
    (["ablate", "--out", "{d}/missing/t.csv"], "does not exist"),
    (["ablate", "--out", "{d}/t.xlsx"], "unknown output extension"),
    (["ablate", "--out", "{d}/folder.csv"], "is a folder"),
    (["ablate", "--out", "{d}/afile/t.csv"], "is a file, not a folder"),
    (["ablate", "--out", "/proc/t.csv"], "not writable"),
    (["ablate", "--out", "{d}/t.csv", "--heads", "L9H0"], "out of range"),
    (["ablate", "--out", "{d}/t.csv", "--heads", ""], "empty label"),
    (["ablate", "--out", "{d}/t.csv", "--heads", "L1H1,,L0H0"], "empty label"),
    (["ablate", "--out", "{d}/t.csv", "--metric", "logit-diff"], "needs --logit-diff"),
    (["ablate", "--out", "{d}/t.csv", "--logit-diff", "5,6"], "only with --metric logit-diff"),
    (
        ["ablate", "--out", "{d}/t.csv", "--metric", "logit-diff", "--logit-diff", "5,5"],
        "same token twice",
    ),
    (
        ["ablate", "--out", "{d}/t.csv", "--metric", "logit-diff", "--logit-diff", "5"],
        "ANSWER,WRONG",
    ),
    (
        ["ablate", "--out", "{d}/t.csv", "--metric", "logit-diff", "--logit-diff", "5,999"],
        "outside the vocabulary",
    ),
    (["ablate", "--out", "{d}/t.csv", "--positions", "a,b"], "comma-separated integers"),
    (["ablate", "--out", "{d}/t.csv", "--positions", "400"], "out of range"),
    (["ablate", "--out", "{d}/t.csv", "--prompt", ""], "empty prompt"),
    (["ablate", "--out", "{d}/t.csv", "--prompt", "   "], "empty prompt"),
    (["ablate", "--out", "{d}/t.csv", "--tokens", "{d}/float.npy"], "not integer token ids"),
    (["ablate", "--out", "{d}/t.csv", "--tokens", "{d}/bool.npy"], "holds booleans"),
    (["ablate", "--out", "{d}/t.csv", "--tokens", "{d}/obj.npy"], "holds Python objects"),
    (["ablate", "--out", "{d}/t.csv", "--tokens", "{d}/ragged.txt"], "different lengths"),
    (["ablate", "--out", "{d}/t.csv", "--tokens", "{d}/words.txt"], "integer token ids"),
    (["ablate", "--out", "{d}/t.csv", "--tokens", "{d}/none.npy"], "not found"),
    (  # the file is read before the model loads: a missing model is not reached
        ["scores", "--out", "{d}/t.csv", "--model", "{d}/nowhere", "--tokens", "{d}/none.npy"],
        "--tokens file",
    ),
    (["ablate", "--out", "{d}/t.csv", "--model", "nope"], "unknown model 'nope'"),
    (["ablate", "--out", "{d}/t.csv", "--model", "{d}/nowhere"], "not found"),
    (["ablate", "--out", "{d}/t.csv", "--model", "{d}/afile"], "is a file"),
    (["ablate", "--out", "{d}/t.csv", "--verify", "3"], "--verify goes with --first-order"),
    (
        [
            "patch",
            "--clean",
            "0 5 6",
            "--corrupted",
            "0 5",
            "--logit-diff",
            "7,9",
            "--out",
            "{d}/p.csv",
        ],
        "same length",
    ),
    (
        ["patch", "--clean", "", "--corrupted", "0 5", "--logit-diff", "7,9", "--out", "{d}/p.csv"],
        "empty clean prompt",
    ),
    (
        ["attribute", "--out", "{d}/a.csv", "--ablation", "patch", "--prompt", "0 1 2"],
        "needs --prompt (clean) and --corrupted",
    ),
    (
        ["attribute", "--out", "{d}/a.csv", "--corrupted", "0 1 2"],
        "--corrupted is for --ablation patch",
    ),
    (
        [
            "attribute",
            "--out",
            "{d}/a.csv",
            "--ablation",
            "patch",
            "--prompt",
            "0 1",
            "--corrupted",
            "0 2",
        ],
        "needs --metric logit-diff",
    ),
    (
        [
            "attribute",
            "--out",
            "{d}/a.csv",
            "--ablation",
            "patch",
            "--prompt",
            "0 1 2",
            "--corrupted",
            "0 1",
            "--metric",
            "logit-diff",
            "--logit-diff",
            "3,4",
        ],
        "same length",
    ),
    (["lab", "bank-sense", "--out", "{d}/afile"], "is a file"),
    (["lab", "bank-sense", "--out", "{d}/afile/x"], "lies under the file"),
    (["lab", "bank-sense", "--out", "/proc/x"], "not writable"),
    (["lab", "induction", "--model", "a", "--model", "b"], "pass --model once"),
    (["lab", "feature-recovery", "--model", "induction-2l"], "builds its own models"),
    (["lab", "pretrained", "--model", "nope", "--out", "{d}/o"], "unknown model 'nope'"),
    (["train", "induction", "--out", "{d}/afile"], "is a file"),
]


@pytest.mark.parametrize("argv, message", ERRORS, ids=[" ".join(a)[:60] for a, _ in ERRORS])
def test_bad_input_is_one_line_and_writes_nothing(files, capsys, argv, message):
    before = sorted(p.name for p in files.iterdir())
    one_line_error(capsys, [a.format(d=files) for a in argv], message)
    assert sorted(p.name for p in files.iterdir()) == before


USAGE = [
    (["lab", "nope"], "invalid choice"),
    (["lab", "induction", "--seed", "huge"], "seed must be an integer"),
    (["lab", "induction", "--seed", str(2**70)], "seed must be in [0, 2**63)"),
    (["lab", "induction", "--seed", "-1"], "seed must be in"),
    (["ablate", "--out", "t.csv", "--top", "-1"], "must be >= 0"),
    (["ablate", "--out", "t.csv", "--batch", "0"], "must be >= 1"),
    (["ablate", "--out", "t.csv", "--ablation", "median"], "invalid choice"),
    (["ablate"], "--out"),
]


@pytest.mark.parametrize("argv, message", USAGE, ids=[" ".join(a)[:60] for a, _ in USAGE])
def test_usage_errors_are_one_line_too(capsys, argv, message):
    one_line_error(capsys, argv, message, code="usage")


def test_console_script_errors_are_one_line(tmp_path):
    proc = run_cli("lab", "induction", "--seed", "x")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    proc = run_cli("ablate", "--out", str(tmp_path / "t.xlsx"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_interrupted_sweep_leaves_no_file(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the sweep: exit 130, nothing written (tables are exported at the end)."""
    import interp.analysis.components._pipeline as pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "sweep", interrupted)
    out = tmp_path / "t.csv"
    assert main(["ablate", "--out", str(out)]) == 130
    assert not out.exists() and not list(tmp_path.iterdir())
    assert "interrupted" in capsys.readouterr().err


def test_models_lists_aliases_and_cache_state(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for alias in ("induction-2l", "smollm2-135m", "minilm-l6"):
        assert alias in out
    assert "shipped" in out and "cache" in out

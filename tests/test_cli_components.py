"""``interp dla``, ``interp lens``, ``interp attention`` and ``interp patch --component``.

Happy paths on the shipped model (and SmolLM2 for real text), every bad input
answered in one line with exit 2 before the weights load, nothing written.
"""

import pytest

import interp
from interp.cli import main


def test_dla_lens_and_grids_on_the_shipped_model(tmp_path, capsys):
    prompt = "0 5 6 7 8 5 6 7"
    d = tmp_path / "dla.csv"
    assert main(["dla", "--prompt", prompt, "--answer", "8", "--wrong", "9", "--out", str(d),
                 "--figure", str(tmp_path / "dla.svg")]) == 0  # fmt: skip
    df = interp.read_table(d)
    assert df.nlargest(1, "value")["label"].item() == "L1H1"
    assert df["value"].sum() == pytest.approx(df.attrs["total"], rel=1e-4)
    assert df.attrs["inputs"] == f"--prompt {prompt!r}" and df.attrs["answer"] == "8"
    assert (tmp_path / "dla.svg").read_text().startswith("<svg")
    out = capsys.readouterr().out
    assert "rows sum to it" in out and "L1H1" in out
    lens = tmp_path / "lens.json"
    assert main(["lens", "--prompt", prompt, "--at", "7", "--k", "2", "--out", str(lens),
                 "--figure", str(tmp_path / "lens.svg")]) == 0  # fmt: skip
    table = interp.read_table(lens)
    assert table["stage"].tolist() == [0, 1, 2] and table["top1"].iloc[-1] == "8"
    assert "the model predicts '8'" in capsys.readouterr().out
    grid = tmp_path / "grid.csv"
    assert main(["patch", "--clean", prompt, "--corrupted", "0 5 6 7 9 5 6 7", "--logit-diff",
                 "8,9", "--component", "k", "--out", str(grid), "--top", "0"]) == 0  # fmt: skip
    g = interp.read_table(grid)
    assert (g.attrs["component"], g.attrs["by"], g.attrs["direction"]) == ("k", "head", "noising")
    assert g.attrs["method"] == "exact" and len(g) == 4


def test_attention_page(tmp_path, capsys):
    page = tmp_path / "a.html"
    assert (
        main(["attention", "--prompt", "0 5 6 7 8 5 6 7", "--answer", "8", "--out", str(page)]) == 0
    )
    text = page.read_text()
    assert text.count("CircuitsVis.render(") == 1 and "L1H1" in text
    assert 'data-name="dla"' in text and "all heads" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["dla", "--prompt", "0 5 6", "--answer", "5", "--wrong", "5", "--out", "{d}/t.csv"],
         "are the same token (id 5)"),
        (["dla", "--prompt", "0 5 6", "--answer", "Mary", "--out", "{d}/t.csv"],
         "--answer 'Mary' is text (not a token id), and this model has no tokenizer"),
        (["dla", "--prompt", "0 5 6", "--answer", "5", "--at", "3", "--out", "{d}/t.csv"],
         "--at [3] out of range: the prompt has 3 tokens"),
        (["dla", "--prompt", "0 5 6", "--answer", "5", "--out", "{d}/t.csv", "--figure",
          "{d}/f.png"], "must end in .svg"),
        (["dla", "--prompt", " ", "--answer", "5", "--out", "{d}/t.csv"], "empty prompt"),
        (["dla", "--prompt", "0 5 6", "--answer", "5", "--out", "{d}/t.xlsx"],
         "unknown output extension"),
        (["lens", "--prompt", "0 5 6", "--target", "x y", "--out", "{d}/t.csv"],
         "not a token id"),
        (["lens", "--prompt", "0 5 6", "--at", "-4", "--out", "{d}/t.csv"],
         "out of range"),
        (["attention", "--prompt", "0 5 6", "--out", "{d}/a.svg"], "must end in .html"),
        (["attention", "--prompt", "0 5 6", "--wrong", "5", "--out", "{d}/a.html"],
         "--wrong goes with --answer"),
        (["attention", "--prompt", "0 5 6", "--heads", "L9H0", "--out", "{d}/a.html"],
         "layer 9 out of range"),
        (["patch", "--clean", "0 5", "--corrupted", "0 6", "--logit-diff", "5,6", "--by", "layer",
          "--out", "{d}/t.csv"], "--by goes with --component"),
        (["patch", "--clean", "0 5", "--corrupted", "0 6", "--logit-diff", "5,6", "--component",
          "z", "--heads", "L0H0", "--out", "{d}/t.csv"], "--heads is for per-head patching"),
        (["patch", "--clean", "0 5", "--corrupted", "0 6", "--logit-diff", "5,6", "--component",
          "resid_pre", "--by", "head", "--out", "{d}/t.csv"], "one vector per layer"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".csv", ".html", ".svg")]

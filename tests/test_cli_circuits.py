"""``interp circuit`` and ``interp paths``.

The circuit command's JSON is re-read and re-evaluated exactly (the
faithfulness it claims is what the edges give); paths agree with
:func:`interp.analysis.path_patch`; SmolLM2 takes typed prompts and words as
answers; every bad input is one line with exit 2, nothing written.
"""

import json

import pytest
import torch

import interp
from interp.cli import main

PROMPT = "When Mary and John went to the store, John gave a drink to"
TWIN = "When Mary and John went to the store, Mary gave a drink to"


def test_circuit_on_the_default_task(tmp_path, capsys):
    from interp.analysis import evaluate_circuit, load_circuit
    from interp.experiments.circuits import circuit_task
    from interp.models import load_model

    out, table, fig = tmp_path / "c.json", tmp_path / "edges.csv", tmp_path / "c.svg"
    argv = ["circuit", "--n", "8", "--method", "eap", "--out", str(out), "--table", str(table),
            "--figure", str(fig)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["format"] == "interp-circuit" and doc["info"]["method"] == "eap"
    faith = doc["info"]["faithfulness"]
    assert faith >= 0.8 and f"faithfulness {faith:.3f}" in printed
    model = load_model("induction-2l")
    circuit = load_circuit(out, model)
    task = circuit_task(model, n=8, seed=0)
    again = evaluate_circuit(model, task.clean, corrupted_tokens=task.corrupted,
                             metric=task.metric, edges=circuit)  # fmt: skip
    # faithfulness is (m_circuit - m_corrupted) / (m_clean - m_corrupted): the metrics agree to
    # 1e-6 of their size (float32 rounding of passes batched otherwise, about 8 ulps), so the
    # ratio agrees to that over its denominator (as in test_chunks), not to 1e-6 absolute
    m = [again[c].item() for c in ("metric", "clean", "corrupted")]
    bar = 1e-6 * max(1.0, *map(abs, m)) / abs(m[1] - m[2])
    assert again["faithfulness"].item() == pytest.approx(doc["info"]["faithfulness"], abs=bar)
    scores = interp.read_table(table)
    assert len(scores) == 42 and scores.attrs["method"] == "eap"
    assert fig.read_text().startswith("<svg")


def test_paths_with_typed_prompts_match_the_function(tmp_path):
    from interp.analysis import path_patch
    from interp.core.metrics import loss_metric
    from interp.models import load_model

    clean, corrupted = "0 5 6 7 8 5 6 7 8", "0 9 10 11 12 5 6 7 8"
    out = tmp_path / "p.csv"
    argv = ["paths", "--clean", clean, "--corrupted", corrupted, "--metric", "loss",
            "--receivers", "L1H1.k,L1H1.q", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    df = interp.read_table(out)
    model = load_model("induction-2l")
    ids = lambda s: torch.tensor([[int(x) for x in s.split()]])  # noqa: E731
    ref = path_patch(model, ids(clean), corrupted_tokens=ids(corrupted),
                     metric=loss_metric(None), receivers=["L1H1.k", "L1H1.q"])  # fmt: skip
    got = df.set_index("sender")["patched"]
    for row in ref.itertuples():
        assert got[row.sender] == pytest.approx(row.patched, abs=1e-5)


def test_paths_on_smollm2_with_words(tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = ["paths", "--model", "smollm2-135m", "--clean", PROMPT, "--corrupted", TWIN,
            "--logit-diff", " Mary, John", "--senders", "L23H3,L20H0",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    df = interp.read_table(out).set_index("sender")
    # L23H3 writes the answer directly (name-mover lab): its path to the logits carries more
    # of the corruption's effect than L20H0's, which acts through later heads.
    assert abs(df.loc["L23H3", "normalized"]) > abs(df.loc["L20H0", "normalized"])
    assert df["clean"].iloc[0] > 0 > df["corrupted"].iloc[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["circuit", "--out", "{d}/c.csv"], "must end in .json"),
        (["circuit", "--target", "1.5", "--out", "{d}/c.json"], "--target must be in (0, 1]"),
        (["circuit", "--clean", "0 5", "--out", "{d}/c.json"], "give them in pairs"),
        (["circuit", "--clean", "0 5", "--corrupted", "0 6", "--out", "{d}/c.json"],
         "needs --logit-diff"),
        (["circuit", "--clean", "0 5", "--corrupted", "0 6", "--logit-diff", "5,6",
          "--logit-diff", "5,7", "--logit-diff", "5,8", "--out", "{d}/c.json"],
         "3 --logit-diff pairs for 1 prompts"),
        (["circuit", "--metric", "loss", "--out", "{d}/c.json"], "the default task brings"),
        (["circuit", "--clean", "0 5", "--clean", "0 5 6", "--corrupted", "0 6", "--corrupted",
          "0 6 7", "--metric", "loss", "--out", "{d}/c.json"], "[2, 3] tokens long"),
        (["circuit", "--clean", "0 5", "--corrupted", "0 6", "--logit-diff", "Mary,John",
          "--out", "{d}/c.json"], "this model has no tokenizer"),
        (["circuit", "--out", "{d}/c.json", "--figure", "{d}/c.png"], "must end in .svg"),
        (["paths", "--receivers", "L1H1.k,", "--out", "{d}/p.csv"], "empty label"),
        (["paths", "--clean", "0 5 6", "--corrupted", "0 6", "--metric", "loss", "--out",
          "{d}/p.csv"], "each corrupted twin needs its clean prompt's token count"),
        (["paths", "--receivers", "L5H1.k", "--out", "{d}/p.csv"], "names layer 5"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.iterdir())

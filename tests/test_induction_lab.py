"""The induction lab's claims, read from the tables of one real `interp lab induction` run.

The run is the README's main job (``make run``), through the installed
console script; every table and the report it writes are checked here.
"""

import json
import math

import pandas as pd
import pytest
from conftest import run_cli

from interp.models.checkpoints import load_checkpoint
from interp.paths import INDUCTION_CHECKPOINT, data_dir


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    out = tmp_path_factory.mktemp("ind") / "report"
    proc = run_cli("lab", "induction", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return proc, out


def table(lab, name):
    return pd.read_csv(lab[1] / f"{name}.csv")


def test_previous_token_and_induction_heads(lab):
    proc, out = lab
    scores = table(lab, "head_scores").set_index("label")
    assert scores.loc["L0H1", "previous_token"] > 0.8 and scores.loc["L1H1", "induction"] > 0.8
    assert "previous-token head L0H1" in proc.stdout and "induction head L1H1" in proc.stdout
    marker = json.loads((out / "interp-lab.json").read_text())
    assert marker["lab"] == "induction" and marker["seed"] == 0 and "ablation" in marker["tables"]


def test_top_k_composition_is_the_circuit(lab):
    kc = table(lab, "composition_k")
    top = kc.loc[kc["score"].idxmax()]
    assert (top["src_label"], top["label"]) == ("L0H1", "L1H1")
    assert top["score"] > 2 * top["baseline"] and set(kc["component"]) == {"K"}
    summary = table(lab, "summary").set_index("quantity")["value"]
    assert float(summary["K-circuit diagonal fraction"]) > 0.9


def test_induction_head_copies_and_positional_circuit(lab):
    row = table(lab, "copying").set_index("label").loc["L1H1"]
    assert row["copying_score"] > 0.85 and row["top1_self_fraction"] > 0.9
    pos = table(lab, "positional_circuit").set_index("ln_folded")["previous_position_attention"]
    assert pos[True] > 0.5 > pos[False]  # LayerNorm folded in vs raw W_pos


def test_losses_icl_and_the_bump(lab):
    losses = table(lab, "losses").iloc[0]
    assert losses["repeated"] < 0.2
    assert abs(losses["first_half"] - math.log(63)) < 0.05  # 63 content tokens
    assert losses["icl_score"] < -1
    curve = table(lab, "loss_by_position")
    rep = curve[curve["half"] == "repeated"]
    # The segment starts right after BOS here; the model misses the second copy's first two
    # predictions (the report says so) and gets the rest.
    assert rep["clean"].median() < 0.05 and (rep["clean"] < 0.05).sum() >= len(rep) - 2
    for col in [c for c in curve.columns if c.endswith("ablated")]:
        assert rep[col].median() > 3.0  # ablating a key head removes the bump


def test_ablations_identify_the_roles(lab):
    delta = table(lab, "ablation").set_index("label")["delta"]
    assert delta["L1H1"] > 1.0 and delta["L0H1"] > 1.0
    assert delta.abs().min() < 0.1
    groups = table(lab, "group_ablation").set_index("group")["delta"]
    # Knocking out both roles together is at least as damaging as either single ablation.
    assert groups["previous-token + induction"] >= max(delta["L1H1"], delta["L0H1"]) - 0.05


def test_conventions_table(lab):
    conv = table(lab, "score_conventions")
    assert set(conv["convention"]) == {"interp", "transformer_lens", "arena"}
    ind = conv[(conv["label"] == "L1H1") & (conv["stripe"] == "induction")].set_index("convention")
    assert (
        ind.loc["interp", "score"]
        > ind.loc["arena", "score"]
        > ind.loc["transformer_lens", "score"]
    )


def test_every_format_writes_the_same_tables(tmp_path):
    """One analysis, exported four ways through the one writer (no second lab run)."""
    from interp.labs import induction
    from interp.labs.writer import write_lab

    f = induction.analyse("induction-2l")
    names = set(induction.tables(f))
    for fmt in ("csv", "parquet", "md", "json"):
        out = write_lab(induction, f, tmp_path / fmt, fmt=fmt)
        assert {p.stem for p in out.tables.values()} == names
        assert all(p.suffix == f".{fmt}" and p.is_file() for p in out.tables.values())
    a = pd.read_csv(tmp_path / "csv" / "ablation.csv")
    b = pd.read_parquet(tmp_path / "parquet" / "ablation.parquet")
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.browser
def test_report_renders_offline_with_its_figures(lab, chromium_paths):
    from browser import render_page

    result = render_page(lab[1] / "report.html", chromium_paths)
    assert result["widgets"] == 2 and result["rendered"] == 2, result
    assert set(result["figures"]) == {
        "loss_by_position",
        "scores_previous_token",
        "scores_induction",
        "scores_duplicate_token",
        "k_composition",
    }
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert result["severe_logs"] == []


@pytest.mark.slow
def test_retraining_with_the_same_seed_reproduces_the_shipped_checkpoint():
    """The shipped file is honestly reproducible: same seed and config, same scores and weights."""
    import torch

    from interp.analysis.induction import head_scores
    from interp.training import InductionTrainConfig, train_induction

    shipped, meta = load_checkpoint(data_dir() / INDUCTION_CHECKPOINT)
    result = train_induction(InductionTrainConfig.from_dict(meta["training"]), progress=False)
    # The first evaluation and the end. In between, around the loss's fast drop (steps
    # 200-500), another CPU's rounding moves the curve by a few hundredths; it converges again.
    assert len(result.history) == len(meta["history"])
    for got, ref in (
        (result.history[0], meta["history"][0]),
        (result.history[-1], meta["history"][-1]),
    ):
        for key in ("induction", "previous_token", "repeated_loss", "first_half_loss"):
            assert got[key] == pytest.approx(ref[key], abs=0.02), (got["step"], key)
    probe = torch.randint(1, 64, (8, 20)).repeat(1, 2)
    a, b = head_scores(result.model, probe), head_scores(shipped, probe)
    assert a.nlargest(1, "induction")["label"].item() == b.nlargest(1, "induction")["label"].item()
    # Same CPU kind: bit-identical; another CPU's kernels may round differently.
    diffs = [
        float((p - q).abs().max())
        for p, q in zip(result.model.state_dict().values(), shipped.state_dict().values())
    ]
    assert max(diffs) < 0.05


def test_training_is_deterministic_by_seed():
    import torch

    from interp.training import InductionTrainConfig, train_induction

    cfg = InductionTrainConfig(steps=40, eval_every=20, eval_size=16, batch_size=16)
    a, b = (train_induction(cfg, progress=False) for _ in range(2))
    for (n, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), n
    assert a.history == [{**h, "seconds": a.history[i]["seconds"]} for i, h in enumerate(b.history)]


def test_train_cli_writes_a_checkpoint_that_loads(tmp_path):
    out = tmp_path / "ck"
    proc = run_cli("train", "induction", "--out", str(out), "--steps", "30", "--quiet")
    assert proc.returncode == 0, proc.stderr
    model, meta = load_checkpoint(out)
    assert meta["history"][-1]["step"] == 30 and model.cfg.n_layers == 2
    bad = run_cli("train", "induction", "--out", str(out / "config.json"), "--steps", "2")
    assert bad.returncode == 2 and "is a file" in bad.stderr


def test_the_seed_moves_the_held_out_data(lab, induction_model):
    """--seed is used, not silently ignored: another seed, other sequences, other numbers."""
    from interp.labs import induction

    other = induction.analyse(induction_model, seed=1)
    seed0 = table(lab, "head_scores")
    assert not (other.scores["induction"].to_numpy() == seed0["induction"].to_numpy()).all()
    assert (other.prev_label, other.induction_label) == ("L0H1", "L1H1")  # the same circuit

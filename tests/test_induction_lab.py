"""The induction lab's claims, read from the tables of one real `interp lab induction` run.

The run is the README's main job (``make run``), through the installed
console script; every table and the report it writes are checked here.
"""

import json
import math

import pandas as pd
import pytest
from conftest import run_cli


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
    effect = table(lab, "ablation").set_index("label")["effect"]
    assert effect["L1H1"] > 1.0 and effect["L0H1"] > 1.0
    assert effect.abs().min() < 0.1
    groups = table(lab, "group_ablation").set_index("group")["effect"]
    # Knocking out both roles together is at least as damaging as either single ablation.
    assert groups["previous-token + induction"] >= max(effect["L1H1"], effect["L0H1"]) - 0.05


def test_qk_attribution_says_why_the_induction_head_attends(lab, induction_model):
    """On every held-out prompt, L1H1's score on its induction target is carried by the pair
    (its token's embedding, the previous-token head's output at the target): K-composition,
    per prompt. Each prompt's score is checked against the model's own hook_attn_scores, and
    removing L0H1 from the key input measures what the attribution says."""
    import torch
    from conftest import scores_without_key_piece, written_by, written_hook

    from interp.experiments import induction

    per = table(lab, "qk_per_prompt")
    data = induction.eval_data(induction_model)
    assert len(per) == len(data) == 256
    assert (per["key_position"] == per["query_position"] - per["segment_len"] + 1).all()
    _, c = induction_model.run_with_cache(
        data.tokens, names_filter=["blocks.1.attn.hook_attn_scores", written_hook("L0H1")]
    )
    s = c["blocks.1.attn.hook_attn_scores"][:, 1]
    b = torch.arange(len(per))
    hooks = s[b, torch.tensor(per["query_position"]), torch.tensor(per["key_position"])]
    assert (torch.tensor(per["score"]) - hooks).abs().max() < 1e-4 * float(hooks.abs().max())
    top = table(lab, "qk_pairs").iloc[0]
    assert (top["query_component"], top["key_component"]) == ("embed", "L0H1")
    assert top["share"] > 0.8 and top["top_in"] > 0.9
    checks = table(lab, "qk_interventions").set_index(["side", "component"])
    key = checks.loc[("key", "L0H1")]
    assert key["verdict"] == "agrees" and key["measured"] < -0.5 * per["score"].mean()
    # the same intervention from hooks alone: L0H1's output taken out of L1H1's keys only
    piece = written_by(induction_model, c, "L0H1")
    cut = scores_without_key_piece(induction_model, data.tokens, 1, piece)[:, 1]
    q, k = torch.tensor(per["query_position"]), torch.tensor(per["key_position"])
    by_hand = float((cut[b, q, k] - hooks).mean())
    assert abs(by_hand - key["measured"]) < 1e-4 * abs(by_hand)
    report = (lab[1] / "report.html").read_text()
    assert "The pair (query: embed, key: L0H1) carries it" in report
    assert "That is K-composition" in report


def test_the_induction_head_attends_for_the_feature_that_reads_its_token(lab, induction_model):
    """In features (issue 46): with the shipped TopK dictionary on L0's attention output
    (data/induction-2l-attn0), L1H1's top (query, key) pair on its induction target is
    (embed:A) x (a feature whose own top previous token is A) in at least 90% of the 256
    held-out prompts; each hit's feature reads A by the lab's meanings table (checked against
    a hand count in the next test), and removing the feature from the key input alone moves
    the score within a tenth of its attribution."""
    per = table(lab, "qk_features_per_prompt")
    meanings = table(lab, "qk_feature_meanings").set_index("feature")
    assert len(per) == 256
    assert per["hit"].mean() >= 0.9, per["hit"].mean()
    hits = per[per["hit"]]
    assert (hits["top_query_piece"] == "embed:" + hits["token"].astype(str)).all()
    feats = hits["top_key_piece"].str.slice(1).astype(int)
    assert (meanings.loc[feats, "previous_token"].to_numpy() == hits["token"].to_numpy()).all()
    removals = table(lab, "qk_feature_removals")
    assert len(removals) >= 30 and removals["within_a_tenth"].all()
    gap = (removals["measured"] - removals["attribution"]).abs()
    assert (gap <= 0.1 * removals["attribution"].abs()).all()
    report = (lab[1] / "report.html").read_text()
    assert "In features: with a 128-feature TopK dictionary" in report


@pytest.mark.slow
def test_the_shipped_dictionary_is_what_its_recipe_trains(tmp_path):
    """data/induction-2l-attn0 is honestly reproducible: the command in its metadata (the
    lab's RECIPE) writes the same dictionary again. Same CPU kind: bit-identical (measured
    0.0, with 1 or 2 threads); another CPU's kernels round differently and Adam carries it
    over 384 steps, so weights within 5% of each tensor's scale and the figures close."""
    import shlex

    from interp.core.paths import data_dir
    from interp.dictionaries import load_dictionary
    from interp.experiments.induction.features import RECIPE, SHIPPED

    shipped = load_dictionary(data_dir() / SHIPPED)
    assert shipped.metadata["command"].startswith(RECIPE)
    args = shlex.split(RECIPE)[1:]
    proc = run_cli(*args, "--out", str(tmp_path / "d"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    again = load_dictionary(tmp_path / "d")
    for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
        a, b = getattr(shipped, name).detach(), getattr(again, name).detach()
        assert float((a - b).abs().max()) <= 0.05 * float(a.abs().max()), name
    r, s = shipped.metadata["report"], again.metadata["report"]
    assert abs(r["fraction_variance_explained"] - s["fraction_variance_explained"]) < 0.01
    assert r["l0"] == s["l0"] and abs(r["dead_fraction"] - s["dead_fraction"]) < 0.05


def test_the_features_meanings_are_read_from_their_activations(induction_model):
    """feature_meanings against a hand count: a dictionary's activations on tokens, each
    feature's activation summed by the token before each position."""

    from interp.datasets import repeated_tokens
    from interp.dictionaries import Dictionary
    from interp.experiments.induction.features import feature_meanings

    D = Dictionary.random(d_in=induction_model.cfg.d_model, d_sae=16, architecture="topk", k=2,
                          hook_name="blocks.0.hook_attn_out", seed=0)  # fmt: skip
    t = repeated_tokens(8, d_vocab=64, seq_len=24, segment_lengths=(5,), seed=0).tokens
    got = feature_meanings(induction_model, D, t)
    _, c = induction_model.run_with_cache(t, names_filter=["blocks.0.hook_attn_out"])
    acts = D.encode(c["blocks.0.hook_attn_out"]).detach()
    for f in range(16):
        by = {}
        for b in range(t.shape[0]):
            for p in range(1, t.shape[1]):
                v = float(acts[b, p, f])
                if v > 0:
                    by[int(t[b, p - 1])] = by.get(int(t[b, p - 1]), 0.0) + v
        row = got.iloc[f]
        assert row["active"] == sum(1 for b in range(8) for p in range(1, 24) if acts[b, p, f] > 0)
        if by:
            best = max(by.values())
            assert by[int(row["previous_token"])] == pytest.approx(best, rel=1e-5)
            assert row["purity"] == pytest.approx(best / sum(by.values()), rel=1e-5)


def test_conventions_table(lab):
    conv = table(lab, "score_conventions")
    assert set(conv["convention"]) == {"interp", "transformer_lens", "arena"}
    ind = conv[(conv["label"] == "L1H1") & (conv["stripe"] == "induction")].set_index("convention")
    assert (
        ind.loc["interp", "score"]
        > ind.loc["arena", "score"]
        > ind.loc["transformer_lens", "score"]
    )


def test_every_format_and_every_entry_point_writes_the_same_files(lab, lab_run, tmp_path):
    """One more analysis in this process, exported four ways through the one writer; its CSV
    folder is byte-identical to the console script's run and to the notebook's (report.html
    with its Styler ids, tables, their metadata sidecars, figures): identical runs, identical
    files, whichever way the lab is run."""
    from interp.experiments import induction
    from interp.experiments.writer import write_lab

    f = induction.analyse("induction-2l")
    names = set(induction.tables(f))
    for fmt in ("csv", "parquet", "md", "json"):
        out = write_lab(induction, f, tmp_path / fmt, fmt=fmt)
        assert {p.stem for p in out.tables.values()} == names
        assert all(p.suffix == f".{fmt}" and p.is_file() for p in out.tables.values())
    a = pd.read_csv(tmp_path / "csv" / "ablation.csv")
    b = pd.read_parquet(tmp_path / "parquet" / "ablation.parquet")
    pd.testing.assert_frame_equal(a, b)
    here = tmp_path / "csv"
    files = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert {"report.html", "ablation.csv", "ablation.meta.json"} <= {str(f) for f in files}
    for other in (lab[1], lab_run("induction")):
        theirs = sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file())
        assert theirs == files
        for name in files:
            assert (here / name).read_bytes() == (other / name).read_bytes(), (other, name)


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
        "logit_lens",
    }
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert result["severe_logs"] == []


def test_the_seed_moves_the_held_out_data(lab, induction_model):
    """--seed is used, not silently ignored: another seed, other sequences, other numbers."""
    from interp.experiments import induction

    other = induction.analyse(induction_model, seed=1)
    seed0 = table(lab, "head_scores")
    assert not (other.scores["induction"].to_numpy() == seed0["induction"].to_numpy()).all()
    assert (other.prev_label, other.induction_label) == ("L0H1", "L1H1")  # the same circuit


@pytest.mark.notebook
def test_notebook_runs_and_writes_its_lab(lab_run):
    from conftest import check_notebook_output

    check_notebook_output(lab_run("induction"), "induction")


def test_the_lens_shows_the_answer_at_the_induction_heads_layer(lab):
    lens = table(lab, "logit_lens")
    rep = lens[lens["half"] == "repeated"].set_index("stage")["next_token_p"]
    first = lens[lens["half"] == "first half"].set_index("stage")["next_token_p"]
    assert rep[0] < 0.1 and rep[1] < 0.1 and rep[2] > 0.9  # appears after L1 (L1H1's block)
    assert first.max() < 0.1  # the unpredictable half never becomes predictable
    assert (
        "the answer appears at stage 2 (L1, the block of L1H1)"
        in (lab[1] / "report.html").read_text()
    )


def test_without_the_induction_head_the_repeat_does_not_survive(lab):
    """The repeated half continued greedily (interp.analysis.generation.generate): clean, the
    model writes the rest of the segment; with L1H1 ablated, none of it."""
    df = table(lab, "continuation")
    clean, ablated = df[df["run"] == "clean"], df[df["run"] == "L1H1 ablated"]
    assert clean["survived"].sum() >= 0.9 * clean["repeat_tokens"].sum()
    assert ablated["survived"].mean() < 0.5
    summary = table(lab, "summary").set_index("quantity")["value"]
    row = summary["repeat continued greedily: tokens that survive, clean / without L1H1"]
    assert row.endswith(f"of {clean['repeat_tokens'].mean():.1f}")

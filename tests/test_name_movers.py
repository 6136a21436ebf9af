"""The name-mover lab on SmolLM2: the task is done, patching finds the heads, attribution agrees.

Read from the lab's one run in this session (its notebook, conftest.lab_run).
"""

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def out(lab_run):
    return lab_run("name-movers")


def table(out, name):
    return pd.read_csv(out / f"{name}.csv")


def test_the_model_does_the_task(out):
    perf = table(out, "performance")
    assert set(perf["split"]) == {"train", "held_out"}
    assert (perf["split"] == "train").sum() >= 5 and (perf["split"] == "held_out").sum() >= 3
    kept = perf[perf["kept"]]
    assert (kept["mean_logit_diff"] > 1).all() and (kept["fraction_correct"] >= 0.6).all()
    assert (perf["corrupted_logit_diff"] < 0).all()  # the corrupted twin flips the answer
    prompts = table(out, "prompts")
    assert set(prompts["template"]) <= set(perf[perf["split"] == "train"]["template"])


def test_patching_finds_heads_that_restore_the_answer(out):
    p = table(out, "patching")
    assert len(p) == 270 and list(p.columns[:3]) == ["layer", "head", "label"]
    assert (p["clean"] > 1).all() and (p["corrupted"] < 0).all()
    assert p["normalized"].max() > 0.2
    assert {"estimate", "estimate_normalized"} <= set(p.columns)


def test_the_patching_direction_is_recorded(out):
    """Patching and its attribution estimate are denoising (the clean run's head outputs into
    the corrupted run, the lab's README numbers): the tables' metadata and the report say so."""
    import json

    for name in ("patching", "attribution"):
        meta = json.loads((out / f"{name}.meta.json").read_text())["meta"]
        assert meta["direction"] == "denoising" and meta["ablation"] == "patch", name
    p = table(out, "patching")
    base = p["corrupted"]  # denoising: the corrupted run is the one patched
    assert p["effect"].to_numpy() == pytest.approx((p["patched"] - base).to_numpy())
    assert p["normalized"].to_numpy() == pytest.approx(
        (p["effect"] / (p["clean"] - base)).to_numpy()
    )
    assert "Direction: denoising." in (out / "report.html").read_text()


def test_attribution_agrees_with_exact_patching(out):
    ag = table(out, "agreement").set_index("measure")["value"]
    assert ag["Spearman (estimate vs exact, all heads)"] > 0.5
    assert (
        0
        <= ag["exact top 10 in estimate's top 10"]
        <= ag["exact top 10 in estimate's top 30"]
        <= 10
    )
    att = table(out, "attribution")
    assert att["exact"].isna().all() and att["estimate"].notna().all()  # never mixed


def test_the_name_attention_caption_states_its_own_numbers(out):
    import html
    import re

    from interp.experiments.name_movers import attention_caption

    na = table(out, "name_attention")
    caption = attention_caption(na)
    assert html.escape(caption) in (out / "report.html").read_text()
    for r in na.itertuples():
        best = max(("to_io", "to_s1", "to_s2"), key=lambda c: getattr(r, c))
        assert f"{r.label} {getattr(r, best):.2f}" in caption
    # A head that looks at S2 is never said to attend to the indirect object.
    fake = na.assign(to_io=0.065, to_s1=0.1, to_s2=0.61).head(1)
    said = attention_caption(fake)
    assert re.search(r"subject's second occurrence: L\d+H\d+ 0.61", said)
    assert "indirect object:" not in said


def test_ablating_the_top_heads_hurts_more_than_random_heads(out):
    abl = table(out, "group_ablation")
    top, rand = abl.iloc[0]["effect"], abl[abl["kind"] == "random"]["effect"]
    assert top < rand.median() - 1.0  # the logit difference falls


@pytest.mark.browser
def test_report_renders_offline(out, chromium_paths):
    from browser import render_page

    result = render_page(out / "report.html", chromium_paths)
    assert result["widgets"] == 1 and result["rendered"] == 1, result
    assert set(result["figures"]) == {
        "recovery_exact",
        "recovery_estimate",
        "estimate_vs_exact",
        "name_attention",
        "group_ablation",
        "dla_heads",
        "lens_final",
        "lens_example",
    }
    for name, (w, h, caption) in result["figures"].items():
        assert w > 100 and h > 100 and caption > 40, name
    assert result["severe_logs"] == []


@pytest.mark.notebook
def test_notebook_runs_and_writes_its_lab(lab_run):
    from conftest import check_notebook_output

    check_notebook_output(lab_run("name-movers"), "name-movers")


def test_the_report_says_whether_the_top_heads_write_the_answer(out):
    """DLA of every head on the clean prompts sums to the model's logit difference, and the
    report states, with numbers, what each top patching head writes directly."""
    dla = table(out, "dla")
    clean = table(out, "patching")["clean"].iloc[0]
    assert dla["value"].sum() == pytest.approx(clean, rel=1e-4)  # the same prompts and metric
    verdicts = table(out, "direct_verdicts")
    top = table(out, "patching").nlargest(3, "normalized")["label"].tolist()
    assert verdicts["label"].tolist() == top
    heads = dla[dla["component"] == "head"].set_index("label")["value"]
    report = (out / "report.html").read_text()
    for v in verdicts.itertuples():
        assert v.dla == pytest.approx(heads[v.label])
        assert f"it writes {v.dla:+.3f} into logit[IO] - logit[S] directly" in report
        share = v.dla / clean
        want = (
            "writes the answer directly"
            if share >= 0.1
            else (
                "writes against the answer directly" if share <= -0.1 else "writes little directly"
            )
        )
        assert v.verdict.startswith(want), v
    lens = table(out, "logit_lens_final")
    assert lens["stage"].tolist() == list(range(31))
    assert lens["p_io"].iloc[-1] > lens["p_s"].iloc[-1]  # the model answers with IO at the end


def test_qk_attribution_says_why_the_s2_heads_prefer_s2(out, smollm):
    """The top patching heads that look at S2: their score difference s[END, S2] - s[END, IO]
    is the model's own (from hooks), split into writers whose removal from the key input is
    measured again from hooks alone; the report says where attribution and intervention
    disagree, and only there."""
    import html

    import torch
    from conftest import scores_without_key_piece, written_by, written_hook

    from interp.datasets import name_mover_prompts

    contrast = table(out, "qk_contrast").set_index("label")
    looks = table(out, "name_attention").set_index("label")
    heads = list(contrast.index)
    assert heads and set(heads) <= set(looks.index)
    for h in heads:
        assert looks.loc[h, "to_s2"] > max(looks.loc[h, "to_io"], looks.loc[h, "to_s1"])
    perf = table(out, "performance")
    kept = perf[(perf["split"] == "train") & perf["kept"]]["template"].tolist()
    p = name_mover_prompts(12, seed=0, tokenizer=smollm.tokenizer, templates=kept)
    assert list(p.texts) == table(out, "prompts")["clean"].tolist()
    layers = {h: (int(h[1:].split("H")[0]), int(h.split("H")[1])) for h in heads}
    checks = table(out, "qk_interventions")
    key = checks[(checks["label"] == heads[0]) & (checks["side"] == "key")].iloc[0]
    names = [f"blocks.{l}.attn.hook_attn_scores" for l, _ in layers.values()]
    with torch.no_grad():
        _, c = smollm.run_with_cache(p.clean, names_filter=[*names, written_hook(key["component"])])
    b = torch.arange(len(p))

    def difference(s):  # [batch, query, key] -> mean of s[END, S2] - s[END, IO]
        return float((s[b, -1, p.s2_pos] - s[b, -1, p.io_pos]).mean())

    for h, (layer, head) in layers.items():
        hooks = difference(c[f"blocks.{layer}.attn.hook_attn_scores"][:, head])
        assert contrast.loc[h, "difference"] == pytest.approx(hooks, rel=1e-4)
        assert contrast.loc[h, "difference"] > 0  # S2 over IO, as the head looks
    h = heads[0]
    layer, head = layers[h]
    piece = written_by(smollm, c, key["component"])
    cut = scores_without_key_piece(smollm, p.clean, layer, piece)[:, head]
    by_hand = difference(cut) - difference(c[f"blocks.{layer}.attn.hook_attn_scores"][:, head])
    assert key["measured"] == pytest.approx(by_hand, rel=1e-3, abs=1e-4)
    report = html.unescape((out / "report.html").read_text())
    for h in heads:
        assert (
            f"{h} puts {looks.loc[h, 'to_s2']:.2f} of its final-position attention on S2" in report
        )
        off = checks[(checks["label"] == h) & (checks["verdict"] != "agrees")]
        assert (f"Caveat for {h}" in report) == (len(off) > 0)
        for r in off.itertuples():
            assert f"{r.component} ({r.side}: attribution {r.attribution:+.2f}" in report

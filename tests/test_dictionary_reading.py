"""Reading a feature: top contexts and densities equal a brute-force pass, whatever the
chunking or a cache; logit effects are the model's own final norm and unembedding; bad
input refused before any pass; the page renders offline in Chromium."""

import numpy as np
import pandas as pd
import pytest
import torch

from interp.core.errors import InterpError
from interp.datasets import repeated_tokens
from interp.dictionaries import Dictionary, feature_logit_effects, read_features, train_dictionary
from interp.dictionaries.activations import hook_activations
from interp.models import load_model
from interp.models.hf import random_llama
from interp.runtime import runtime_of

HOOK = "blocks.1.hook_resid_pre"


@pytest.fixture(scope="module")
def model():
    return load_model("induction-2l")


@pytest.fixture(scope="module")
def tokens():
    return repeated_tokens(24, d_vocab=64, seq_len=40, repeats=None, seed=5).tokens


@pytest.fixture(scope="module")
def D(model, tokens):
    fit = train_dictionary(model, tokens, hook=HOOK, n_features=48, k=4, epochs=2, batch_size=128)
    return fit.dictionary


@pytest.fixture(scope="module")
def reading(model, tokens, D):
    return read_features(model, tokens, dictionary=D, top=5, window=(3, 2), skip_columns=1)


def _brute(model, tokens, D, skip):
    with torch.no_grad():
        return D.encode(hook_activations(model, tokens, HOOK))[:, skip:]  # [b, pos - skip, F]


def test_contexts_and_densities_equal_a_brute_force_pass(model, tokens, D, reading):
    acts = _brute(model, tokens, D, 1)
    flat = acts.reshape(-1, D.d_sae)
    f = reading.features
    assert f["feature"].tolist() == list(range(D.d_sae))
    assert f["n_active"].tolist() == (flat > 0).sum(0).tolist()
    np.testing.assert_allclose(f["density"], (flat > 0).double().mean(0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(f["max_activation"], flat.max(0).values.clamp(min=0), atol=1e-5)
    c = reading.contexts
    pos = tokens.shape[1]
    for feat in (0, 7, 31):
        mine = c[c["feature"] == feat]
        v = flat[:, feat]
        want = v.sort(descending=True, stable=True)
        n = min(5, int((v > 0).sum()))
        assert len(mine) == n and mine["rank"].tolist() == list(range(n))
        # activations to float rounding (a chunk's product may round apart from the batch's)
        np.testing.assert_allclose(mine["activation"], want.values[:n].numpy(), atol=1e-5)
        seq, at = want.indices[:n] // (pos - 1), 1 + want.indices[:n] % (pos - 1)
        assert mine["sequence"].tolist() == seq.tolist() and mine["pos"].tolist() == at.tolist()
        assert mine["token_id"].tolist() == tokens[seq, at].tolist()
    # each window holds the tokens around its context and the feature's activations there
    row = 0
    r = c.iloc[row]
    window = reading.window(row)
    full = torch.cat([torch.zeros(tokens.shape[0], 1, D.d_sae), acts], 1)  # column 0 back
    for offset, tid, a in window:
        p = int(r["pos"]) + offset
        assert tid == int(tokens[r["sequence"], p])
        assert a == pytest.approx(float(full[r["sequence"], p, r["feature"]]), abs=1e-5)
    assert [o for o, _, _ in window] == [o for o in range(-3, 3) if 0 <= r["pos"] + o < pos]
    assert f.attrs["analysis"] == "read_features" and f.attrs["n_positions"] == flat.shape[0]


def test_chunked_and_cached_readings_equal_one_pass(model, tokens, D, reading):
    split = read_features(
        model, tokens, dictionary=D, top=5, window=(3, 2), skip_columns=1, memory_budget=1_000_000
    )
    assert split.features.attrs["chunks"] > 1 and reading.features.attrs["chunks"] == 1
    pd.testing.assert_frame_equal(split.features, reading.features, atol=1e-5)
    # the same activations, rank by rank; where two places' activations tie to float rounding
    # (a repeated segment), either may come first: each place holds the activation claimed
    cols = ["feature", "rank", "sequence", "pos", "token_id"]
    a, b = split.contexts, reading.contexts
    assert a[["feature", "rank"]].equals(b[["feature", "rank"]])
    np.testing.assert_allclose(a["activation"], b["activation"], atol=1e-5)
    full = torch.cat([torch.zeros(tokens.shape[0], 1, D.d_sae), _brute(model, tokens, D, 1)], 1)
    at = full[torch.tensor(a["sequence"].values), torch.tensor(a["pos"].values),
              torch.tensor(a["feature"].values)]  # fmt: skip
    np.testing.assert_allclose(at.numpy(), a["activation"], atol=1e-5)
    same = (a[cols] == b[cols]).all(axis=1)
    assert same.mean() > 0.9
    _, cache = model.run_with_cache(tokens)
    cached = read_features(model, tokens, dictionary=D, top=5, window=(3, 2), skip_columns=1,
                           cache=cache)  # fmt: skip
    pd.testing.assert_frame_equal(cached.contexts[cols], reading.contexts[cols])
    assert cached.features.attrs["forward_equivalents"] < 1  # the check's pass, cut short
    with pytest.raises(InterpError, match="does not belong to these tokens"):
        read_features(model, tokens.flip(0), dictionary=D, cache=cache)
    est = read_features(model, tokens, dictionary=D, memory_budget=1_000_000, estimate=True)
    assert est.chunks == split.features.attrs["chunks"]
    # the pass stops at layer 1 of 2 (half the blocks), then the encoder and the logit
    # effects: a little over half a pass in FLOPs (issue 44; tests/test_counted_flops.py)
    assert 0.5 < est.forward_equivalents < 0.6


def _readout_effect(model, d):
    """The logits one unit of ``d`` adds through the model's own final norm and unembedding,
    its scale divided out: ``(readout(d) - readout(0)) * sqrt(mean(centre(d)^2) + eps)``."""
    rt = runtime_of(model)
    norm = rt.norm("final")
    with torch.no_grad():
        gap = rt.readout(d, softcap=False) - rt.readout(torch.zeros_like(d), softcap=False)
    return gap / norm.inverse_scale(d)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_logit_effects_are_the_models_final_norm_and_unembedding(model, kind):
    m = model if kind == "layernorm" else random_llama(n_layers=2, d_model=64, seed=0)
    width = int(m.cfg.d_model)
    hook = "blocks.1.hook_resid_pre"
    E = Dictionary.random(d_in=width, d_sae=12, architecture="relu", hook_name=hook, seed=2)
    with torch.no_grad():
        E.W_dec.mul_(torch.linspace(0.5, 3.0, 12)[:, None])  # scale must not matter to a rank
    df = feature_logit_effects(m, dictionary=E, features=[3, 9], top=4)
    assert list(df.columns) == ["feature", "side", "rank", "token_id", "token", "value"]
    assert len(df) == 2 * 2 * 4
    for f in (3, 9):
        want = _readout_effect(m, E.W_dec[f].detach())
        mine = df[(df["feature"] == f) & (df["side"] == "top")]
        top = want.topk(4)
        assert mine["token_id"].tolist() == top.indices.tolist()
        np.testing.assert_allclose(mine["value"], top.values.numpy(), rtol=1e-4, atol=1e-5)
        low = df[(df["feature"] == f) & (df["side"] == "bottom")]
        assert low["token_id"].tolist() == want.topk(4, largest=False).indices.tolist()
    assert df.attrs["final_norm"] in ("LN", "RMS") and df.attrs["forward_equivalents"] == 0


def test_a_hook_z_dictionary_is_read_through_its_layers_W_O(model):
    n_heads, d_head = model.cfg.n_heads, model.cfg.d_head
    Z = Dictionary.random(d_in=n_heads * d_head, d_sae=6, hook_name="blocks.0.attn.hook_z")
    z_df = feature_logit_effects(model, dictionary=Z, top=3)
    # the same rows written into the stream by W_O: a residual dictionary with those rows
    rows = torch.einsum("fhd,hdm->fm", Z.W_dec.detach().view(6, n_heads, d_head), model.W_O[0])
    R = Dictionary(rows.T.clone(), torch.zeros(6), rows, torch.zeros(model.cfg.d_model),
                   hook_name="blocks.0.hook_resid_post")  # fmt: skip
    r_df = feature_logit_effects(model, dictionary=R, top=3)
    assert z_df["token_id"].tolist() == r_df["token_id"].tolist()
    # the same products with W_O applied first or folded in: float32 rounding, a few ulps of
    # the effects' size, so atol is 1e-6 of that size (about 8 ulps), not 1e-6 absolute
    size = max(1.0, float(r_df["value"].abs().max()))
    np.testing.assert_allclose(z_df["value"], r_df["value"], rtol=1e-5, atol=1e-6 * size)
    # a dictionary on the queries writes nothing into the stream: contexts, and the reason
    Q = Dictionary.random(d_in=n_heads * d_head, d_sae=6, hook_name="blocks.1.attn.hook_q")
    r = read_features(model, torch.arange(12)[None], dictionary=Q, top=2)
    assert r.logits is None and "does not write into the residual" in r.features.attrs["logits"]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(features=[48]), r"feature 48 is not one of this dictionary's features 0..47"),
        (dict(features=[1, 1]), r"lists a feature twice"),
        (dict(features=[0.5]), r"integer feature ids"),
        (dict(features=[]), r"features is empty"),
        (dict(top=0), r"top"),
        (dict(window=3), r"window must be \(before, after\)"),
        (dict(window=(1, -1)), r"window\[1\]"),
        (dict(skip_columns=40), r"skip_columns=40 leaves none of the 40 columns"),
        (dict(logits=-1), r"logits"),
    ],
)
def test_bad_options_are_refused_before_any_pass(model, tokens, D, kw, match):
    seen = []
    handle = model.blocks[0].register_forward_pre_hook(lambda *a: seen.append(1))
    try:
        with pytest.raises(InterpError, match=match):
            read_features(model, tokens, dictionary=D, **kw)
    finally:
        handle.remove()
    assert not seen


def test_no_model_or_a_dictionary_of_another_width_is_refused(model, tokens, D):
    with pytest.raises(InterpError, match=r"no model given|is not a hooked model"):
        read_features(None, tokens, dictionary=D)
    wide = Dictionary.random(d_in=64, d_sae=4, hook_name=HOOK)
    with pytest.raises(InterpError, match="64"):
        read_features(model, tokens, dictionary=wide)
    with pytest.raises(InterpError, match=r"no model given|is not a hooked model"):
        feature_logit_effects(None, dictionary=D)


# ----------------------------------------------------------------------------- the page
def _pairs(model, D, n=6):
    """(query feature, key feature) pairs of L1H1 by their virtual QK weight through the
    frozen-free path: ``W_dec[q] W_Q W_K^T W_dec[k]^T`` (a real number of the model)."""
    with torch.no_grad():
        v = (D.W_dec @ model.W_Q[1, 1]) @ (D.W_dec @ model.W_K[1, 1]).T  # [F, F]
    top = v.flatten().topk(n)
    q, k = top.indices // v.shape[1], top.indices % v.shape[1]
    return pd.DataFrame({"query_feature": q.numpy(), "key_feature": k.numpy(),
                         "value": top.values.numpy()})  # fmt: skip


def test_page_holds_the_cards_and_pairs(model, D, reading):
    from interp.outputs.pages.features import feature_page, pair_section

    pairs = _pairs(model, D)
    section = pair_section(pairs, query=reading, key=reading, title="L1H1: top feature pairs")
    shown = sorted(set(pairs["query_feature"]) | set(pairs["key_feature"]))
    html = feature_page(reading, features=shown, sections=[section]).to_html()
    assert html.count('class="feature-card"') == len(shown)
    assert html.count('<tr class="pair"') == len(pairs)
    n_ctx = int(reading.contexts["feature"].isin(shown).sum())
    assert html.count("<li data-rank=") == n_ctx
    with pytest.raises(InterpError, match="was not read"):
        feature_page(reading, features=[10_000])
    with pytest.raises(InterpError, match="pairs needs columns"):
        pair_section(pairs.drop(columns="value"), query=reading, key=reading, title="x")


@pytest.mark.browser
def test_page_renders_offline_in_chromium(tmp_path, model, D, reading, chromium_paths):
    from browser import browser, requested_urls

    from interp.outputs.pages.features import feature_page, pair_section

    pairs = _pairs(model, D)
    shown = sorted(set(pairs["query_feature"]) | set(pairs["key_feature"]))
    section = pair_section(pairs, query=reading, key=reading, title="L1H1: top feature pairs")
    path = feature_page(reading, features=shown, sections=[section]).write(tmp_path / "f.html")
    script = """
    const cards = Array.from(document.querySelectorAll('section.feature-card'));
    const links = Array.from(document.querySelectorAll('tr.pair a'));
    const broken = links.filter(a => !document.getElementById(a.hash.slice(1))).length;
    const centre = document.querySelector('.ctx-tok.centre');
    return [cards.length, links.length, broken,
            centre ? getComputedStyle(centre).outlineStyle : null,
            cards.map(c => c.getBoundingClientRect().height)];
    """
    with browser(path, chromium_paths) as driver:
        n_cards, n_links, broken, outline, heights = driver.execute_script(script)
        logs = driver.get_log("browser")
        urls = requested_urls(driver)
    assert n_cards == len(shown) and n_links == 2 * len(pairs) and broken == 0
    assert outline == "solid" and min(heights) > 20
    assert [u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))] == []
    assert [e for e in logs if e["level"] == "SEVERE"] == []


def test_cli_writes_the_page_and_table(tmp_path, D, capsys):
    from interp.cli import main

    folder = D.save(tmp_path / "sae")  # its metadata names the model it was trained on
    page, table = tmp_path / "f.html", tmp_path / "f.csv"
    args = ["features", "--dictionary", str(folder), "--out", str(page), "--sequences", "6",
            "--seq-len", "40", "--top", "3", "--show", "5", "--table", str(table)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "estimate: read_features" in out and "never active" in out
    assert page.read_text().count('class="feature-card"') == 5
    df = pd.read_csv(table)
    assert list(df.columns[:3]) == ["feature", "density", "n_active"] and len(df) == D.d_sae
    assert main([*args[:3], "--out", str(tmp_path / "x.png")]) == 2
    assert main([*args, "--features", "3,99"]) == 2
    err = capsys.readouterr().err
    assert "must end in .html" in err and "--features 99 is not a feature" in err


def test_a_heads_top_feature_pairs_are_its_score_where_it_attends(model, tokens, D):
    """head_feature_pairs: each sequence's query at the last position, its key where the
    head attends most (past BOS); the mean score is the model's own hook_attn_scores there
    (to 1e-4 of their scale: float32 sums of pieces), and the feature pairs plus the rest
    make all of it."""
    from interp.analysis.heads.qk.pairs import head_feature_pairs

    t = tokens[:6]
    pairs = head_feature_pairs(model, t, layer=1, head=1, dictionary=D, top=5)
    _, c = model.run_with_cache(t, names_filter=["blocks.1.attn.hook_attn_scores",
                                                 "blocks.1.attn.hook_pattern"])  # fmt: skip
    keys = c["blocks.1.attn.hook_pattern"][:, 1, -1, 1:-1].argmax(-1) + 1
    s = c["blocks.1.attn.hook_attn_scores"][torch.arange(6), 1, -1, keys]
    assert abs(pairs.attrs["score"] - float(s.mean())) <= 1e-4 * float(s.abs().max())
    a = pairs.attrs
    assert a["feature_share"] + a["other_share"] == pytest.approx(1.0)
    assert len(pairs) == 5 and pairs["value"].is_monotonic_decreasing
    # share is value / score in float64: back to value within float64 rounding of its scale
    scale = max(1.0, float(pairs["value"].abs().max()))
    assert (pairs["share"] * a["score"] - pairs["value"]).abs().max() <= 1e-12 * scale


def test_cli_puts_a_heads_top_pairs_above_the_cards(tmp_path, D, capsys):
    from interp.cli import main

    folder = D.save(tmp_path / "sae")
    page = tmp_path / "f.html"
    args = ["features", "--dictionary", str(folder), "--out", str(page), "--sequences", "6",
            "--seq-len", "40", "--top", "3", "--show", "2", "--head", "L1H1"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    html = page.read_text()
    assert "L1H1: its top (query feature, key feature) pairs where it attends most" in html
    assert "L1H1: its top" in out
    n = html.count('<tr class="pair"')
    assert 1 <= n <= 20
    assert html.count('class="feature-card"') >= 2  # the pairs' features have their cards
    for bad, said in (("L7H0", "is not in induction-2l"), ("L0H1", "after --head L0H1"),
                      ("head1", "must name a head")):  # fmt: skip
        assert main([*args[:-1], bad]) == 2
        assert said in capsys.readouterr().err


@pytest.mark.slow
def test_smollm2_tokens_read_as_text_and_logits_through_its_rmsnorm(smollm):
    """On the real model: contexts in the tokenizer's text, logit effects through its
    RMSNorm (the readout identity), the pass cut at layer 18."""
    hook = "blocks.18.hook_resid_pre"
    S = Dictionary.random(d_in=576, d_sae=32, architecture="topk", k=4, hook_name=hook, seed=1)
    texts = ["def add(a, b):\n    return a + b\n", "import os\nimport sys\nprint(os.getcwd())\n"]
    tokens = smollm.to_tokens(texts)
    r = read_features(smollm, tokens[:, :10], dictionary=S, top=2, skip_columns=1, logits=3)
    row = r.contexts.iloc[0]
    assert row["token"] == smollm.to_str_tokens(tokens[row["sequence"], row["pos"]])[0]
    # the pass cut at layer 18 of 30 (0.6 of the blocks), then the encoder and the logit
    # effects through a 49,152-token unembedding, large beside 2 x 10 tokens: under a pass
    assert "[[" in row["context"] and 0.6 < r.features.attrs["forward_equivalents"] < 1.0
    want = _readout_effect(smollm, S.W_dec[5].detach()).topk(3).indices.tolist()
    lg = r.logits
    assert lg[(lg["feature"] == 5) & (lg["side"] == "top")]["token_id"].tolist() == want
    assert r.logits.attrs["final_norm"].startswith("RMS")


@pytest.mark.browser
def test_the_cli_head_page_renders_offline_in_chromium(tmp_path, D, capsys, chromium_paths):
    """``interp features --head L1H1``'s own page, in headless Chromium with the network cut:
    the pairs' table above the cards, every pair's feature links to its card, nothing is
    fetched and nothing logs an error."""
    from browser import browser, requested_urls

    from interp.cli import main

    folder = D.save(tmp_path / "sae")
    page = tmp_path / "head.html"
    args = ["features", "--dictionary", str(folder), "--out", str(page), "--sequences", "6",
            "--seq-len", "40", "--top", "3", "--show", "2", "--head", "L1H1"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    script = """
    const links = Array.from(document.querySelectorAll('tr.pair a'));
    const broken = links.filter(a => !document.getElementById(a.hash.slice(1))).length;
    const table = document.querySelector('tr.pair');
    const card = document.querySelector('section.feature-card');
    return [links.length, broken, document.querySelectorAll('tr.pair').length,
            table && card ? table.getBoundingClientRect().top < card.getBoundingClientRect().top
                          : null];
    """
    with browser(page, chromium_paths) as driver:
        n_links, broken, n_pairs, above = driver.execute_script(script)
        logs = driver.get_log("browser")
        urls = requested_urls(driver)
    assert n_pairs >= 1 and n_links == 2 * n_pairs and broken == 0
    assert above is True  # the head's pairs come before the cards
    assert [u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))] == []
    assert [e for e in logs if e["level"] == "SEVERE"] == []

"""Real pretrained models, offline: SmolLM2-135M (GGUF, GQA) and all-MiniLM-L6-v2 (BERT).

Each model is loaded once per session. The first SmolLM2 load dequantises the
GGUF file into the cache (about 30 s); later loads take a few seconds.
"""

import json
import shutil

import pytest
import torch

from interp import InterpError
from interp.analysis.ablation import ablate_head_groups, loss_metric
from interp.analysis.induction import head_scores, probe_tokens
from interp.datasets import repeated_random_tokens

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def smol_probe(smollm):
    bos = smollm.tokenizer.bos_token_id
    return repeated_random_tokens(4, 50, d_vocab=int(smollm.cfg.d_vocab), bos=bos, seed=0)


@pytest.fixture(scope="session")
def smol_scores(smollm, smol_probe):
    return head_scores(smollm, smol_probe.tokens, kinds=("induction", "previous_token"))


def test_smollm_shape_and_logits_match_hugging_face(smollm):
    assert (smollm.cfg.n_layers, smollm.cfg.n_heads) == (30, 9)
    toks = smollm.to_tokens("The river bank was muddy after the rain.")
    assert int(toks[0, 0]) == 1  # to_tokens prepends BOS id 1
    with torch.no_grad():
        ours, ref = smollm(toks), smollm.interp_hf_model(toks).logits
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


def test_smollm_has_induction_heads(smol_scores):
    assert len(smol_scores) == 270
    assert smol_scores["induction"].max() > 0.7


def test_ablating_top_induction_heads_vs_random(smollm, smol_probe, smol_scores):
    top = smol_scores.nlargest(6, "induction")["label"].tolist()
    gen = torch.Generator().manual_seed(0)
    others = smol_scores[~smol_scores["label"].isin(top)]["label"].tolist()
    groups = {"top-6 induction": top}
    for s in range(5):
        idx = torch.randperm(len(others), generator=gen)[:6].tolist()
        groups[f"random-6 draw {s}"] = [others[i] for i in idx]
    df = ablate_head_groups(
        smollm, smol_probe.tokens, groups, metric=loss_metric(smol_probe.loss_mask)
    ).set_index("group")
    random = df.drop(index="top-6 induction")["delta"]
    assert df.loc["top-6 induction", "delta"] > 3.0
    # Measured: most random draws cost well under 1 nat, but a draw that happens to hold a
    # critical non-induction head (L16H0 alone costs about 7 nats here) costs as much as the
    # induction heads; so the claim is about the typical draw, tested by the median.
    assert random.median() < 1.0


def test_minilm_loads_and_scores_but_refuses_loss(minilm):
    assert (minilm.cfg.n_layers, minilm.cfg.n_heads) == (6, 12)
    toks = minilm.to_tokens("the river bank")
    df = head_scores(minilm, probe_tokens(minilm, n=2, half_len=20), kinds=("previous_token",))
    assert len(df) == 72 and df["previous_token"].between(0, 1).all()
    with pytest.raises(InterpError, match="loss metrics are refused"):
        ablate_head_groups(minilm, toks, {"a": ["L0H0"]})


def test_corrupt_cache_is_detected_and_rebuilt(tmp_path, monkeypatch, smollm):
    from interp.models import pretrained

    src = pretrained.smollm2_cache()
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    dst = pretrained.smollm2_cache()
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    with open(weights, "r+b") as f:  # truncate: a partial copy
        f.truncate(weights.stat().st_size // 2)
    assert pretrained.cache_status(dst).startswith("weights truncated")
    meta = json.loads((dst / pretrained.MANIFEST).read_text())
    model = pretrained.load_model("smollm2-135m")  # rebuilds from the GGUF
    assert pretrained.cache_status(dst) == "ok"
    assert json.loads((dst / pretrained.MANIFEST).read_text())["sha256"] == meta["sha256"]
    assert model.cfg.n_layers == 30


def test_unknown_and_unreachable_models_fail_fast(monkeypatch):
    from interp.models import load_model

    with pytest.raises(InterpError, match="aliases: smollm2-135m, minilm-l6, induction-2l"):
        load_model("nope")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InterpError, match="hub is unreachable"):
        load_model("someone/some-model")


def test_circuits_and_patching_run_on_smollm(smollm):
    from interp.analysis import copying_scores, ov_circuit, patch_heads, qk_circuit
    from interp.analysis.ablation import logit_diff_metric

    d_vocab = smollm.cfg.d_vocab
    assert qk_circuit(smollm, 18, 6).shape == (d_vocab, d_vocab)
    assert ov_circuit(smollm, 18, 6).shape == (d_vocab, d_vocab)
    copy = copying_scores(smollm, heads=["L18H6", "L0H0"], top1=False).dropna()
    assert len(copy) == 2 and copy["copying_score"].between(-1, 1).all()
    clean = smollm.to_tokens("When Mary and John went to the store, John gave a drink to")
    corrupted = smollm.to_tokens("When Mary and John went to the store, Mary gave a drink to")
    mary, john = (smollm.to_single_token(w) for w in (" Mary", " John"))
    table = patch_heads(
        smollm, clean, corrupted, metric=logit_diff_metric(mary, john), heads=["L9H0", "L18H6"]
    )
    assert list(table["label"]) == ["L9H0", "L18H6"]
    assert table[["clean", "corrupted", "patched"]].notna().all().all()
    assert table["clean"].iloc[0] > 0 > table["corrupted"].iloc[0]  # the prompts disagree


def test_composition_runs_on_minilm(minilm):
    from interp.analysis import composition_scores

    df = composition_scores(minilm, "Q")
    assert len(df) == 15 * 12 * 12  # earlier-later layer pairs x heads x heads
    assert (df["score"] > 0).all() and df["baseline"].nunique() == 1


def test_a_directory_that_is_not_a_model_is_named(tmp_path):
    from interp.models import load_model

    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(InterpError, match="neither an interp checkpoint nor a Hugging Face model"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")  # looks like one, but is not loadable
    with pytest.raises(InterpError, match="cannot load a Hugging Face model"):
        load_model(str(tmp_path))


def test_smollm_k_composition_links_a_previous_token_head_to_an_induction_head(smollm, smol_scores):
    """The circuit read from the weights: the strongest K-composition pair runs from a
    previous-token head into one of the top induction heads."""
    from interp.analysis import composition_scores

    top = composition_scores(smollm, "K").nlargest(1, "score").iloc[0]
    scores = smol_scores.set_index("label")
    assert top["score"] > 3 * top["baseline"]
    assert scores.loc[top["src_label"], "previous_token"] > 0.5
    assert top["label"] in smol_scores.nlargest(6, "induction")["label"].tolist()

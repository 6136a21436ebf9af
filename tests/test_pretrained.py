"""Real pretrained models, offline: SmolLM2-135M (GGUF, GQA) and all-MiniLM-L6-v2 (BERT).

Each model is loaded once per session. The lab-level claims (induction heads,
ablation against random heads, sense curves) are checked on the pretrained
lab's own run in test_pretrained_lab.py; here the analyses run on the models.
"""

import pandas as pd
import pytest
import torch
from conftest import run_cli

from interp import InterpError
from interp.analysis.components.ablation import ablate_heads
from interp.analysis.heads.scores import head_scores, probe_tokens
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.datasets import repeated_random_tokens

pytestmark = pytest.mark.slow


def test_smollm_shape_and_logits_match_hugging_face(smollm):
    assert (smollm.cfg.n_layers, smollm.cfg.n_heads) == (30, 9)
    toks = smollm.to_tokens("The river bank was muddy after the rain.")
    assert int(toks[0, 0]) == 1  # to_tokens prepends BOS id 1
    with torch.no_grad():
        ours, ref = smollm(toks), smollm.interp_hf_model(toks).logits
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


def test_the_engine_is_exact_on_smollm(smollm):
    """Resumed passes (blocks before the edit skipped, unembedding only where the metric reads)
    equal the plain run_with_hooks loop on the real GQA model."""
    data = repeated_random_tokens(2, 12, d_vocab=int(smollm.cfg.d_vocab), bos=1, seed=3)
    heads = ["L0H3", "L17H4", "L29H8"]
    for metric in (loss_metric(data.loss_mask), logit_diff_metric(100, 200)):
        df = ablate_heads(smollm, data.tokens, metric=metric, heads=heads)
        assert df.attrs["engine"] == "resume-blocks"
        for r in df.itertuples():

            def hook(z, hook, h=r.head):
                z = z.clone()
                z[:, :, h] = 0.0
                return z

            with torch.no_grad():
                logits = smollm.run_with_hooks(
                    data.tokens, fwd_hooks=[(f"blocks.{r.layer}.attn.hook_z", hook)]
                )
            assert r.ablated == pytest.approx(
                float(metric(logits, data.tokens)), rel=1e-5, abs=1e-5
            )


def test_loss_from_a_cache_equals_a_forward(smollm):
    from interp.analysis.heads.icl import per_token_loss

    toks = smollm.to_tokens("One two three four five six seven eight nine ten.")
    _, cache = smollm.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_resid_post"))
    torch.testing.assert_close(
        per_token_loss(smollm, toks, cache=cache), per_token_loss(smollm, toks)
    )


def test_minilm_loads_and_scores_but_refuses_loss(minilm):
    assert (minilm.cfg.n_layers, minilm.cfg.n_heads) == (6, 12)
    toks = minilm.to_tokens("the river bank")
    df = head_scores(minilm, probe_tokens(minilm, n=2, half_len=20), stripes=("previous_token",))
    assert len(df) == 72 and df["previous_token"].between(0, 1).all()
    with pytest.raises(InterpError, match="logits are meaningless"):
        ablate_heads(minilm, toks)
    metric = lambda lg, t: lg[:, -1].norm()  # noqa: E731 - the user's own metric is theirs to define
    custom = ablate_heads(minilm, toks, heads=["L0H0", "L5H11"], metric=metric)
    assert custom.attrs["engine"] == "resume-blocks"  # the encoder's layers resume exactly too
    for r in custom.itertuples():

        def hook(z, hook, h=r.head):
            z = z.clone()
            z[:, :, h] = 0.0
            return z

        with torch.no_grad():
            logits = minilm.run_with_hooks(
                toks, fwd_hooks=[(f"blocks.{r.layer}.attn.hook_z", hook)]
            )
        # a norm of a logit row: positive, no cancellation, so its float32 rounding through
        # resumed layers is relative to itself: rel 1e-6 (about 8 ulps), no absolute floor
        assert r.ablated == pytest.approx(float(metric(logits, toks)), rel=1e-6)


def test_circuits_and_patching_run_on_smollm(smollm):
    from interp.analysis import copying_scores, ov_circuit, patch_heads, qk_circuit

    d_vocab = smollm.cfg.d_vocab
    assert qk_circuit(smollm, layer=18, head=6, offset=1).shape == (d_vocab, d_vocab)
    assert ov_circuit(smollm, layer=18, head=6).shape == (d_vocab, d_vocab)
    copy = copying_scores(smollm, heads=["L18H6", "L0H0"], top1=False)
    assert len(copy) == 2 and copy["copying_score"].between(-1, 1).all()
    clean = smollm.to_tokens("When Mary and John went to the store, John gave a drink to")
    corrupted = smollm.to_tokens("When Mary and John went to the store, Mary gave a drink to")
    mary, john = (smollm.to_single_token(w) for w in (" Mary", " John"))
    table = patch_heads(
        smollm,
        clean,
        corrupted_tokens=corrupted,
        metric=logit_diff_metric(mary, john),
        heads=["L9H0", "L18H6"],
    )
    assert list(table["label"]) == ["L9H0", "L18H6"]
    assert table["clean"].iloc[0] > 0 > table["corrupted"].iloc[0]  # the prompts disagree


def test_composition_runs_on_minilm(minilm):
    from interp.analysis import composition_scores

    df = composition_scores(minilm, component="Q")
    assert len(df) == 15 * 12 * 12  # earlier-later layer pairs x heads x heads
    assert (df["score"] > 0).all() and df["baseline"].nunique() == 1


def test_ablate_and_patch_smollm_from_the_command_line(tmp_path, capsys):
    from interp.cli import main

    out = tmp_path / "t.csv"
    proc = run_cli(
        "ablate",
        "--model",
        "smollm2-135m",
        "--heads",
        "L18H6",
        "--repeated",
        "20",
        "--out",
        str(out),
        "--batch",
        "4",
    )
    assert proc.returncode == 0, proc.stderr
    row = pd.read_csv(out).iloc[0]
    assert row["label"] == "L18H6" and row["effect"] > 0  # removing the induction head hurts
    pout = tmp_path / "p.csv"
    rc = main(
        [
            "patch", "--model", "smollm2-135m",
            "--clean", "When Mary and John went to the store, John gave a drink to",
            "--corrupted", "When Mary and John went to the store, Mary gave a drink to",
            "--logit-diff", " Mary, John", "--heads", "L23H3,L20H0", "--out", str(pout),
        ]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert pd.read_csv(pout)["normalized"].max() > 0.1


def test_direct_logit_attribution_adds_up_on_smollm(smollm):
    """SmolLM2 (RMSNorm with a learned weight, nothing folded, GQA): the heads, MLPs and
    embedding shares sum to its own logit difference IO - S on name-mover prompts."""
    from interp.analysis import direct_logit_attribution
    from interp.datasets import name_mover_prompts

    p = name_mover_prompts(4, seed=0, tokenizer=smollm.tokenizer)
    df = direct_logit_attribution(smollm, p.clean, answer=p.io_ids, wrong=p.s_ids)
    with torch.no_grad():
        last = smollm(p.clean)[:, -1].float()
    rows = torch.arange(len(p))
    want = float((last[rows, p.io_ids] - last[rows, p.s_ids]).mean())
    assert df["value"].sum() == pytest.approx(want, rel=1e-4)
    assert "remainder" not in set(df["component"]) and (df["component"] == "head").sum() == 270
    assert "RMS" in df.attrs["final_norm"]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_the_lens_over_256_positions_holds_a_bounded_slab(smollm):
    """30 layers x 256 positions x 49,152 tokens would be 1.6 GB of logits at once; the lens
    unembeds 64 MiB chunks. Peak resident memory is sampled while it runs, beside a cache
    built before (the residual stream of 31 stages: 18 MB)."""
    import gc
    import threading

    from interp.analysis import logit_lens

    tokens = torch.randint(1000, 20000, (1, 256), generator=torch.Generator().manual_seed(0))
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{l}.hook_resid_post" for l in range(30))]
    with torch.no_grad():
        _, cache = smollm.run_with_cache(tokens, names_filter=names)
    gc.collect()
    base, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            done.wait(0.002)

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        df = logit_lens(smollm, tokens, k=3, cache=cache)
    finally:
        done.set()
        watcher.join()
    grew = max(peak[0], _rss()) - base
    full = 31 * 256 * 49152 * 4
    assert len(df) == 31 * 256
    assert grew < 400 * 2**20, f"lens grew resident memory by {grew / 2**20:.0f} MiB"
    assert grew < full / 4  # the whole logits tensor was never held


def test_smollm_induction_heads_are_labelled_induction(smollm):
    """The atlas labels the pretrained lab's top six induction heads (L18H6, L17H3-5, L18H7,
    L23H2) induction on the standard probe; four sequences keep this to a few passes."""
    from interp.analysis import head_atlas

    tokens = probe_tokens(smollm, n=4, seed=0)
    df = head_atlas(smollm, tokens).set_index("label")
    known = ["L18H6", "L17H3", "L17H4", "L17H5", "L18H7", "L23H2"]
    assert (df.loc[known, "role"] == "induction").all(), df.loc[known, ["role", "induction"]]
    assert df.loc["L16H0", "role"] == "previous-token"
    # two probe passes, the control's scores and the weight products, as the estimate says
    plan = head_atlas(smollm, tokens, estimate=True)
    assert df.attrs["forward_equivalents"] == plan.forward_equivalents > 2.0
    assert not pd.isna(df.loc["L18H6", "successor"])  # the tokenizer has ordinals


def test_minilm_heads_read_the_block_input_post_norm(minilm):
    """BERT normalises after attention: its heads read ``hook_resid_pre`` itself, so the
    runtime's head input reproduces the model's queries, and the atlas's recomputed patterns
    match the model's (it refused MiniLM while ln1's output stood for the heads' input)."""
    from interp.analysis import head_atlas
    from interp.runtime import runtime_of

    rt = runtime_of(minilm)
    assert rt.head_input_hook(1) == "blocks.1.hook_resid_pre" and rt.norm("ln1", 1) is None
    toks = minilm.to_tokens("the river bank by the money bank")
    _, cache = minilm.run_with_cache(toks)
    q = torch.einsum("bpd,hde->bphe", cache[rt.head_input_hook(1)], minilm.W_Q[1]) + minilm.b_Q[1]
    assert float((q - cache["blocks.1.attn.hook_q"]).abs().max()) < 1e-4
    atlas = head_atlas(minilm, probe_tokens(minilm, n=2, half_len=12))
    assert atlas.attrs["pattern_gap"] < 1e-3

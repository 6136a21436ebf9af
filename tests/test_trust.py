"""Numbers you can trust from any input (issue 15): each case here failed silently before.

* every ``cache=`` is checked against its tokens (one rule, in
  ``interp.engine.cache.check_cache``), for every public function that takes one;
* a mean over one sequence is refused, not a table of zeros;
* a bridge whose logits disagree with its Hugging Face model is refused at load;
* the next-token loss is refused on encoders;
* work that cannot fit is refused before it starts; long work shows progress;
* the raw errors that were left are one line naming the problem and the fix.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import run_cli
from flop_meter import FlopMeter

import interp.analysis as A
from interp import CheckpointError, InterpError
from interp.cli import main
from interp.datasets import repeated_random_tokens
from interp.models import load_model
from interp.models.hf import random_gpt2

# ------------------------------------------------------------------ the cache rule


def _items(model):
    from interp.analysis import encode_word

    return [
        encode_word(model, "t2 t3 t5 t7", word="t7", clue="t3"),
        encode_word(model, "t4 t3 t6 t7", word="t7", clue="t3"),
    ]


def _item_tokens(items):
    return torch.cat([it.tokens for it in items])


# name -> (model kind, call(model, data, cache)); data are [batch, pos] tokens or word items.
def _twin(t):
    """A corrupted prompt for ``t``: every token but the first shifted by one id. (Reordering
    the batch would not do: a metric averaged over the batch gives the same value for both
    runs, equal on some CPUs and a rounding apart on others.)"""
    u = (t + 1) % 64
    u[:, 0] = t[:, 0]
    return u


MEAN_L1H1 = [A.HeadAblation(heads=["L1H1"], ablation="mean")]
CASES = {
    "ablate_heads": ("ind", lambda m, t, c: A.ablate_heads(m, t, ablation="mean", cache=c)),
    "generate": (
        "ind",
        lambda m, t, c: A.generate(
            m, t, max_new_tokens=3, interventions=MEAN_L1H1, cache=c
        ).frame(),
    ),
    "compare_generations": (
        "ind",
        lambda m, t, c: A.compare_generations(
            m, t, interventions=MEAN_L1H1, max_new_tokens=3, cache=c
        ),
    ),
    "ablate_head_groups": (
        "ind",
        lambda m, t, c: A.ablate_head_groups(
            m, t, groups={"g": ["L1H1"]}, ablation="mean", cache=c
        ),
    ),
    "attention_patterns": ("ind", lambda m, t, c: A.attention_patterns(m, t, cache=c)),
    "attribute_heads": ("ind", lambda m, t, c: A.attribute_heads(m, t, ablation="mean", cache=c)),
    "head_scores": ("ind", lambda m, t, c: A.head_scores(m, t, cache=c)),
    "induction_scores": ("ind", lambda m, t, c: A.induction_scores(m, t, cache=c)),
    "previous_token_scores": ("ind", lambda m, t, c: A.previous_token_scores(m, t, cache=c)),
    "duplicate_token_scores": ("ind", lambda m, t, c: A.duplicate_token_scores(m, t, cache=c)),
    "in_context_learning_score": (
        "ind",
        lambda m, t, c: A.in_context_learning_score(m, t, cache=c),
    ),
    "per_token_loss": ("ind", lambda m, t, c: A.per_token_loss(m, t, cache=c)),
    "null_space_probe": (
        "ind",
        lambda m, t, c: A.null_space_probe(m, t, layer=1, head=1, n_directions=2, cache=c),
    ),
    "read_fraction": ("ind", lambda m, t, c: A.read_fraction(m, t, heads=["L1H1"], cache=c)),
    "patch_heads": (
        "ind",
        lambda m, t, c: A.patch_heads(
            m, t, corrupted_tokens=_twin(t), metric=A.logit_diff_metric(3, 4), cache=c
        ),
    ),
    "direct_logit_attribution": (
        "ind",
        lambda m, t, c: A.direct_logit_attribution(m, t, answer=3, wrong=4, cache=c),
    ),
    "logit_lens": ("ind", lambda m, t, c: A.logit_lens(m, t, at=[-1], cache=c)),
    "qk_attribution": ("ind", lambda m, t, c: A.qk_attribution(m, t, layer=1, head=1, cache=c)),
    "rotary_bands": ("llama", lambda m, t, c: A.rotary_bands(m, t, layer=1, head=0, cache=c)),
    "head_atlas": ("ind", lambda m, t, c: A.head_atlas(m, t, cache=c)),
    "qk_interventions": (
        "ind",
        lambda m, t, c: A.qk_interventions(m, t, layer=1, head=1, top=1, cache=c),
    ),
    "patch_components": (
        "ind",
        lambda m, t, c: A.patch_components(
            m,
            t,
            corrupted_tokens=_twin(t),
            component="resid_pre",
            by="layer",
            metric=A.logit_diff_metric(3, 4),
            cache=c,
        ),
    ),
    "ablate_layers": ("ind", lambda m, t, c: A.ablate_layers(m, t, ablation="mean", cache=c)),
    "ablate_mlps": (
        "gpt2",
        lambda m, items, c: A.ablate_mlps(m, _item_tokens(items), ablation="mean", cache=c),
    ),
    "path_patch": (
        "ind",
        lambda m, t, c: A.path_patch(
            m, t, corrupted_tokens=_twin(t), metric=A.logit_diff_metric(3, 4), cache=c
        ),
    ),
    "attribute_edges": (
        "ind",
        lambda m, t, c: A.attribute_edges(
            m, t, corrupted_tokens=_twin(t), metric=A.logit_diff_metric(3, 4), cache=c
        ),
    ),
    "evaluate_circuit": (
        "ind",
        lambda m, t, c: A.evaluate_circuit(
            m,
            t,
            edges=["L0H1 -> L1H1.k"],
            metric=A.logit_diff_metric(3, 4),
            ablation="mean",
            cache=c,
        ),
    ),
    "circuit_curve": (
        "ind",
        lambda m, t, c: A.circuit_curve(
            m,
            t,
            scores=np.ones((6, 13)),
            sizes=[3],
            metric=A.logit_diff_metric(3, 4),
            ablation="zero",
            cache=c,
        ),
    ),
    "find_circuit": (
        "ind",
        lambda m, t, c: A.evaluate_circuit(
            m,
            t,
            metric=A.logit_diff_metric(3, 4),
            ablation="zero",
            cache=c,
            edges=A.find_circuit(
                m,
                t,
                scores=np.arange(78.0).reshape(6, 13),
                metric=A.logit_diff_metric(3, 4),
                ablation="zero",
                target=0.5,
                cache=c,
            ),
        ),
    ),
    "feature_head_attribution": (
        "ind",
        lambda m, t, c: A.feature_head_attribution(
            m, t, dictionary=_z_dictionary(), query_positions=[-1, 3], cache=c
        ),
    ),
    "word_states": ("gpt2", lambda m, items, c: A.word_states(m, items, cache=c)),
    "clue_attention": ("gpt2", lambda m, items, c: A.clue_attention(m, items, cache=c)),
}


def _z_dictionary():
    """A random TopK dictionary on the shipped model's layer-1 ``hook_z`` (2 heads x 32)."""
    from interp.dictionaries import Dictionary

    return Dictionary.random(
        d_in=64, d_sae=32, architecture="topk", k=3, hook_name="blocks.1.attn.hook_z", seed=0
    )


def _public_functions():
    return {
        n: getattr(A, n)
        for n in A.__all__
        if inspect.isfunction(getattr(A, n)) or isinstance(getattr(A, n), functools.partial)
    }


def test_every_function_that_takes_a_cache_is_covered():
    takes = {
        n for n, f in _public_functions().items() if "cache" in inspect.signature(f).parameters
    }
    assert takes == set(CASES), "add a CASES entry for each function that takes cache="


@pytest.fixture(scope="module")
def gpt2():
    return random_gpt2(2, vocab=30)


@functools.lru_cache(maxsize=1)
def _llama():
    from interp.models.hf import random_llama

    return random_llama(2, vocab=30)


def _setup(kind, induction_model, gpt2):
    if kind == "llama":  # a rotary model, for the analyses that need one
        t = torch.randint(2, 30, (3, 8), generator=torch.Generator().manual_seed(1))
        return _llama(), t, t, (t + 1) % 30
    if kind == "ind":
        t = repeated_random_tokens(4, 10, d_vocab=64, seed=1).tokens
        other = repeated_random_tokens(4, 10, d_vocab=64, seed=2).tokens
        return induction_model, t, t, other
    items = _items(gpt2)
    t = _item_tokens(items)
    return gpt2, items, t, (t + 1) % 30


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    else:
        a = a.select_dtypes("number").to_numpy(dtype=float)
        b = b.select_dtypes("number").to_numpy(dtype=float)
        # a cache against the analysis's own pass: float32 rounding of other passes, a few
        # ulps of each column's size (effects and scores are differences of values that
        # size), so atol is 1e-6 of that size (about 8 ulps), not 1e-6 absolute
        sizes = np.nan_to_num(np.abs(b), nan=0.0, posinf=0.0).max(axis=0, initial=0.0)
        for j, size in enumerate(sizes):
            np.testing.assert_allclose(a[:, j], b[:, j], rtol=1e-5, atol=1e-6 * max(1.0, size))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cache_is_checked_against_its_tokens(name, induction_model, gpt2):
    kind, call = CASES[name]
    model, data, tokens, other = _setup(kind, induction_model, gpt2)
    _, right = model.run_with_cache(tokens)
    _equal(call(model, data, right), call(model, data, None))  # the right cache: same numbers
    _, wrong = model.run_with_cache(other)
    with pytest.raises(InterpError, match="does not belong to these tokens"):
        call(model, data, wrong)
    _, shorter = model.run_with_cache(tokens[:, :-1])
    with pytest.raises(InterpError, match="does not belong to these tokens: .* has shape"):
        call(model, data, shorter)
    with pytest.raises(InterpError, match="the cache is empty"):
        call(model, data, {})
    # A cache with only some hooks is completed on the checked tokens, never mixed in.
    _, partial = model.run_with_cache(tokens, names_filter=lambda n: n == "hook_embed")
    _equal(call(model, data, partial), call(model, data, None))


# Tables made without a model run, or from other tables: their calls for the schema test.
TABLES_WITHOUT_CACHE = {
    "copying_scores": ("ind", lambda m, t: A.copying_scores(m, heads=["L1H1"])),
    "composition_scores": ("ind", lambda m, t: A.composition_scores(m, component="K")),
    "positional_kernel": ("ind", lambda m, t: A.positional_kernel(m, layer=1, head=1)),
    "pattern_scores": (
        "ind",
        lambda m, t: A.pattern_scores([torch.full((4, 2, 21, 21), 1 / 21)] * 2, t),
    ),
    "sense_similarity": (
        "ind",
        lambda m, t: A.sense_similarity(
            torch.randn(4, 3, 8), words=["w"] * 4, senses=["a", "a", "b", "b"]
        ),
    ),
    "nearest_neighbour_probe": (
        "ind",
        lambda m, t: A.nearest_neighbour_probe(
            torch.randn(8, 3, 8), words=["w"] * 8, senses=["a", "b"] * 4, n_splits=2
        ),
    ),
    "edge_agreement": (
        "ind",
        lambda m, t: A.edge_agreement(
            pd.Series([5.0, 0.1, -3.0, 0.0], index=list("abcd")),
            pd.Series([2.0, 0.5, -0.2, 0.3], index=list("abcd")),
            threshold=1.0,
        ),
    ),
    "estimate_agreement": (
        "ind",
        lambda m, t: A.estimate_agreement(
            pd.Series([3.0, -2.0, 0.5, 0.1], index=list("abcd")),
            pd.Series([2.0, -0.1, 0.4, 0.0], index=list("abcd")),
            top=2,
            within=(2,),
        ),
    ),
}


def test_every_table_function_is_in_the_schema_test():
    tables = {
        n
        for n, f in _public_functions().items()
        if "DataFrame" in str(inspect.signature(f).return_annotation)
    }
    assert tables <= set(CASES) | set(TABLES_WITHOUT_CACHE), tables - set(CASES)


@pytest.mark.parametrize("name", sorted(set(CASES) | set(TABLES_WITHOUT_CACHE)))
def test_every_table_follows_the_schema(name, induction_model, gpt2):
    """One attrs schema (interp.outputs.frames.SCHEMA) for every table of every function."""
    import interp
    from interp.outputs.frames import METHODS, SCHEMA

    if name in TABLES_WITHOUT_CACHE:
        kind, call = TABLES_WITHOUT_CACHE[name]
        model, data, _, _ = _setup(kind, induction_model, gpt2)
        df = call(model, data)
    else:
        kind, call = CASES[name]
        model, data, _, _ = _setup(kind, induction_model, gpt2)
        df = call(model, data, None)
    if not isinstance(df, pd.DataFrame):
        return  # tensors (patterns, per-token losses, word states) carry no attrs
    a = df.attrs
    assert set(SCHEMA) <= set(a), f"{name} lacks {set(SCHEMA) - set(a)}"
    made_by = {"find_circuit": "evaluate_circuit"}  # its case evaluates the circuit it found
    one_stripe = ("induction_scores", "previous_token_scores", "duplicate_token_scores")
    made_by |= dict.fromkeys(one_stripe, "head_scores")  # head_scores with one stripe
    assert a["analysis"] == made_by.get(name, name)
    assert a["method"] in METHODS and a["version"] == interp.__version__
    assert a["ablation"] in (None, "zero", "mean", "resample", "patch")
    assert a["direction"] in (None, "noising", "denoising")
    assert isinstance(a["forward_equivalents"], float) and a["forward_equivalents"] >= 0
    assert isinstance(a["description"], str) and a["description"]
    if a["ablation"] == "patch":
        assert a["direction"] is not None, f"{name}: a patch says which way it went"


def test_the_cost_counts_every_pass_an_analysis_ran(induction_model):
    """forward_equivalents count the ablation values' pass and the passes that complete a
    cache, not only the sweep: counted on the model itself, one hook per pass."""
    m = induction_model
    t = repeated_random_tokens(4, 8, d_vocab=64, seed=0).tokens
    passes = []
    handle = m.blocks[0].register_forward_pre_hook(lambda mod, args: passes.append(1))
    try:
        A.ablate_heads(m, t, ablation="zero", heads=["L1H1"])  # once-per-model checks run here
        A.direct_logit_attribution(m, t, answer=3)  # and DLA's (its readout check)
        passes[:] = []
        zero = A.ablate_heads(m, t, ablation="zero", heads=["L1H1"])
        n_zero, passes[:] = len(passes), []
        with FlopMeter() as flops:
            mean = A.ablate_heads(m, t, ablation="mean", heads=["L1H1"])
        assert len(passes) == n_zero + 1  # the pass the means come from
        # it counts what it ran: the FLOPs torch counts, over a plain forward's (issue 44)
        with torch.no_grad(), FlopMeter() as plain:
            m(t)
        extra = mean.attrs["forward_equivalents"] - zero.attrs["forward_equivalents"]
        assert 0.5 < extra < 1.0  # the means' pass stops after layer 1: no unembedding
        # within 6%: the means' pass stops at L1's hook_z, and a pass stopped inside a block
        # counts that block whole (here its W_O, an eighth of the blocks' products, is not run)
        assert mean.attrs["forward_equivalents"] == pytest.approx(
            flops.total / plain.total, rel=0.06
        )
        _, embed_only = m.run_with_cache(t, names_filter=["hook_embed"])
        passes[:] = []
        dla = A.direct_logit_attribution(m, t, answer=3, cache=embed_only)
        # completing it: a pass through every block, no unembedding (under 1: issue 44)
        assert len(passes) == 1 and 0.8 < dla.attrs["forward_equivalents"] < 1.0
        _, full = m.run_with_cache(t)
        passes[:] = []
        dla = A.direct_logit_attribution(m, t, answer=3, cache=full)
        assert passes == [] and dla.attrs["forward_equivalents"] == 0.0
    finally:
        handle.remove()


def test_the_check_uses_a_token_dependent_activation(induction_model):
    """hook_pos_embed is the same for any tokens of a length, so it cannot vouch for them."""
    t = repeated_random_tokens(2, 6, d_vocab=64, seed=1).tokens
    _, c = induction_model.run_with_cache(t.flip(1), names_filter=["hook_pos_embed"])
    with pytest.raises(InterpError, match="no activation of this model that depends on the tokens"):
        A.head_scores(induction_model, t, cache=c)
    _, c = induction_model.run_with_cache(
        t.flip(1), names_filter=lambda n: "hook_pattern" in n or n == "hook_pos_embed"
    )
    with pytest.raises(InterpError, match="blocks.0.attn.hook_pattern differs"):
        A.head_scores(induction_model, t, cache=c)


@pytest.mark.parametrize("kind", ["ind", "gpt2", "llama-gqa"])
def test_a_stopped_forward_equals_a_full_cache_and_leaves_no_hooks(kind, induction_model, gpt2):
    """cache_of ends the pass once the last hook asked for has fired (what every cache
    completion and pattern read uses): the same tensors as run_with_cache, bridge aliases
    included, and the model afterwards exactly as before (no hook left behind)."""
    from interp.engine.cache import cache_of
    from interp.models.hf import random_llama

    model = {"ind": induction_model, "gpt2": gpt2}.get(kind) or random_llama(2, vocab=30)
    t = repeated_random_tokens(2, 5, d_vocab=30, seed=4).tokens
    names = ["blocks.0.attn.hook_z", "blocks.0.hook_resid_post", "blocks.1.attn.hook_pattern"]
    with torch.no_grad():
        before = model(t)
        _, full = model.run_with_cache(t, names_filter=names)
    got = cache_of(model, t, [*names, "blocks.0.attn.hook_z"])  # a repeat is read once
    assert list(got) == names
    for n in names:
        assert torch.equal(got[n], full[n]), n
    with torch.no_grad():
        assert torch.equal(model(t), before)


# ------------------------------------------------------------------ mean of one sequence


def test_mean_ablation_of_one_sequence_is_refused(induction_model):
    t = repeated_random_tokens(3, 8, d_vocab=64, seed=0).tokens
    for call in (
        lambda: A.ablate_heads(induction_model, t[:1], ablation="mean"),
        lambda: A.ablate_head_groups(
            induction_model, t[:1], groups={"g": ["L1H1"]}, ablation="mean"
        ),
        lambda: A.attribute_heads(induction_model, t[:1], ablation="mean"),
    ):
        with pytest.raises(InterpError, match="mean of one sequence is the sequence"):
            call()
    with pytest.raises(InterpError, match="over one reference sequence"):
        A.ablate_heads(induction_model, t, ablation="mean", reference_tokens=t[:1])
    # with a reference batch, one sequence is fine: the mean is over the references
    df = A.ablate_heads(induction_model, t[:1], ablation="mean", reference_tokens=t)
    assert df["effect"].abs().max() > 0.01


def test_mean_ablation_of_a_prompt_on_the_command_line(tmp_path, capsys):
    code = main(
        [
            "ablate",
            "--ablation",
            "mean",
            "--prompt",
            "0 5 6 7 5 6 7",
            "--out",
            str(tmp_path / "t.csv"),
        ]
    )
    assert code == 2 and "mean of one sequence" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()


# ------------------------------------------------------------------ bridges vs Hugging Face


def _falcon_dir(tmp_path, *, multi_query):
    from transformers import FalconConfig, FalconForCausalLM

    torch.manual_seed(0)
    cfg = FalconConfig(
        vocab_size=50,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_kv_heads=2,
        new_decoder_architecture=True,
        multi_query=multi_query,
        bos_token_id=0,
        eos_token_id=1,
        architectures=["FalconForCausalLM"],
        interp_tokenizer="word",  # a toy folder over the words t0 .. tN: no tokenizer files
    )
    d = tmp_path / f"falcon-mq{int(multi_query)}"
    FalconForCausalLM(cfg).save_pretrained(d)
    return d


def test_a_bridge_that_disagrees_with_hugging_face_is_refused(tmp_path):
    # TransformerLens's Falcon adapter splits this fused QKV weight in the wrong layout.
    with pytest.raises(InterpError, match=r"FalconForCausalLM .* logits differ by up to"):
        load_model(_falcon_dir(tmp_path, multi_query=False))
    with pytest.raises(InterpError, match="TransformerLens cannot wrap this FalconForCausalLM"):
        load_model(_falcon_dir(tmp_path, multi_query=True))


def test_agreeing_bridges_load_and_the_verdict_is_kept(tmp_path, smollm):
    from interp.models import pretrained
    from interp.models.hf import VERDICT, check_agreement

    assert (pretrained.smollm2_cache() / VERDICT).is_file()  # the converted copy's verdict
    ref = torch.zeros(1, 3, 5)
    assert check_agreement(ref + 1e-7, ref, arch="X") < 1e-6
    with pytest.raises(InterpError, match="differ by up to 0.5"):
        check_agreement(ref + 0.5, ref, arch="X")


# ------------------------------------------------------------------ encoders and the loss


def test_next_token_loss_is_refused_on_an_encoder_with_a_head(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    d = tmp_path / "bert"
    BertForMaskedLM(
        BertConfig(
            vocab_size=40,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            architectures=["BertForMaskedLM"],
            interp_tokenizer="word",  # a toy folder: no tokenizer files
        )
    ).save_pretrained(d)
    model = load_model(d)
    t = torch.randint(2, 40, (2, 6))
    for call in (
        lambda: A.ablate_heads(model, t),
        lambda: A.per_token_loss(model, t),
        lambda: A.attribute_heads(model, t),
    ):
        with pytest.raises(InterpError, match="no meaning on an encoder"):
            call()
    # a metric that reads what an encoder has is fine
    df = A.ablate_heads(model, t, metric=A.logit_diff_metric(5, 6, at=2))
    assert len(df) == model.cfg.n_layers * model.cfg.n_heads


# ------------------------------------------------------------------ bounded work


def test_a_batch_that_cannot_fit_is_refused_before_any_work(tmp_path):
    proc = run_cli("ablate", "--batch", "100000000", "--out", str(tmp_path / "t.csv"))
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "GiB" in err and "available" in err, err
    assert "smaller --batch" in err and not (tmp_path / "t.csv").exists()


def test_long_probes_show_progress(induction_model, capsys):
    t = repeated_random_tokens(2, 6, d_vocab=64, seed=1).tokens
    A.null_space_probe(induction_model, t, layer=1, head=1, n_directions=3)
    assert "null-space probe" not in capsys.readouterr().err  # 12 passes: no bar
    A.null_space_probe(induction_model, t, layer=1, head=1, n_directions=26, control=True)
    assert "null-space probe" in capsys.readouterr().err  # 104 passes: a bar


def test_subspaces_build_the_large_complements_only_when_read():
    from interp.analysis.heads.subspace import subspaces

    rng = np.random.default_rng(0)
    M = rng.standard_normal((300, 20))  # an embedding-shaped weight: d_out >> d_in
    s = subspaces(M)
    assert s.rank == 20 and s.nullity == 0 and s.shape == (300, 20)
    assert "left_null_space" not in vars(s)  # nothing 300 x 300 was built
    left = s.left_null_space
    assert left.shape == (280, 300)
    # float64 throughout (numpy SVD of float64 inputs with entries of order 1): 1e-10 absolute
    # is about 1e6 ulps of that scale, well above its rounding
    np.testing.assert_allclose(left @ M, 0, atol=1e-10)
    np.testing.assert_allclose(left @ left.T, np.eye(280), atol=1e-10)
    low = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 9))  # rank 2 of 6 x 9
    s = subspaces(low)
    assert (s.rank, s.nullity, s.null_space.shape, s.left_null_space.shape) == (
        2,
        7,
        (7, 9),
        (4, 6),
    )
    np.testing.assert_allclose(low @ s.null_space.T, 0, atol=1e-10)
    np.testing.assert_allclose(s.left_null_space @ low, 0, atol=1e-10)


# ------------------------------------------------------------------ raw errors, now one line


def test_bad_inputs_to_the_api_are_named(tmp_path, induction_model):
    t = repeated_random_tokens(2, 6, d_vocab=64, seed=1).tokens
    with pytest.raises(InterpError, match="must return a scalar, got shape"):
        A.attribute_heads(induction_model, t, metric=lambda logits, tokens: logits[:, -1, :3])
    with pytest.raises(InterpError, match=r"takes \(logits\), but metrics are called as"):
        A.ablate_heads(induction_model, t, metric=lambda logits: logits.mean())
    with pytest.raises(InterpError, match="CUDA is not available"):
        load_model("induction-2l", device="cuda:0") if not torch.cuda.is_available() else (
            _raise_cuda()
        )
    with pytest.raises(InterpError, match="unknown device 'tpu'"):
        load_model("induction-2l", device="tpu")
    with pytest.raises(InterpError, match="torch.int64 cannot hold model weights"):
        load_model("induction-2l", dtype=torch.int64)
    with pytest.raises(InterpError, match="on the meta device"):
        A.head_scores(induction_model, torch.zeros(2, 8, dtype=torch.long, device="meta"))
    with pytest.raises(InterpError, match="layer must be an integer, got str '1'"):
        A.null_space_probe(induction_model, t, layer="1", head=1)


def _raise_cuda():  # pragma: no cover - only on machines with CUDA
    raise InterpError("CUDA is not available")


def _gpt2_dir(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from interp.models.hf_tokenizers import word_tokenizer

    d = tmp_path / "gpt2"
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=30)
    GPT2LMHeadModel(config).save_pretrained(d)
    word_tokenizer(30).save_pretrained(d)
    return d


def test_a_truncated_weights_file_is_a_checkpoint_error(tmp_path):
    d = _gpt2_dir(tmp_path)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="damaged or incomplete"):
        load_model(d)
    code = main(["ablate", "--model", str(d), "--out", str(tmp_path / "t.csv")])
    assert code == 2


def test_tokenizer_checks_run_before_the_weights_load(tmp_path, capsys):
    """A folder whose weights are damaged: the tokenizer's answer comes first, so the
    weights were never read (and no pass plan was printed)."""
    d = _gpt2_dir(tmp_path)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    out = str(tmp_path / "t.csv")
    cases = [
        (["patch", "--model", str(d), "--clean", "t2 t3", "--corrupted", "t2 t4",
          "--logit-diff", "t5 t6,t7", "--out", out], "is 2 tokens for this tokenizer"),
        (["ablate", "--model", str(d), "--prompt", "t2 t3 t4", "--positions", "7",
          "--out", out], "--positions [7] out of range: the prompt has 4 tokens"),
    ]  # fmt: skip
    for argv, message in cases:
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert message in captured.err and "forward passes" not in captured.out, captured.err


def test_cli_input_errors_are_one_line(tmp_path, capsys):
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 5), dtype=np.int64))
    out = str(tmp_path / "t.csv")
    cases = [
        (["ablate", "--tokens", str(empty), "--out", out], "holds no token ids"),
        (["ablate", "--prompt", "0 5 6", "--batch", "4", "--out", out], "drop --batch"),
        (["ablate", "--device", "tpu", "--out", out], "unknown device 'tpu'"),
        (["lab", "bank-sense", "--device", "cpu", "--out", str(tmp_path / "lab")],
         "builds its own small models"),
    ]  # fmt: skip
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_duplicate_heads_warn_once_in_one_line(tmp_path, capsys):
    out = str(tmp_path / "t.csv")
    assert main(["ablate", "--heads", "L1H1,l1h1,L0H1", "--out", out, "--top", "0"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert err == ["interp: warning: --heads names L1H1 more than once; each is used once"]

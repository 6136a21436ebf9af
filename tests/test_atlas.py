"""The head atlas (issue 24): every column against an independent computation of its definition.

Pattern columns are recomputed from the model's own ``hook_pattern`` with plain loops over
the definition; OV columns from :func:`interp.analysis.ov_circuit` materialised and read
row by row (and :func:`interp.analysis.copying_scores`' FactoredMatrix eigenvalues); the
dominant band from :func:`interp.analysis.rotary_bands`; the kernel's peak from
:func:`interp.analysis.positional_kernel`. On our attention-only model and a random Llama
with grouped-query attention; SmolLM2's known induction heads are checked in
test_pretrained.py, beside the other tests of the session's one SmolLM2.
"""

import numpy as np
import pytest
import torch
import transformers as T

import interp.analysis as A
from interp.analysis.heads.atlas import probe as atlas_probe
from interp.analysis.heads.ov_scores import ordinal_runs, sample_ids
from interp.core.errors import InterpError
from interp.models.hf import bridge_from_hf

RTOL = 1e-5


def _llama():
    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        vocab_size=40, bos_token_id=0, eos_token_id=1, pad_token_id=1, num_hidden_layers=2,
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, attention_bias=True,
    )  # fmt: skip
    hf = T.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return bridge_from_hf(hf, architecture_name="meta-llama/Llama-3.2-1B")


@pytest.fixture(scope="module")
def llama():
    return _llama()


def _hand_pattern_columns(model, tokens):
    """prev / induction / duplicate (interp convention), sink, entropy, distance by loops."""
    _, c = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = {k: np.zeros((L, H)) for k in ("previous_token", "induction", "duplicate_token")}
    out.update({k: np.zeros((L, H)) for k in ("sink", "entropy", "distance")})
    t = tokens.tolist()
    for l in range(L):
        pat = c[f"blocks.{l}.attn.hook_pattern"].double()
        for h in range(H):
            sums = {k: [] for k in ("previous_token", "induction", "duplicate_token")}
            for b, seq in enumerate(t):
                for q in range(len(seq)):
                    row = pat[b, h, q]
                    stripes = {
                        "previous_token": [q - 1] if q >= 2 else [],
                        "duplicate_token": [k for k in range(1, q) if seq[k] == seq[q]],
                        "induction": [k for k in range(1, q + 1) if seq[k - 1] == seq[q]],
                    }
                    for s, keys in stripes.items():
                        if keys:
                            sums[s].append(float(row[keys].sum()))
            for s, v in sums.items():
                out[s][l, h] = np.mean(v)
            rest = pat[:, h, 1:]  # query rows 1..
            n = pat.shape[-1]
            out["sink"][l, h] = float(rest[..., 0].mean())
            out["entropy"][l, h] = float(-(rest * rest.clamp_min(1e-300).log()).sum(-1).mean())
            dist = (torch.arange(1, n)[:, None] - torch.arange(n)[None]).abs().double()
            out["distance"][l, h] = float((rest * dist).sum(-1).mean())
    return out


def _grid(df, col):
    return df.pivot(index="layer", columns="head", values=col).to_numpy(dtype=float)


@pytest.mark.parametrize("kind", ["induction-2l", "llama (GQA)"])
def test_pattern_columns_equal_their_definitions(kind, induction_model, llama):
    model = induction_model if kind == "induction-2l" else llama
    d_vocab = int(model.cfg.d_vocab)
    tokens = A.probe_tokens(model, n=3, half_len=8, seed=2)
    df = A.head_atlas(model, tokens, seed=3)
    want = _hand_pattern_columns(model, tokens)
    # every column is a mean of non-negative terms (attention weights, -p log p, p * distance)
    # summed in float32 by the atlas and in float64 here: no cancellation, so the rounding is
    # relative to each value (rtol 1e-5, about 80 ulps); atol 1e-7 is 1e-7 of the weights'
    # scale (1) and only covers columns that are exactly 0 (sink_swapped below: rtol alone)
    for col, grid in want.items():
        np.testing.assert_allclose(_grid(df, col), grid, rtol=RTOL, atol=1e-7, err_msg=col)
    swapped = atlas_probe.swap_first(tokens, 3)
    assert (swapped[:, 0] != tokens[:, 0]).all() and (swapped[:, 1:] == tokens[:, 1:]).all()
    assert int(swapped.max()) < d_vocab
    np.testing.assert_allclose(
        _grid(df, "sink_swapped"), _hand_pattern_columns(model, swapped)["sink"], rtol=RTOL
    )
    assert list(df.columns[:5]) == ["layer", "head", "label", "role", "roles"]
    assert df.attrs["pattern_gap"] < 1e-5
    # the count (two probe passes, the recomputed and control scores, the OV products:
    # tests/test_counted_flops.py holds it to torch's) is the one the estimate states
    plan = A.head_atlas(model, tokens, seed=3, estimate=True)
    assert df.attrs["forward_equivalents"] == plan.forward_equivalents > 2.0


def test_ov_columns_equal_their_definitions(llama):
    """Copying from FactoredMatrix eigenvalues; suppression and succession from the whole
    OV circuit, materialised (the atlas builds neither)."""

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0} | {f"w{i}": i for i in range(1, 40) if not 10 <= i < 30}
    vocab |= {str(i): 10 + i for i in range(20)}  # "1" is id 11
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    llama.tokenizer = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")
    try:
        df = A.head_atlas(llama, seed=1)
        runs = ordinal_runs(llama.tokenizer)
        ids = sample_ids(llama, 1)  # no ordinary words: every id but 0
    finally:
        llama.tokenizer = None
    assert runs == [list(range(10, 30))]  # "0" .. "19", one spelling kept once
    copying = A.copying_scores(llama, top1=False)
    np.testing.assert_allclose(df["copying"], copying["copying_score"], rtol=1e-4, atol=1e-5)
    for r in df.itertuples():
        M = A.ov_circuit(llama, layer=r.layer, head=r.head).AB.double()
        S = M[ids][:, ids]
        lowest = float((S.argmin(-1) == torch.arange(len(ids))).double().mean())
        assert r.copy_suppression == pytest.approx(lowest, abs=1e-9)
        highest = float((S.argmax(-1) == torch.arange(len(ids))).double().mean())
        assert r.copying_top1 == pytest.approx(highest, abs=1e-9)
        run = torch.tensor(runs[0])
        best = M[run[:-1]][:, run].argmax(-1)
        assert r.successor == pytest.approx(float((best == torch.arange(1, 20)).double().mean()))


def test_bands_and_kernel_peaks_equal_their_definitions(llama):
    tokens = A.probe_tokens(llama, n=2, half_len=8, seed=0)
    df = A.head_atlas(llama, tokens)
    n = tokens.shape[1]
    for r in df.itertuples():
        bands = A.rotary_bands(llama, tokens, layer=r.layer, head=r.head, query_positions=range(n))
        top = bands.loc[bands["magnitude"].idxmax()]
        assert r.rotary_band == top["band"]
        share = top["magnitude"] / bands["magnitude"].sum()
        assert r.band_share == pytest.approx(share, rel=1e-4)
        assert r.band_wavelength == pytest.approx(top["wavelength"])
        kernel = A.positional_kernel(
            llama, layer=r.layer, head=r.head, distribution=tokens, max_offset=n - 1
        )
        assert r.kernel_peak == kernel.loc[kernel["score"].idxmax(), "offset"]
        # a range is max - min of float32 scores computed otherwise by the atlas: a few ulps
        # of the scores' size, so besides rel 1e-5 a floor of 1e-6 of that size (8 ulps)
        size = max(1.0, float(kernel["score"].abs().max()))
        assert r.kernel_range == pytest.approx(np.ptp(kernel["score"]), rel=1e-5, abs=1e-6 * size)


def test_roles_on_the_shipped_model_and_the_control(induction_model):
    df = A.head_atlas(induction_model)
    roles = df.set_index("label")["role"]
    assert roles["L0H1"] == "previous-token" and roles["L1H1"] == "induction"
    a = df.attrs
    assert a["analysis"] == "head_atlas" and a["seed"] == 0 and "256 control heads" in a["control"]
    thresholds, sizes = a["thresholds"], a["effect_sizes"]
    assert set(thresholds) >= {"previous_token", "induction", "duplicate_token", "copying"}
    for col, e in sizes.items():  # the bar is the larger of the control's maximum and the floor
        assert thresholds[col] == max(e["floor"], e["control_max"]) and e["why"]
        assert e["control_max"] == a["control_stats"][col]["max"]

    def passes(r, col):
        return (
            getattr(r, col) > sizes[col]["control_max"] and getattr(r, col) >= sizes[col]["floor"]
        )

    # every role a head holds is every one of its scores above the control's maximum and at
    # its floor, and only those
    needs = {"previous-token": ["previous_token"], "induction": ["induction"],
             "copying": ["copying", "copying_top1"],
             "copy-suppression": ["copy_suppression", "induction"]}  # fmt: skip
    for r in df.itertuples():
        held = set(filter(None, r.roles.split(", ")))
        for role, cols in needs.items():
            assert (role in held) == all(passes(r, c) for c in cols), (r.label, role)
    assert "successor" in " ".join(a["notes"])  # no tokenizer: NaN, and said so
    assert df["successor"].isna().all()


def test_bad_inputs_are_named_before_any_forward(induction_model):
    plain = torch.arange(1, 11)[None]  # no token repeats: no induction stripe
    with pytest.raises(InterpError, match="induction stripe"):
        A.head_atlas(induction_model, plain)
    with pytest.raises(InterpError, match="seed must be"):
        A.head_atlas(induction_model, seed=-1)
    with pytest.raises(InterpError, match="no token other than its first"):
        A.head_atlas(induction_model, torch.tensor([[3, 3, 3, 3]]))

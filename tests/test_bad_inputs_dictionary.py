"""Bad inputs on the dictionary surface (issue 43): refused with an InterpError that names
the problem, never a NaN result and never a raw exception.

Cause 1: a NaN or an infinity in a dictionary's tensors (a file, the constructor, an edit
made after it was built) is refused, naming the tensor, by ``load_dictionary``,
``Dictionary.save`` and every analysis that takes a dictionary (QK attribution, feature
writers, the splice, feature reading, the report), before any NaN score is computed.
Cause 2: corrupt files, bad paths, dtypes, sizes and seeds are InterpErrors, not
``UnicodeDecodeError`` / ``BadZipFile`` / ``TypeError`` / ``RuntimeError`` /
``AttributeError``. Minors: training options and the weights file's mode.

Everything is real: files in ``tmp_path``, the shipped ``induction-2l`` model (d_model
128), dictionaries of 16 features.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import interp.analysis as A
from interp.core.errors import InterpError
from interp.dictionaries import (
    Dictionary,
    Splice,
    check_dictionary,
    dictionary_report,
    feature_logit_effects,
    load_dictionary,
    read_features,
    save_dictionary,
    spliced,
    train_dictionary,
)

HOOK = "blocks.1.hook_resid_pre"
D_MODEL = 128
D_SAE = 16
NAN, INF = float("nan"), float("inf")
# What a refusal must never be: the raw exceptions issue 43 found.
RAW = (TypeError, RuntimeError, AttributeError, UnicodeDecodeError, zipfile.BadZipFile)


def _refused(fn, *args, match: str, **kwargs) -> InterpError:
    """``fn(*args, **kwargs)`` raises an InterpError whose message matches ``match``."""
    with pytest.raises(InterpError, match=match) as info:
        fn(*args, **kwargs)
    assert not isinstance(info.value, RAW), type(info.value).__mro__
    return info.value


def _dictionary(architecture="topk", d_in=D_MODEL, seed=0, **kw) -> Dictionary:
    """A small dictionary at ``HOOK`` with moved biases (so every tensor counts)."""
    k = 3 if architecture == "topk" else None
    D = Dictionary.random(
        d_in=d_in, d_sae=D_SAE, architecture=architecture, k=k, hook_name=HOOK, seed=seed,
        apply_b_dec_to_input=True, **kw,
    )  # fmt: skip
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        D.b_dec.add_(0.3 * torch.randn(D.d_in, generator=g))
        D.b_enc.add_(0.1 * torch.randn(D.d_sae, generator=g))
    return D


def _poisoned(name: str, value: float = NAN, architecture="topk", dtype=None) -> Dictionary:
    """A dictionary built finite, then one value of ``name`` set to ``value`` in place."""
    D = _dictionary(architecture)
    if dtype is not None:
        D = D.to(dtype)
    with torch.no_grad():
        t = getattr(D, name)
        t[(0,) * (t.ndim - 1) + (1,)] = value
    return D


def _tensors(D: Dictionary) -> dict[str, torch.Tensor]:
    names = ["W_enc", "b_enc", "W_dec", "b_dec"] + ["threshold"] * (D.architecture == "jumprelu")
    return {n: getattr(D, n).detach().clone().contiguous() for n in names}


def _folder(tmp_path, name="sae", architecture="topk", edit=None, dtype=None):
    """A sae-lens folder saved by ``Dictionary.save``, its weights then rewritten by ``edit``."""
    D = _dictionary(architecture)
    if dtype is not None:
        D = D.to(dtype)
    folder = D.save(tmp_path / name)
    if edit is not None:
        state = load_file(str(folder / "sae_weights.safetensors"))
        edit(state)
        save_file(state, str(folder / "sae_weights.safetensors"))
    return folder


def _npz(tmp_path, edit=None, name="params.npz"):
    """A Gemma Scope style params.npz of a jumprelu dictionary, rewritten by ``edit``."""
    state = {n: t.numpy() for n, t in _tensors(_dictionary("jumprelu")).items()}
    if edit is not None:
        edit(state)
    file = tmp_path / name
    np.savez(file, **state)
    return file


def _set(name, value, index=0):
    def edit(state):
        state[name] = state[name].copy() if isinstance(state[name], np.ndarray) else state[name]
        state[name].reshape(-1)[index] = value

    return edit


@pytest.fixture(scope="module")
def tokens():
    g = torch.Generator().manual_seed(0)
    return torch.randint(2, 40, (2, 8), generator=g)


# ---------------------------------------------------------------- cause 1: files


@pytest.mark.parametrize(
    ("tensor", "value", "said"),
    [
        ("W_enc", NAN, "1 NaN"),
        ("W_dec", INF, "1 infinite"),
        ("W_dec", -INF, "1 infinite"),
        ("b_dec", NAN, "1 NaN"),
        ("b_enc", NAN, "1 NaN"),
    ],
)
def test_a_folder_holding_a_non_finite_tensor_is_refused_naming_it(tmp_path, tensor, value, said):
    folder = _folder(tmp_path, edit=_set(tensor, value))
    e = _refused(load_dictionary, folder, match=f"'{tensor}' has {said}")
    assert "sae_weights.safetensors" in str(e)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_nan_in_a_file_is_refused(tmp_path, dtype):
    folder = _folder(tmp_path, edit=_set("W_enc", NAN), dtype=dtype)
    assert json.loads((folder / "cfg.json").read_text())["dtype"] == str(dtype)[6:]
    _refused(load_dictionary, folder, match="'W_enc' has 1 NaN")


def test_a_nan_threshold_of_a_jumprelu_folder_is_refused(tmp_path):
    folder = _folder(tmp_path, architecture="jumprelu", edit=_set("threshold", NAN))
    _refused(load_dictionary, folder, match="'threshold' has 1 NaN")


def test_a_nan_log_threshold_is_refused_naming_it(tmp_path):
    def edit(state):
        t = state.pop("threshold")
        log = t.clamp(min=1e-3).log()
        log[2] = NAN
        state["log_threshold"] = log

    folder = _folder(tmp_path, architecture="jumprelu", edit=edit)
    _refused(load_dictionary, folder, match="'log_threshold' has 1 NaN")


@pytest.mark.parametrize(
    ("tensor", "value"),
    [("W_enc", NAN), ("W_dec", INF), ("b_dec", NAN), ("b_enc", -INF), ("threshold", NAN)],
)
def test_a_non_finite_params_npz_is_refused_naming_the_tensor(tmp_path, tensor, value):
    file = _npz(tmp_path, edit=_set(tensor, value))
    e = _refused(load_dictionary, file, hook_name=HOOK, match=f"'{tensor}' has 1")
    assert "params.npz" in str(e)
    # its folder too
    _refused(load_dictionary, tmp_path, hook_name=HOOK, match=f"'{tensor}' has 1")


def test_a_float16_npz_with_a_nan_is_refused(tmp_path):
    def edit(state):
        for k in state:
            state[k] = state[k].astype(np.float16)
        state["W_dec"][3, 5] = np.nan

    _refused(load_dictionary, _npz(tmp_path, edit=edit), hook_name=HOOK, match="'W_dec' has 1 NaN")


def test_values_that_overflow_the_dtype_asked_for_are_refused(tmp_path):
    folder = _folder(tmp_path, edit=_set("W_dec", 1e6))
    assert load_dictionary(folder).W_dec.view(-1)[0] == 1e6  # float32 holds it
    _refused(load_dictionary, folder, dtype="float16", match="too large for torch.float16")


# ---------------------------------------------------------------- cause 1: built in memory


@pytest.mark.parametrize("tensor", ["W_enc", "b_enc", "W_dec", "b_dec"])
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_the_constructor_refuses_a_non_finite_tensor_naming_it(tensor, value):
    t = _tensors(_dictionary("relu"))
    t[tensor].view(-1)[0] = value
    _refused(Dictionary, **t, hook_name=HOOK, match=f"^{tensor} has 1 (NaN|infinite)")


def test_the_constructor_refuses_a_nan_threshold_and_a_float16_nan():
    t = _tensors(_dictionary("jumprelu"))
    t["threshold"][0] = NAN
    _refused(Dictionary, **t, architecture="jumprelu", match="^threshold has 1 NaN")
    h = {k: v.half() for k, v in _tensors(_dictionary("relu")).items()}
    h["W_enc"][0, 0] = NAN
    _refused(Dictionary, **h, match="^W_enc has 1 NaN")


def test_a_bias_whose_values_do_not_fit_w_encs_dtype_is_refused():
    t = _tensors(_dictionary("relu"))
    t["W_enc"] = t["W_enc"].half()
    t["b_enc"] = t["b_enc"].double()
    t["b_enc"][0] = 1e300
    _refused(Dictionary, **t, match=r"b_enc \(cast from torch.float64 to W_enc's torch.float16\)")


@pytest.mark.parametrize("tensor", ["W_enc", "W_dec", "b_dec"])
def test_save_refuses_a_dictionary_edited_to_nan_and_writes_nothing(tmp_path, tensor):
    _refused(_poisoned(tensor).save, tmp_path / "new", match=f"^{tensor} has 1 NaN")
    assert not (tmp_path / "new").exists()
    good = _dictionary().save(tmp_path / "old")
    before = {f.name: f.read_bytes() for f in good.iterdir()}
    _refused(save_dictionary, _poisoned(tensor, INF), good, match=f"^{tensor} has 1 infinite")
    assert {f.name: f.read_bytes() for f in good.iterdir()} == before  # the old copy intact


def test_save_refuses_a_nan_threshold():
    D = _poisoned("threshold", architecture="jumprelu")
    _refused(D.save, "/nonexistent-never-written", match="^threshold has 1 NaN")


POISONS = [
    ("W_enc", NAN, None),
    ("W_dec", INF, None),
    ("b_dec", NAN, None),
    ("b_enc", -INF, None),
    ("W_enc", NAN, torch.float16),
]
POISON_IDS = ["W_enc-nan", "W_dec-inf", "b_dec-nan", "b_enc-neginf", "W_enc-float16-nan"]


@pytest.mark.parametrize(("tensor", "value", "dtype"), POISONS, ids=POISON_IDS)
def test_qk_attribution_refuses_a_non_finite_dictionary(
    induction_model, tokens, tensor, value, dtype
):
    D = _poisoned(tensor, value, dtype=dtype)
    opts = dict(layer=1, head=1)
    said = f"dictionary's {tensor} has 1 (NaN|infinite)"
    _refused(A.qk_attribution, induction_model, tokens, dictionary=D, match=said, **opts)
    _refused(A.qk_attribution, induction_model, tokens, query_dictionary=D, match=said, **opts)
    _refused(A.qk_attribution, induction_model, tokens, key_dictionary=D, match=said, **opts)
    _refused(
        A.qk_attribution, induction_model, tokens, dictionary=D, estimate=True, match=said, **opts
    )


def test_qk_attribution_with_a_finite_dictionary_still_adds_up(induction_model, tokens):
    """The same call on the same dictionary before it was poisoned: a finite gap."""
    df = A.qk_attribution(induction_model, tokens, layer=1, head=1, dictionary=_dictionary())
    assert np.isfinite(df.attrs["score_gap"]) and df.attrs["score_gap"] < 1e-4
    assert np.isfinite(df["value"]).all()


def test_qk_interventions_refuse_a_nan_dictionary(induction_model, tokens):
    _refused(
        A.qk_interventions, induction_model, tokens, layer=1, head=1,
        dictionary=_poisoned("W_enc"), match="dictionary's W_enc has 1 NaN",
    )  # fmt: skip


def test_a_topk_dictionary_cast_to_float16_past_its_range_is_refused(induction_model, tokens):
    D = _dictionary()
    with torch.no_grad():
        D.W_dec.mul_(1e6)  # finite in float32, infinite in float16
    D = D.half()
    _refused(
        A.qk_attribution, induction_model, tokens, layer=1, head=1, dictionary=D,
        match="dictionary's W_dec has .* infinite",
    )  # fmt: skip


@pytest.mark.parametrize(("tensor", "value", "dtype"), POISONS, ids=POISON_IDS)
def test_feature_head_attribution_refuses_a_non_finite_dictionary(
    induction_model, tokens, tensor, value, dtype
):
    D = _poisoned(tensor, value, dtype=dtype)
    said = f"dictionary's {tensor} has 1 (NaN|infinite)"
    _refused(A.feature_head_attribution, induction_model, tokens, dictionary=D, match=said)
    _refused(
        A.feature_head_attribution, induction_model, tokens, dictionary=D, features=[1],
        match=said,
    )  # fmt: skip


def test_feature_head_attribution_of_a_finite_dictionary_reports_a_finite_gap(
    induction_model, tokens
):
    df = A.feature_head_attribution(induction_model, tokens, dictionary=_dictionary())
    assert np.isfinite(df.attrs["pre_gap"]) and np.isfinite(df["value"]).all()


@pytest.mark.parametrize(("tensor", "value", "dtype"), POISONS, ids=POISON_IDS)
def test_the_splice_refuses_a_non_finite_dictionary_before_any_pass(
    induction_model, tokens, tensor, value, dtype
):
    D = _poisoned(tensor, value, dtype=dtype)
    said = f"dictionary's {tensor} has 1 (NaN|infinite)"

    def run_spliced():
        with spliced(induction_model, D):
            return induction_model(tokens)

    _refused(run_spliced, match=said)
    _refused(Splice, induction_model, D, keep_error=False, match=said)
    _refused(check_dictionary, induction_model, D, match=said)
    # the model is left without the hook: its logits are its own, and finite
    assert torch.isfinite(induction_model(tokens)).all()


def test_a_nan_threshold_is_refused_by_the_splice(induction_model):
    D = _poisoned("threshold", architecture="jumprelu")
    _refused(Splice, induction_model, D, match="dictionary's threshold has 1 NaN")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (dict(edit_acts=lambda a: a * NAN), "edit_acts returned .* NaN or infinite value"),
        (dict(edit_acts=lambda a: a.index_fill(-1, torch.tensor([0]), INF)), "edit_acts returned"),
        (dict(edit_error=lambda e: e - INF), "edit_error returned .* NaN or infinite value"),
        (dict(edit_acts=lambda a: a.double()), "edit_acts returned dtype torch.float64"),
        (dict(edit_acts=lambda a: a.long()), "edit_acts returned dtype torch.int64"),
        (dict(edit_acts=lambda a: a > 0), "edit_acts returned dtype torch.bool"),
        (dict(edit_acts=lambda a: a[..., :3]), "edit_acts returned \\(2, 8, 3\\)"),
        (dict(edit_error=lambda e: None), "edit_error returned NoneType"),
    ],
)
def test_a_splice_edit_returning_nan_or_another_dtype_is_refused(
    induction_model, tokens, edit, said
):
    def run_spliced():
        with spliced(induction_model, _dictionary(), **edit):
            return induction_model(tokens)

    _refused(run_spliced, match=said)
    assert torch.isfinite(induction_model(tokens)).all()  # the hook is gone


def test_a_finite_dictionary_that_overflows_in_the_splice_is_refused(induction_model, tokens):
    """Finite weights of absurd scale: the reconstruction overflows float32, and the splice
    says so instead of giving NaN logits."""
    D = _dictionary()
    with torch.no_grad():
        D.W_enc.mul_(1e20)
        D.W_dec.mul_(1e20)

    def run_spliced():
        with spliced(induction_model, D):
            return induction_model(tokens)

    _refused(run_spliced, match="splice at 'blocks.1.hook_resid_pre' gives .* overflows")
    _refused(dictionary_report, induction_model, tokens, D, match="overflows torch.float32")
    with spliced(induction_model, _dictionary()):  # a sane one still splices exactly
        out = induction_model(tokens)
    assert (out - induction_model(tokens)).abs().max() < 1e-4 * out.abs().max()


@pytest.mark.parametrize(("tensor", "value", "dtype"), POISONS, ids=POISON_IDS)
def test_reading_and_logit_effects_refuse_a_non_finite_dictionary(
    induction_model, tokens, tensor, value, dtype
):
    D = _poisoned(tensor, value, dtype=dtype)
    said = f"dictionary's {tensor} has 1 (NaN|infinite)"
    _refused(read_features, induction_model, tokens, dictionary=D, match=said)
    _refused(read_features, induction_model, tokens, dictionary=D, estimate=True, match=said)
    _refused(feature_logit_effects, induction_model, dictionary=D, match=said)
    _refused(dictionary_report, induction_model, tokens, D, match=said)


# ---------------------------------------------------------------- cause 2: files and paths


def test_a_non_utf8_cfg_json_is_refused(tmp_path):
    folder = _folder(tmp_path)
    (folder / "cfg.json").write_bytes(b'{"d_in": 128, "x": "\xff\xfe"}')
    e = _refused(load_dictionary, folder, match=r"cfg.json: is not UTF-8 text \(byte \d+\)")
    assert e.__cause__ is None and e.__suppress_context__


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"d_in": "128", "d_sae": 16, "architecture": "topk", "k": 3}', "'d_in' is '128'"),
        ('{"d_in": 128, "d_sae": true, "architecture": "topk", "k": 3}', "'d_sae' is True"),
        ('{"d_in": 128, "d_sae": 16, "architecture": "gated"}', "architecture 'gated' is unknown"),
        ('{"d_in": 128, "d_sae": 16, "architecture": "topk", "k": 2.5}', "integer 'k'"),
        ('{"d_in": 128, "d_sae": 16, "architecture": "topk", "k": 3, "metadata": 7}', "metadata"),
        ('{"d_in": 128, "d_sae": 16, "architecture": "topk", "k": 3, "dtype": "int8"}',
         "'dtype' 'int8' is unknown"),
        ('{"d_in": 64, "d_sae": 16, "architecture": "topk", "k": 3}', "'W_enc' has shape"),
    ],
)  # fmt: skip
def test_a_malformed_cfg_json_is_refused(tmp_path, text, said):
    folder = _folder(tmp_path)
    (folder / "cfg.json").write_text(text)
    _refused(load_dictionary, folder, match=said)


@pytest.mark.parametrize("keep", [0, 4, 8, 100, "half", "all but 1"])
def test_a_truncated_safetensors_file_is_refused(tmp_path, keep):
    folder = _folder(tmp_path)
    data = (folder / "sae_weights.safetensors").read_bytes()
    n = {"half": len(data) // 2, "all but 1": len(data) - 1}.get(keep, keep)
    (folder / "sae_weights.safetensors").write_bytes(data[:n])
    _refused(load_dictionary, folder, match="is not a readable safetensors file")


def test_a_safetensors_file_of_garbage_is_refused(tmp_path):
    folder = _folder(tmp_path)
    (folder / "sae_weights.safetensors").write_bytes(os.urandom(2000))
    _refused(load_dictionary, folder, match="is not a readable safetensors file")


@pytest.mark.parametrize("keep", [0, 10, "half", "all but 1"])
def test_a_truncated_npz_is_refused(tmp_path, keep):
    file = _npz(tmp_path)
    data = file.read_bytes()
    n = {"half": len(data) // 2, "all but 1": len(data) - 1}.get(keep, keep)
    file.write_bytes(data[:n])
    _refused(load_dictionary, file, hook_name=HOOK, match="params.npz: is not .*npz")


def test_an_npz_with_a_corrupt_member_is_refused(tmp_path):
    file = _npz(tmp_path)
    data = bytearray(file.read_bytes())
    mid = len(data) // 3
    data[mid : mid + 64] = bytes(64)  # the zip directory is intact; a member's bytes are not
    file.write_bytes(bytes(data))
    assert zipfile.is_zipfile(file)
    _refused(load_dictionary, file, hook_name=HOOK, match="params.npz: is not a readable npz")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda s: s.update(W_enc=s["W_enc"].astype(np.int32)), "'W_enc' has dtype torch.int32"),
        (lambda s: s.update(b_dec=s["b_dec"].astype(np.complex64)), "'b_dec' has dtype"),
        (lambda s: s.update(W_dec=s["W_dec"].astype(str)), "'W_dec' is a numpy array of dtype"),
        (lambda s: s.update(W_enc=s["W_enc"][0]), r"'W_enc' has shape \[16\]"),
        (lambda s: s.update(W_dec=s["W_dec"].T), r"'W_dec' has shape \[128, 16\]"),
        (lambda s: s.pop("threshold"), "has no 'threshold'"),
        (lambda s: s.update(extra=np.zeros(3)), "holds 'extra'"),
        (lambda s: s.update(W_dec=np.array([None] * 3, dtype=object)), "not a readable npz"),
    ],
)
def test_a_malformed_npz_is_refused(tmp_path, edit, said):
    _refused(load_dictionary, _npz(tmp_path, edit=edit), hook_name=HOOK, match=said)


def test_an_npz_needs_a_hook_name(tmp_path):
    _refused(load_dictionary, _npz(tmp_path), match="does not name its hook: pass hook_name=")
    _refused(load_dictionary, _npz(tmp_path), hook_name=3, match="hook_name must be a string")


def test_integer_weights_in_a_safetensors_file_are_refused(tmp_path):
    folder = _folder(tmp_path, edit=lambda s: s.update(b_enc=s["b_enc"].to(torch.int64)))
    _refused(load_dictionary, folder, match="'b_enc' has dtype torch.int64")


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (None, "must be a path .* got NoneType None"),
        (3, "must be a path .* got int 3"),
        (3.5, "must be a path .* got float"),
        (["a"], "must be a path .* got list"),
        ("", "is an empty path"),
        ("   ", "is an empty path"),
    ],
)
def test_load_dictionary_refuses_what_is_not_a_path(path, said):
    _refused(load_dictionary, path, match=said)


def test_load_dictionary_refuses_missing_folders_and_files(tmp_path):
    _refused(load_dictionary, tmp_path / "nowhere", match="no such dictionary folder")
    _refused(load_dictionary, tmp_path, match="has no cfg.json")
    folder = _folder(tmp_path)
    (folder / "sae_weights.safetensors").unlink()
    _refused(load_dictionary, folder, match="has no sae_weights.safetensors")


@pytest.mark.parametrize("dtype", ["float16", "torch.float16", torch.float16])
def test_a_dtype_by_name_is_read_as_that_dtype(tmp_path, dtype):
    folder = _folder(tmp_path)
    D = load_dictionary(folder, dtype=dtype)
    assert D.dtype == torch.float16 and D.device == torch.device("cpu")
    want = load_dictionary(folder)
    assert torch.equal(D.W_dec, want.W_dec.half())
    bytes_path = load_dictionary(os.fsencode(folder), dtype="bfloat16")
    assert bytes_path.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", ["float8", "int8", "half ", torch.int32, torch.complex64, 16])
def test_a_dtype_that_is_not_a_dictionary_dtype_is_refused(tmp_path, dtype):
    folder = _folder(tmp_path)
    _refused(load_dictionary, folder, dtype=dtype, match="is not a dictionary dtype")


@pytest.mark.parametrize("device", ["float16", "cuda:x", 3.5])
def test_a_device_that_is_not_one_is_refused(tmp_path, device):
    folder = _folder(tmp_path)
    with pytest.raises(InterpError) as info:
        load_dictionary(folder, device=device)
    assert not isinstance(info.value, RAW)


# ---------------------------------------------------------------- cause 2: the constructor


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (dict(d_in=True), "d_in must be an integer, got True"),
        (dict(d_in=1.5), "d_in must be an integer, got 1.5"),
        (dict(d_in="128"), "d_in must be an integer, got '128'"),
        (dict(d_in=0), "d_in must be >= 1, got 0"),
        (dict(d_sae=None), "d_sae must be an integer, got None"),
        (dict(d_sae=-4), "d_sae must be >= 1"),
        (dict(seed=1.5), "seed must be an integer, got 1.5"),
        (dict(seed=-1), "seed must be >= 0, got -1"),
        (dict(seed=2**63), "seed must be below 2\\*\\*63"),
        (dict(seed=True), "seed must be an integer, got True"),
        (dict(architecture="gated"), "architecture 'gated' is unknown"),
        (dict(architecture=None), "architecture None is unknown"),
        (dict(architecture="topk", k=None), "integer k in 1..d_sae=16, got None"),
        (dict(architecture="topk", k=0), "integer k in 1..d_sae=16, got 0"),
        (dict(architecture="topk", k=17), "integer k in 1..d_sae=16, got 17"),
        (dict(architecture="topk", k=True), "integer k in 1..d_sae=16, got True"),
        (dict(architecture="topk", k=2.0), "integer k in 1..d_sae=16, got 2.0"),
        (dict(hook_name=3), "hook_name must be a string"),
        (dict(apply_b_dec_to_input="yes"), "apply_b_dec_to_input"),
    ],
)
def test_dictionary_random_refuses_bad_sizes_seeds_and_options(options, said):
    kw = {"d_in": 8, "d_sae": D_SAE, **options}
    _refused(Dictionary.random, match=said, **kw)


def test_numpy_float_arrays_are_accepted_and_others_refused():
    """Numpy float arrays are converted (the documented behaviour now); numpy integer
    arrays, lists and other types are refused, naming the tensor."""
    D = _dictionary("relu", d_in=8)
    arrays = {k: v.numpy() for k, v in _tensors(D).items()}
    E = Dictionary(**arrays, hook_name=HOOK)
    assert E.dtype == torch.float32 and torch.equal(E.W_dec, D.W_dec)
    zeros = Dictionary(np.zeros((8, 4)), np.zeros(4), np.zeros((4, 8)), np.zeros(8))
    assert zeros.dtype == torch.float64 and zeros.d_sae == 4
    _refused(
        Dictionary, np.zeros((8, 4), dtype=np.int64), np.zeros(4), np.zeros((4, 8)), np.zeros(8),
        match="^W_enc has dtype torch.int64",
    )  # fmt: skip
    bad = dict(arrays, b_dec=arrays["b_dec"].tolist())
    _refused(Dictionary, **bad, match="^b_dec must be a torch.Tensor or a numpy array, got list")
    _refused(Dictionary, None, *list(arrays.values())[1:], match="^W_enc must be a torch.Tensor")
    nan = dict(arrays, W_dec=arrays["W_dec"].copy())
    nan["W_dec"][0, 0] = np.nan
    _refused(Dictionary, **nan, match="^W_dec has 1 NaN")
    strings = dict(arrays, b_enc=np.array(["a"] * 16))
    _refused(Dictionary, **strings, match="^b_enc is a numpy array of dtype <U1")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("tensor", ["W_enc", "b_enc", "W_dec", "b_dec"])
def test_integer_weight_tensors_are_refused_not_cast(tensor, dtype):
    t = _tensors(_dictionary("relu", d_in=8))
    t[tensor] = t[tensor].to(dtype)
    _refused(Dictionary, **t, match=f"^{tensor} has dtype {dtype}: .* not cast silently")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_weights_are_refused_not_a_raw_not_implemented_error(
    tmp_path, induction_model, tokens, dtype
):
    """torch cannot test a float8 tensor for NaN: refused by name, in memory and in a file."""
    t = _tensors(_dictionary("relu", d_in=8))
    _refused(
        Dictionary, **{k: v.to(dtype) for k, v in t.items()}, match=f"^W_enc has dtype {dtype}"
    )
    folder = _folder(tmp_path, edit=lambda s: s.update(W_dec=s["W_dec"].to(dtype)))
    _refused(load_dictionary, folder, match=f"'W_dec' has dtype {dtype}")
    D = _dictionary().to(dtype)  # cast after it was made
    _refused(D.save, tmp_path / "out", match=f"^W_enc has dtype {dtype}")
    said = f"dictionary's W_enc has dtype {dtype}"
    _refused(check_dictionary, induction_model, D, match=said)
    _refused(A.qk_attribution, induction_model, tokens, layer=1, head=1, dictionary=D, match=said)


def test_meta_tensors_are_refused():
    t = _tensors(_dictionary("relu", d_in=8))
    _refused(Dictionary, **{k: v.to("meta") for k, v in t.items()}, match="meta device")
    _refused(_dictionary().to("meta").save, "/never-written", match="^W_enc is on the meta")


def test_complex_and_shapeless_tensors_are_refused():
    t = _tensors(_dictionary("relu", d_in=8))
    _refused(Dictionary, **dict(t, W_dec=t["W_dec"].to(torch.complex64)), match="^W_dec has dtype")
    _refused(Dictionary, **dict(t, W_enc=t["W_enc"][0]), match="must be .d_in, d_sae. .2 dim")
    _refused(Dictionary, **dict(t, W_dec=t["W_dec"].T), match="W_dec has shape \\(8, 16\\)")
    _refused(Dictionary, **dict(t, W_enc=torch.zeros(0, 4)), match="must be >= 1")
    _refused(Dictionary, **t, metadata=[1], match="metadata must be a dict")
    _refused(Dictionary, **t, architecture="jumprelu", match="needs 'threshold'")


def test_save_refuses_what_is_not_a_dictionary_and_bad_paths(tmp_path):
    _refused(save_dictionary, "D", tmp_path / "x", match="save_dictionary needs a Dictionary")
    D = _dictionary()
    _refused(D.save, None, match="must be a path")
    _refused(D.save, "", match="empty path")
    D.metadata["bad"] = object()
    _refused(D.save, tmp_path / "x", match="metadata cannot be written to cfg.json")


# ---------------------------------------------------------------- minors


@pytest.fixture(scope="module")
def train_tokens():
    g = torch.Generator().manual_seed(3)
    return torch.randint(2, 40, (4, 12), generator=g)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (dict(lr="1e-3"), "lr must be a number, got the string '1e-3'"),
        (dict(lr=b"1e-3"), "lr must be a number, got the string"),
        (dict(lr=0), "lr must be positive"),
        (dict(lr=-1e-3), "lr must be positive"),
        (dict(lr=NAN), "lr must be finite"),
        (dict(lr=True), "lr must be a number"),
        (dict(aux_coefficient=-1), "aux_coefficient must be >= 0, got -1"),
        (dict(aux_coefficient=INF), "aux_coefficient must be finite"),
        (dict(aux_coefficient="0.03"), "aux_coefficient must be a number, got the string"),
        (dict(aux_k=D_SAE + 1), "aux_k=17 is more than n_features=16"),
        (dict(aux_k=0), "aux_k must be >= 1"),
        (dict(aux_k=2.5), "aux_k must be an integer"),
        (dict(k=D_SAE + 1), "k=17 is more than n_features=16"),
        (dict(seed=-1), "seed must be >= 0"),
        (dict(seed=1.5), "seed must be an integer"),
        (dict(n_features="16"), "n_features must be an integer"),
    ],
)
def test_train_dictionary_refuses_bad_options_before_any_pass(
    induction_model, train_tokens, options, said
):
    kw = dict(hook=HOOK, n_features=D_SAE, k=2, epochs=1, batch_size=16)
    _refused(train_dictionary, induction_model, train_tokens, match=said, **{**kw, **options})


def test_aux_k_equal_to_n_features_is_accepted(induction_model, train_tokens):
    fit = train_dictionary(
        induction_model, train_tokens, hook=HOOK, n_features=D_SAE, k=2, aux_k=D_SAE,
        aux_coefficient=0.0, batch_size=16,
    )  # fmt: skip
    assert fit.training["aux_k"] == D_SAE and fit.training["aux_coefficient"] == 0.0
    D = fit.dictionary
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.isfinite(getattr(D, name)).all(), name


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_the_weights_file_gets_cfg_jsons_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        folder = _dictionary().save(tmp_path / "sae")
    finally:
        os.umask(old)
    weights = stat.S_IMODE((folder / "sae_weights.safetensors").stat().st_mode)
    cfg = stat.S_IMODE((folder / "cfg.json").stat().st_mode)
    assert weights == cfg == 0o666 & ~umask, (oct(weights), oct(cfg))

"""Transcoders (issue 46 step 2): the class, the sae-lens folder layout both ways, and
circuit-tracer's per-layer files; every tensor checked finite on build, load and save.

Real files in ``tmp_path``; circuit-tracer's file is written with its own key names and
layout (``W_enc [d_sae, d_in]``, ``activation_function.threshold``, ``k``) and compared
with circuit-tracer's formulas written out here (``F.linear``, ``x * (x > threshold)``).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from interp.core.errors import InterpError
from interp.dictionaries import (
    Dictionary,
    Transcoder,
    load_circuit_tracer_transcoder,
    load_dictionary,
    load_transcoder,
)

D_IN, D_OUT, D_SAE = 12, 10, 24
HOOK_IN, HOOK_OUT = "blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out"
# float32 products of the same numbers in another order (x @ W vs F.linear on W.T): a few
# ulps of the outputs' scale (about 1-10 here); 1e-5 of it holds on AVX2 and AVX-512 alike.
RTOL = 1e-5


def _transcoder(architecture="relu", skip=False, seed=0) -> Transcoder:
    """A small transcoder with moved biases and thresholds, so every tensor counts."""
    k = 4 if architecture == "topk" else None
    T = Transcoder.random(
        d_in=D_IN, d_out=D_OUT, d_sae=D_SAE, architecture=architecture, k=k,
        hook_name=HOOK_IN, hook_name_out=HOOK_OUT, seed=seed, skip=skip,
    )  # fmt: skip
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        T.b_dec.add_(0.3 * torch.randn(D_OUT, generator=g))
        T.b_enc.add_(0.1 * torch.randn(D_SAE, generator=g))
        if T.threshold is not None:
            T.threshold.add_(0.2 * torch.rand(D_SAE, generator=g))
    return T


def _x(n=32, seed=5) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed))


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) <= RTOL * max(1.0, float(b.abs().max()))


@pytest.mark.parametrize(
    "architecture, skip",
    [("relu", False), ("relu", True), ("jumprelu", False), ("jumprelu", True), ("topk", False)],
)
def test_sae_lens_folder_round_trip(tmp_path, architecture, skip):
    T = _transcoder(architecture, skip)
    x = _x()
    y = T(x)
    assert y.shape == (32, D_OUT)
    # the formula of the module docstring, written out
    pre = x @ T.W_enc + T.b_enc
    acts = T.activate(pre)
    want = acts @ T.W_dec + T.b_dec + (x @ T.W_skip.T if skip else 0)
    assert _close(y, want)
    folder = T.save(tmp_path / "tc")
    cfg = json.loads((folder / "cfg.json").read_text())
    names = {
        ("relu", False): "transcoder", ("relu", True): "skip_transcoder",
        ("jumprelu", False): "jumprelu_transcoder", ("jumprelu", True): "jumprelu_skip_transcoder",
        ("topk", False): "topk_transcoder",
    }  # fmt: skip
    assert cfg["architecture"] == names[(architecture, skip)]
    assert (cfg["d_in"], cfg["d_sae"], cfg["d_out"]) == (D_IN, D_SAE, D_OUT)
    assert cfg["metadata"]["hook_name_out"] == HOOK_OUT
    assert cfg["apply_b_dec_to_input"] is False
    U = load_transcoder(folder)
    assert (U.hook_name, U.hook_name_out, U.architecture, U.k) == (
        HOOK_IN,
        HOOK_OUT,
        architecture,
        T.k,
    )
    for name, t in T.tensors().items():
        assert torch.equal(U.tensors()[name], t), name
    assert torch.equal(U(x), y)
    err = U.error(x, y + 1)
    assert _close(err, torch.ones_like(err))


def test_older_sae_lens_cfg_with_hook_name_out_at_top(tmp_path):
    T = _transcoder("jumprelu")
    folder = T.save(tmp_path / "tc")
    cfg = json.loads((folder / "cfg.json").read_text())
    meta = cfg.pop("metadata")
    cfg.update(hook_name=meta["hook_name"], hook_name_out=meta["hook_name_out"])
    (folder / "cfg.json").write_text(json.dumps(cfg))
    U = load_transcoder(folder)
    assert (U.hook_name, U.hook_name_out) == (HOOK_IN, HOOK_OUT)
    V = load_transcoder(folder, hook_name="a", hook_name_out="b", dtype="float64")
    assert (V.hook_name, V.hook_name_out, V.dtype) == ("a", "b", torch.float64)


@pytest.mark.parametrize("kind", ["relu", "jumprelu", "jumprelu+skip", "topk"])
def test_circuit_tracer_layer_file(tmp_path, kind):
    """circuit-tracer's layout and formulas: ``F.linear(x, W_enc, b_enc)`` with ``W_enc
    [d_sae, d_in]``, JumpReLU ``x * (x > threshold)``, TopK keeping the k largest,
    ``acts @ W_dec + b_dec + x @ W_skip.T``."""
    g = torch.Generator().manual_seed(3)
    W_enc = torch.randn(D_SAE, D_IN, generator=g)
    W_dec = torch.randn(D_SAE, D_OUT, generator=g)
    b_enc, b_dec = 0.1 * torch.randn(D_SAE, generator=g), torch.randn(D_OUT, generator=g)
    state = {"W_enc": W_enc, "W_dec": W_dec, "b_enc": b_enc, "b_dec": b_dec}
    threshold = 0.5 * torch.rand(D_SAE, generator=g)
    W_skip = 0.1 * torch.randn(D_OUT, D_IN, generator=g)
    if kind.startswith("jumprelu"):
        state["activation_function.threshold"] = threshold
    if kind.endswith("skip"):
        state["W_skip"] = W_skip
    if kind == "topk":
        state["k"] = torch.tensor(3)
    file = tmp_path / "layer_3.safetensors"
    save_file(state, str(file))
    T = load_circuit_tracer_transcoder(file)
    assert (T.hook_name, T.hook_name_out) == ("blocks.3.mlp.hook_in", "blocks.3.hook_mlp_out")
    assert T.architecture == kind.split("+")[0]
    x = _x()
    pre = torch.nn.functional.linear(x, W_enc, b_enc)
    if kind.startswith("jumprelu"):
        acts = pre * (pre > threshold)
    elif kind == "topk":
        gate = torch.zeros_like(pre).scatter(-1, pre.topk(3, dim=-1).indices, 1.0)
        acts = (pre * gate).clamp(min=0)  # ours keeps the relu (module docstring)
    else:
        acts = torch.relu(pre)
    want = acts @ W_dec + b_dec + (x @ W_skip.T if kind.endswith("skip") else 0)
    assert _close(T(x), want)
    # saved in the sae-lens layout, it reads back the same
    assert torch.equal(load_transcoder(T.save(tmp_path / "sl"))(x), T(x))


def test_non_finite_refused_everywhere(tmp_path):
    T = _transcoder("jumprelu", skip=True)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip"):
        args = {n: t.detach().clone() for n, t in T.tensors().items()}
        args[name].view(-1)[1] = float("nan")
        with pytest.raises(InterpError, match=f"{name}.*NaN"):
            Transcoder(
                args.pop("W_enc"), args.pop("b_enc"), args.pop("W_dec"), args.pop("b_dec"),
                architecture="jumprelu", **args,
            )  # fmt: skip
    folder = T.save(tmp_path / "tc")
    state = load_file(str(folder / "sae_weights.safetensors"))
    state["W_skip"][0, 0] = float("inf")
    save_file(state, str(folder / "sae_weights.safetensors"))
    with pytest.raises(InterpError, match="W_skip.*infinite"):
        load_transcoder(folder)
    with torch.no_grad():
        T.b_dec[0] = float("nan")
    with pytest.raises(InterpError, match="b_dec.*NaN"):
        T.save(tmp_path / "other")
    assert not (tmp_path / "other" / "cfg.json").exists()
    ct = tmp_path / "layer_0.safetensors"
    save_file({"W_enc": torch.full((4, 3), float("nan")), "W_dec": torch.zeros(4, 2),
               "b_enc": torch.zeros(4), "b_dec": torch.zeros(2)}, str(ct))  # fmt: skip
    with pytest.raises(InterpError, match="W_enc.*NaN"):
        load_circuit_tracer_transcoder(ct)


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(InterpError, match="W_dec has shape"):
        Transcoder(torch.zeros(4, 8), torch.zeros(8), torch.zeros(7, 3), torch.zeros(3))
    with pytest.raises(InterpError, match="b_dec has shape"):
        Transcoder(torch.zeros(4, 8), torch.zeros(8), torch.zeros(8, 3), torch.zeros(4))
    with pytest.raises(InterpError, match="topk.*k"):
        Transcoder.random(d_in=4, d_out=3, d_sae=8, architecture="topk")
    T = _transcoder()
    with pytest.raises(InterpError, match=r"needs \[\.\.\., 12\]"):
        T(torch.zeros(2, 5))
    with pytest.raises(InterpError, match=r"needs \[\.\.\., 10\]"):
        T.error(_x(), torch.zeros(32, 3))
    # an ordinary dictionary's folder and a transcoder's are told apart, with the fix
    D = Dictionary.random(d_in=D_IN, d_sae=D_SAE, hook_name=HOOK_IN)
    with pytest.raises(InterpError, match="not a transcoder.*load_dictionary"):
        load_transcoder(D.save(tmp_path / "d"))
    with pytest.raises(InterpError, match="'transcoder' is unknown"):
        load_dictionary(T.save(tmp_path / "t"))
    with pytest.raises(InterpError, match="no sae-lens transcoder folder"):
        load_transcoder(tmp_path / "missing")
    with pytest.raises(InterpError, match="names no layer"):
        path = tmp_path / "tc.safetensors"
        save_file({"W_enc": torch.zeros(4, 3)}, str(path))
        load_circuit_tracer_transcoder(path)
    with pytest.raises(InterpError, match="does not use"):
        save_file({n: t.detach() for n, t in T.tensors().items()} | {"x": torch.zeros(1)},
                  str(tmp_path / "layer_1.safetensors"))  # fmt: skip
        load_circuit_tracer_transcoder(tmp_path / "layer_1.safetensors")


# --- training (train_dictionary(target_hook=...)) on a random GPT-2's first MLP ---------

MLP_IN, MLP_OUT = "blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out"


@pytest.fixture(scope="module")
def gpt2():
    from interp.models.hf import random_gpt2

    return random_gpt2(2, vocab=40)


def _tokens(n, seed):
    return torch.randint(0, 40, (n, 32), generator=torch.Generator().manual_seed(seed))


def test_train_transcoder_learns_the_mlp(gpt2):
    from interp.dictionaries import train_transcoder
    from interp.dictionaries.transcoder_report import pair_activations

    tokens, held = _tokens(64, 0), _tokens(16, 1)
    opts = dict(hook=MLP_IN, n_features=128, k=16, epochs=20, batch_size=256, lr=1e-2)
    fit = train_dictionary_(gpt2, tokens, target_hook=MLP_OUT, eval_tokens=held, **opts)
    T, r = fit.dictionary, fit.report
    assert isinstance(T, Transcoder)
    assert (T.hook_name, T.hook_name_out, T.d_in, T.d_out, T.k) == (MLP_IN, MLP_OUT, 32, 32, 16)
    # measured 0.951 (l0 16, dead 0.02) in 0.3 s; 0.8 leaves room for other CPUs' rounding
    assert r.fraction_variance_explained > 0.8
    assert r.l0 <= 16 and 0 <= r.dead_fraction < 0.5
    assert r.loss_with_error == r.clean_loss and r.loss_without_error is not None
    assert fit.training["target_hook"] == MLP_OUT and T.metadata["report"] == r.as_dict()
    # the report's variance explained is the target's, computed here by hand on held-out text
    x, y = pair_activations(gpt2, held, MLP_IN, MLP_OUT)
    y64 = y.double()
    with torch.no_grad():
        fve = 1 - (y64 - T(x).double()).pow(2).sum() / (y64 - y64.mean((0, 1))).pow(2).sum()
    assert abs(float(fve) - r.fraction_variance_explained) < 1e-6  # float32 T(x) vs float64
    # the keyword and the function are one training: same seed, same numbers
    again = train_transcoder(gpt2, tokens, target_hook=MLP_OUT, eval_tokens=held, **opts)
    for name, t in T.tensors().items():
        assert torch.equal(again.dictionary.tensors()[name], t), name


def train_dictionary_(*args, **kwargs):
    from interp.dictionaries import train_dictionary

    return train_dictionary(*args, **kwargs)


def test_train_transcoder_refusals(gpt2):
    tokens = _tokens(4, 0)
    with pytest.raises(InterpError, match="target_hook is the input hook"):
        train_dictionary_(gpt2, tokens, hook=MLP_IN, target_hook=MLP_IN, n_features=8, k=2)
    with pytest.raises(InterpError, match="not a hook of this model"):
        train_dictionary_(gpt2, tokens, hook=MLP_IN, target_hook="blocks.9.x", n_features=8, k=2)
    with pytest.raises(InterpError, match="did not fire before the target"):
        train_dictionary_(gpt2, tokens, hook=MLP_OUT, target_hook=MLP_IN, n_features=8, k=2)
    with pytest.raises(InterpError, match="k=9 is more than n_features=8"):
        train_dictionary_(gpt2, tokens, hook=MLP_IN, target_hook=MLP_OUT, n_features=8, k=9)
    from interp.dictionaries import transcoder_report

    wide = Transcoder.random(d_in=8, d_out=32, d_sae=4, hook_name=MLP_IN, hook_name_out=MLP_OUT)
    with pytest.raises(InterpError, match="width 8, but the hook has width 32"):
        transcoder_report(gpt2, tokens, wide)

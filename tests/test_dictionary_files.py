"""sae-lens folders and Gemma Scope npz files: written, read back, and bad ones refused
naming the key."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from interp.core.errors import InterpError
from interp.dictionaries import Dictionary, load_dictionary


def _dictionary(arch):
    D = Dictionary.random(
        d_in=6, d_sae=16, architecture=arch, k=3, hook_name="blocks.0.hook_resid_pre", seed=4
    )
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in D.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return D


@pytest.mark.parametrize("arch", ["relu", "topk", "jumprelu"])
def test_round_trip(tmp_path, arch):
    D = _dictionary(arch)
    D.metadata["model_name"] = "induction-2l"
    folder = D.save(tmp_path / "sae")
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == {"relu": "standard"}.get(arch, arch)
    assert cfg["metadata"]["hook_name"] == D.hook_name and cfg["d_sae"] == 16
    E = load_dictionary(folder)
    x = torch.randn(5, 6)
    assert torch.equal(E.encode(x), D.encode(x)) and E.metadata["model_name"] == "induction-2l"
    assert (E.architecture, E.k, E.hook_name) == (D.architecture, D.k, D.hook_name)


def test_pre_6_config_and_decoder_norm_rescaling(tmp_path):
    D = _dictionary("topk")
    folder = D.save(tmp_path / "old")
    cfg = json.loads((folder / "cfg.json").read_text())
    old = dict(d_in=6, d_sae=16, hook_point=D.hook_name, activation_fn_str="topk")
    old.update(activation_fn_kwargs={"k": 3}, apply_b_dec_to_input=False, dtype="float32")
    (folder / "cfg.json").write_text(json.dumps(old))
    E = load_dictionary(folder)
    x = torch.randn(5, 6)
    assert E.architecture == "topk" and E.k == 3 and E.hook_name == D.hook_name
    assert torch.allclose(E.encode(x), D.encode(x))
    # rescale_acts_by_decoder_norm: sae-lens scales the pre-activations by ||W_dec row||
    # and divides before decoding; read folded, the activations are the same
    cfg["rescale_acts_by_decoder_norm"] = True
    (folder / "cfg.json").write_text(json.dumps(cfg))
    F = load_dictionary(folder)
    n = D.W_dec.norm(dim=-1)
    pre = D.pre_activations(x) * n
    top = pre.topk(3, dim=-1)
    want = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
    # the folded weights (W_enc * n, W_dec / n) round otherwise than scaling the activations:
    # float32 rounding of each product, a few ulps of the largest activation or output, so
    # each bar is 1e-6 of that scale (about 8 ulps), not 1e-6 absolute
    scale = max(1.0, float(want.abs().max()))
    assert torch.allclose(F.encode(x), want, atol=1e-6 * scale)
    out = (want / n) @ D.W_dec + D.b_dec
    terms = (want / n).abs() @ D.W_dec.abs() + D.b_dec.abs()  # the sum's size before cancelling
    assert torch.allclose(F.decode(want), out, atol=1e-6 * max(1.0, float(terms.max())))


def test_gemma_scope_npz(tmp_path):
    D = _dictionary("jumprelu")
    arrays = {k: getattr(D, k).detach().numpy() for k in ("W_enc", "b_enc", "W_dec", "b_dec")}
    np.savez(tmp_path / "params.npz", threshold=D.threshold.detach().numpy(), **arrays)
    with pytest.raises(InterpError, match="pass hook_name="):
        load_dictionary(tmp_path)
    E = load_dictionary(tmp_path / "params.npz", hook_name="blocks.0.hook_resid_pre")
    x = torch.randn(5, 6)
    assert torch.allclose(E.encode(x), D.encode(x)) and E.architecture == "jumprelu"


def _edit_cfg(folder, **changes):
    cfg = json.loads((folder / "cfg.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    (folder / "cfg.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(architecture="gated"), "'architecture': architecture 'gated' is unknown"),
        (dict(d_in=7), r"'W_enc' has shape \[6, 16\], but cfg.json's d_in=7"),
        (dict(d_sae=None), "has no 'd_sae'"),
        (dict(k="three"), "needs an integer 'k'"),
        (dict(normalize_activations="layer_norm"), "'normalize_activations' is 'layer_norm'"),
        (dict(dtype="float8"), "'dtype' 'float8' is unknown"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, change, message):
    folder = _dictionary("topk").save(tmp_path / "sae")
    _edit_cfg(folder, **change)
    with pytest.raises(InterpError, match=message):
        load_dictionary(folder)


def test_bad_weights_and_missing_files(tmp_path):
    folder = _dictionary("relu").save(tmp_path / "sae")
    state = load_file(folder / "sae_weights.safetensors")
    save_file(
        {"W_enc": state["W_enc"], "b_enc": state["b_enc"], "W_dec": state["W_dec"]},
        folder / "sae_weights.safetensors",
    )
    with pytest.raises(InterpError, match="has no 'b_dec'"):
        load_dictionary(folder)
    state["b_dec"] = torch.zeros(5)
    save_file(state, folder / "sae_weights.safetensors")
    with pytest.raises(InterpError, match=r"'b_dec' has shape \[5\]"):
        load_dictionary(folder)
    state["b_dec"], state["scaling_factor"] = torch.zeros(6), torch.ones(16)
    save_file(state, folder / "sae_weights.safetensors")
    with pytest.raises(InterpError, match="holds 'scaling_factor'"):
        load_dictionary(folder)
    (folder / "sae_weights.safetensors").write_bytes(b"not a file")
    with pytest.raises(InterpError, match="not a readable safetensors"):
        load_dictionary(folder)
    (folder / "sae_weights.safetensors").unlink()
    with pytest.raises(InterpError, match="has no sae_weights.safetensors"):
        load_dictionary(folder)
    (folder / "cfg.json").write_text("{")
    with pytest.raises(InterpError, match="no such dictionary folder"):
        load_dictionary(tmp_path / "nowhere")

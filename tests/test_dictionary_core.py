"""The Dictionary class: encoders match their definitions, the error closes the identity."""

import pytest
import torch

from interp.core.errors import InterpError
from interp.dictionaries import Dictionary


@pytest.mark.parametrize("arch", ["relu", "topk", "jumprelu"])
def test_encode_decode_error(arch):
    D = Dictionary.random(d_in=6, d_sae=20, architecture=arch, k=3, hook_name="h", seed=1)
    with torch.no_grad():
        D.b_enc.normal_(generator=torch.Generator().manual_seed(2))
        D.b_dec.normal_(generator=torch.Generator().manual_seed(3))
        if arch == "jumprelu":
            D.threshold.fill_(0.5)
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0))
    pre = D.pre_activations(x)
    assert torch.allclose(pre, x @ D.W_enc + D.b_enc)
    acts = D.encode(x)
    assert acts.shape == (4, 5, 20)
    if arch != "jumprelu":
        assert (acts >= 0).all()
    if arch == "topk":
        assert int((acts != 0).sum(-1).max()) <= 3
        kept = pre.topk(3, dim=-1).values.clamp(min=0)
        assert torch.allclose(acts.sort(-1, descending=True).values[..., :3], kept)
    if arch == "jumprelu":
        assert torch.equal(acts != 0, pre > 0.5)
    # the error term is defined so that reconstruction + error is the input, to rounding:
    # (x - r) + r rounds twice in float32, a few ulps of the larger of |x| and |r|, so the
    # bar is 1e-6 of that scale (about 8 ulps), not 1e-6 absolute
    recon = D.decode(acts)
    scale = max(1.0, float(x.abs().max()), float(recon.abs().max()))
    assert torch.allclose(recon + D.error(x), x, atol=1e-6 * scale)
    assert D.to(torch.float64).encode(x.double()).dtype == torch.float64


def test_apply_b_dec_to_input():
    D = Dictionary.random(d_in=4, d_sae=8, apply_b_dec_to_input=True)
    with torch.no_grad():
        D.b_dec.fill_(1.0)
    x = torch.randn(3, 4)
    assert torch.allclose(D.pre_activations(x), (x - 1.0) @ D.W_enc + D.b_enc)


def test_bad_shapes_and_architectures_name_the_key():
    W = torch.zeros(4, 8)
    with pytest.raises(InterpError, match="W_dec"):
        Dictionary(W, torch.zeros(8), torch.zeros(4, 8), torch.zeros(4))
    with pytest.raises(InterpError, match="b_enc"):
        Dictionary(W, torch.zeros(4), torch.zeros(8, 4), torch.zeros(4))
    with pytest.raises(InterpError, match="architecture 'gated'"):
        Dictionary(W, torch.zeros(8), torch.zeros(8, 4), torch.zeros(4), architecture="gated")
    with pytest.raises(InterpError, match="needs an integer k"):
        Dictionary(W, torch.zeros(8), torch.zeros(8, 4), torch.zeros(4), architecture="topk")
    with pytest.raises(InterpError, match="threshold"):
        Dictionary(W, torch.zeros(8), torch.zeros(8, 4), torch.zeros(4), architecture="jumprelu")
    D = Dictionary(W, torch.zeros(8), torch.zeros(8, 4), torch.zeros(4), architecture="standard")
    assert D.architecture == "relu" and (D.d_in, D.d_sae) == (4, 8)
    with pytest.raises(InterpError, match=r"needs \[\.\.\., 4\]"):
        D.encode(torch.zeros(2, 5))

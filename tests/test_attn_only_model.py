"""The hooked attention-only model speaks the same protocol as TransformerBridge."""

import pytest
import torch
from conftest import native_bridge

from interp import InterpError
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer


@pytest.fixture(scope="module")
def bridge():
    return native_bridge()


def test_same_function_and_hooks_as_bridge(bridge):
    ours = AttnOnlyTransformer.from_bridge(bridge).eval()
    tokens = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, ref_cache = bridge.run_with_cache(tokens)
        out, cache = ours.run_with_cache(tokens)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    shared = ["hook_embed", "hook_pos_embed"] + [
        f"blocks.{l}.{n}"
        for l in range(2)
        for n in (
            "hook_resid_pre",
            "ln1.hook_scale",
            "ln1.hook_normalized",
            "attn.hook_q",
            "attn.hook_k",
            "attn.hook_v",
            "attn.hook_pattern",
            "attn.hook_z",
            "hook_attn_out",
            "hook_resid_post",
        )
    ]
    # hook_attn_scores is left out: on boot_native bridges (TransformerLens 4.3.0) that hook
    # carries the softmaxed pattern, not the pre-softmax scores; ours carries the scores.
    for name in shared:
        a, b = cache[name], ref_cache[name]
        assert a.shape == b.shape, name
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)
    for w in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U"):
        assert getattr(ours, w).shape == getattr(bridge, w).shape, w
    torch.testing.assert_close(ours.QK.AB, bridge.QK.AB, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours.OV.AB, bridge.OV.AB, atol=1e-6, rtol=1e-5)


def test_loss_and_mask():
    cfg = AttnOnlyConfig(n_layers=1, n_heads=2, d_model=8, d_head=4, d_vocab=7, n_ctx=6, seed=0)
    model = AttnOnlyTransformer(cfg)
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6]])
    per_tok = model(tokens, "loss", loss_per_token=True)
    assert per_tok.shape == (1, 5)
    mask = torch.tensor([[0, 0, 1, 1, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(model(tokens, "loss", loss_mask=mask), per_tok[0, 2:4].mean())


def test_seeded_init_is_deterministic():
    cfg = AttnOnlyConfig(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=7, n_ctx=6, seed=5)
    a, b = AttnOnlyTransformer(cfg), AttnOnlyTransformer(cfg)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n


def test_bad_tokens():
    cfg = AttnOnlyConfig(n_layers=1, n_heads=1, d_model=4, d_head=4, d_vocab=5, n_ctx=4)
    model = AttnOnlyTransformer(cfg)
    with pytest.raises(InterpError, match="exceeds the model's context n_ctx=4"):
        model(torch.zeros((1, 5), dtype=torch.long))
    with pytest.raises(InterpError, match="token id 9 is outside the vocabulary"):
        model(torch.tensor([[0, 9]]))
    with pytest.raises(InterpError, match="no tokenizer"):
        model.to_tokens("hello")
    with pytest.raises(InterpError, match="n_ctx"):
        AttnOnlyConfig(n_layers=1, n_heads=1, d_model=4, d_head=4, d_vocab=5)

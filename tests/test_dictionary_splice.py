"""A dictionary spliced at its hook with its error kept leaves every model kind's logits as
they were; without the error the features alone carry what they carry; bad dictionaries
are refused naming the problem."""

import pytest
import torch
from model_kinds import KINDS, kind_model

from interp.core.errors import InterpError
from interp.dictionaries import Dictionary, Splice, check_dictionary, spliced


def _tokens(model, batch=2, pos=10):
    g = torch.Generator().manual_seed(1)
    return torch.randint(2, int(model.cfg.d_vocab), (batch, pos), generator=g)


def _random_dictionary(model, hook, seed=0):
    from interp.dictionaries.splice import hook_width

    D = Dictionary.random(
        d_in=hook_width(model, hook), d_sae=48, architecture="topk", k=3, hook_name=hook, seed=seed
    )
    with torch.no_grad():
        D.b_enc.normal_(generator=torch.Generator().manual_seed(seed)).mul_(0.1)
    return D


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_splice_with_error_keeps_logits(kind):
    model = kind_model(kind)
    tokens = _tokens(model)
    with torch.no_grad():
        clean = model(tokens)
        for hook in ("blocks.1.hook_resid_pre", "blocks.0.attn.hook_z"):
            D = _random_dictionary(model, hook)
            s = Splice(model, D)
            out = model.run_with_hooks(tokens, fwd_hooks=s.hooks)
            # recon + (x - recon) differs from x by float32 rounding only; 1e-5 absolute on logits
            assert (out - clean).abs().max() < 1e-5, (kind, hook)
            assert s.acts.shape == (2, 10, 48) and s.error.shape[-1] == D.d_in
            # the features alone carry only part of x: dropping the error changes the output
            with spliced(model, D, keep_error=False):
                assert (model(tokens) - clean).abs().max() > 1e-3


def test_edits_and_error_node():
    model = kind_model("attn-only (learned positions)")
    tokens = _tokens(model)
    D = _random_dictionary(model, "blocks.1.hook_resid_pre")
    with torch.no_grad():
        clean = model(tokens)
        # zeroing the error equals dropping it; editing every feature to zero leaves b_dec + error
        with spliced(model, D, edit_error=torch.zeros_like) as s:
            a = model(tokens)
        with spliced(model, D, keep_error=False):
            b = model(tokens)
        assert torch.allclose(a, b, atol=1e-6)
        x = model.run_with_cache(tokens, names_filter=D.hook_name)[1][D.hook_name]
        assert torch.allclose(s.error, D.error(x), atol=1e-6)

        def keep_b_dec(cache_x, hook):
            return (D.b_dec + D.error(cache_x)).to(cache_x.dtype)

        with spliced(model, D, edit_acts=torch.zeros_like):
            c = model(tokens)
        d = model.run_with_hooks(tokens, fwd_hooks=[(D.hook_name, keep_b_dec)])
        assert torch.allclose(c, d, atol=1e-5) and not torch.allclose(c, clean, atol=1e-3)
        with pytest.raises(InterpError, match="edit_acts returned"):
            with spliced(model, D, edit_acts=lambda a: a[..., :3]):
                model(tokens)


def test_bad_dictionaries_are_refused():
    model = kind_model("attn-only (learned positions)")
    D = _random_dictionary(model, "blocks.1.hook_resid_pre")
    with pytest.raises(InterpError, match="not a hook of this model"):
        D.hook_name = "blocks.7.hook_resid_pre"
        check_dictionary(model, D)
    D.hook_name = ""
    with pytest.raises(InterpError, match="names no hook"):
        check_dictionary(model, D)
    wide = Dictionary.random(
        d_in=model.cfg.d_model + 1, d_sae=8, hook_name="blocks.1.hook_resid_pre"
    )
    with pytest.raises(InterpError, match=r"d_in is \d+, but hook"):
        check_dictionary(model, wide)
    with pytest.raises(InterpError, match="expected a Dictionary"):
        check_dictionary(model, "sae")
    with pytest.raises(InterpError, match="no model"):
        check_dictionary(None, wide)

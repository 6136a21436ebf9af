"""One runtime per model: the only code that knows model kinds, and what the engines ask of it.

* a new model family is one :class:`Runtime` subclass registered in one place: the
  engines then resume its passes, with the same numbers as the plain loop;
* each kind's runtime answers the same questions (resume at a block, a block's inputs,
  only some logit rows, the readout, norms under one LayerNorm / RMSNorm rule);
* patching direction: a head of the last layer of an attention-only model reaches the
  logits only directly, so path patching it to the logits is patching it, both ways.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import native_bridge

import interp.analysis as A
from interp import runtime as R
from interp.core.errors import InterpError
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.datasets import repeated_random_tokens
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer
from interp.models.hf import random_gpt2, random_llama
from interp.runtime import Runtime, repeat_copies, runtime_of


class Continuing(AttnOnlyTransformer):
    """Our attention-only model behind another interface: it resumes with ``continue_from``
    and has no ``forward_from``, so no built-in kind knows how to resume it."""

    def continue_from(self, resid: torch.Tensor, layer: int) -> torch.Tensor:
        return AttnOnlyTransformer.forward_from(self, resid, layer)

    def forward(self, tokens, *args, **kwargs):  # the whole model, through continue_from
        tokens = self.check_tokens(tokens)
        resid = self.hook_embed(self.embed.W_E[tokens])
        pos = self.pos_embed.W_pos[: tokens.shape[1]][None].expand(tokens.shape[0], -1, -1)
        return self.continue_from(resid + self.hook_pos_embed(pos), -1)

    forward_from = None  # not this kind's interface


class ContinuingRuntime(Runtime):
    """The whole of what supporting the new family takes."""

    kind = "continuing"
    can_resume = True

    @classmethod
    def matches(cls, model):
        return isinstance(model, Continuing)

    def run(self, tokens, *, hooks=(), rows=None, start=0, state=None, copies=1):
        if start == 0:
            return super().run(tokens, hooks=hooks, copies=copies)
        with self.model.hooks(fwd_hooks=list(hooks)):
            return self.model.continue_from(repeat_copies(state, copies), start - 1)

    def block_inputs(self, tokens, layers, *, rows=None):  # rows: may unembed only those
        kept = {}

        def keep(x, hook):
            kept[int(hook.name.split(".")[1])] = x

        hooks = [(f"blocks.{l}.hook_resid_pre", keep) for l in sorted(layers)]
        return self.model.run_with_hooks(tokens, fwd_hooks=hooks), kept


def _models():
    cfg = AttnOnlyConfig(n_layers=3, n_heads=2, d_model=16, d_head=8, d_vocab=30, n_ctx=16, seed=4)
    native = AttnOnlyTransformer(cfg).eval()
    fake = Continuing(cfg).eval()
    fake.load_state_dict(native.state_dict())
    return native, fake


def test_a_new_model_kind_is_one_runtime_registered_in_one_place():
    data = repeated_random_tokens(3, 6, d_vocab=30, seed=0)
    metric = loss_metric(data.loss_mask)
    native, unknown = _models()
    want = A.ablate_heads(native, data.tokens, metric=metric)
    assert runtime_of(unknown).kind == "plain"  # nothing knows how to resume it yet
    plain = A.ablate_heads(unknown, data.tokens, metric=metric)
    assert plain.attrs["engine"] == "loop"
    with pytest.raises(InterpError, match=r"correction='qk' .* cannot resume a forward pass"):
        A.attribute_heads(unknown, data.tokens, metric=metric, correction="qk")
    R.register(ContinuingRuntime)
    try:
        _, fake = _models()  # a model seen after the kind is registered
        assert runtime_of(fake).kind == "continuing"
        got = A.ablate_heads(fake, data.tokens, metric=metric)
        assert got.attrs["engine"] == "resume-after-block"  # the engine now resumes it
        # ablated losses (about 3.4, not differences): rtol 1e-5 of each value is the bar for
        # float32 rounding of a resumed pass against the loop; atol 1e-6 is only a floor
        np.testing.assert_allclose(got["ablated"], want["ablated"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(plain["ablated"], want["ablated"], rtol=1e-5, atol=1e-6)
        # ... and the edge engine, which resumes at receivers' layers and recomputes norms
        clean, corrupted = data.tokens, repeated_random_tokens(3, 6, d_vocab=30, seed=1).tokens
        ld = logit_diff_metric(3, 4)
        kw = dict(corrupted_tokens=corrupted, metric=ld, method="exact")
        exact = A.attribute_edges(fake, clean, **kw)
        ref = A.attribute_edges(native, clean, **kw)
        np.testing.assert_allclose(exact["exact"], ref["exact"], rtol=1e-4, atol=1e-5)
    finally:
        R.KINDS.remove(ContinuingRuntime)


@pytest.mark.parametrize(
    "make",
    [lambda: _models()[0], lambda: random_gpt2(3, vocab=30), lambda: random_llama(3, vocab=30)],
    ids=["native", "gpt2", "llama-gqa"],
)
def test_each_kind_resumes_exactly_and_reads_only_some_rows(make):
    model = make()
    rt = runtime_of(model)
    tokens = repeated_random_tokens(2, 5, d_vocab=30, seed=2).tokens
    with torch.no_grad():
        full = model(tokens)
        logits, kept = rt.block_inputs(tokens, {1, 2})
        torch.testing.assert_close(logits, full, rtol=1e-6, atol=1e-6)
        for start in (1, 2):  # resuming at a block with what enters it is the plain pass
            resumed = rt.run(tokens, start=start, state=kept[start], copies=2)
            torch.testing.assert_close(resumed, full.repeat(2, 1, 1), rtol=1e-5, atol=1e-5)
        rows = rt.run(tokens, rows=[-1])  # only the last position unembedded (where supported)
        torch.testing.assert_close(rows[:, -1], full[:, -1], rtol=1e-5, atol=1e-5)
        final = rt.readout(
            model.run_with_cache(tokens)[1][f"blocks.{rt.n_layers - 1}.hook_resid_post"]
        )
        torch.testing.assert_close(final, full, rtol=1e-5, atol=1e-5)
    assert rt.kind == ("native" if isinstance(model, AttnOnlyTransformer) else "bridge")
    assert rt.rows_supported == (rt.kind == "bridge")


@pytest.mark.parametrize(
    "make, centred",
    [
        (lambda: _models()[0], True),
        (lambda: random_gpt2(2, vocab=30), True),
        (lambda: random_llama(2, vocab=30), False),
    ],  # fmt: skip
    ids=["native-ln", "gpt2-ln", "llama-rms"],
)
def test_norms_follow_one_rule_and_match_their_modules(make, centred):
    from conftest import jitter

    model = jitter(make())
    rt = runtime_of(model)
    x = torch.randn(2, 3, rt.d_model)
    g = torch.randn(4, 2, 3, rt.d_model)
    for norm in (rt.norm("ln1", 0), rt.norm("final")):
        assert norm.centred is centred
        torch.testing.assert_close(norm(x), norm.module(x), rtol=1e-5, atol=1e-5)
        want = norm._autograd_vjp(x, g)  # autograd through the module itself
        torch.testing.assert_close(norm.vjp(x, g), want, rtol=1e-4, atol=1e-5)
    assert rt.norm("ln1", 0) is rt.norm("ln1", 0)  # built once: its verdicts are kept


@pytest.mark.parametrize("direction", ["noising", "denoising"])
@pytest.mark.parametrize("kind", ["attn-only", "native-bridge"])
def test_a_last_layer_head_path_patched_to_the_logits_is_the_head_patched(
    direction, kind, induction_model
):
    """Its only path to the logits is the direct one, so the two tables agree in both
    directions: the same effect, the same normalized column, the same base and source runs."""
    model = induction_model if kind == "attn-only" else native_bridge()
    clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7], [0, 9, 3, 4, 11, 9, 3, 4]])  # ... 7 8 ... 7
    corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7], [0, 9, 3, 4, 12, 9, 3, 4]])
    metric = logit_diff_metric(torch.tensor([8, 11]), torch.tensor([9, 12]))
    last = model.cfg.n_layers - 1
    for head in range(model.cfg.n_heads):
        label = f"L{last}H{head}"
        kw = dict(corrupted_tokens=corrupted, metric=metric, direction=direction)
        heads = A.patch_heads(model, clean, heads=[label], **kw)
        paths = A.path_patch(model, clean, senders=[label], **kw)
        for column in ("clean", "corrupted", "patched", "effect", "normalized"):
            assert paths[column].item() == pytest.approx(heads[column].item(), rel=1e-4, abs=1e-5)
        assert heads.attrs["direction"] == paths.attrs["direction"] == direction
    base = heads["clean"] if direction == "noising" else heads["corrupted"]
    np.testing.assert_allclose(heads["patched"] - base, heads["effect"], rtol=1e-6)

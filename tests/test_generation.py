"""Generation (interp.analysis.generation), exact on every model kind, and shown to be.

* Without interventions, greedy tokens equal Hugging Face's own ``generate`` token for token
  on every architecture of the QK tests (each a tiny random model, its Hugging Face copy taken
  before the bridge wraps it), on our attention-only model (copied into a GPT-2 whose MLPs
  are zero and whose unembedding has our bias) and on SmolLM2, with left-padded batches.
* With interventions (all four kinds at once), tokens equal a loop of whole forward passes
  with the same hooks and no cache.

Logits are compared at 1e-4 of their largest magnitude: the cached and whole passes (and
Hugging Face's attention) sum in different orders, which moves float32 logits by about 1e-6
of their size on any x86 CPU; 1e-4 leaves room and still catches any real difference (a
wrong position or a missing key moves them by far more).
"""

import copy
from unittest import mock

import model_kinds as mk
import pytest
import torch
import transformers as T

import interp.models.hf as hf_module
from interp.analysis.generation import (
    HeadAblation,
    Patch,
    Steering,
    UserHook,
    compare_generations,
    generate,
)
from interp.analysis.generation.prompts import pad_id, prompts_of
from interp.models.attn_only import AttnOnlyTransformer
from interp.runtime import runtime_of

ENCODERS = {k for k in mk.KINDS if k.startswith("bert")}  # nothing to generate
KINDS = sorted(set(mk.KINDS) - ENCODERS)
ROWS = [[5, 7, 9, 11, 13, 7, 9], [8, 3, 12, 4], [6, 15, 2, 6, 15]]  # left-padded to 7


def close(a, b, rel=1e-4):
    scale = max(1.0, float(b.abs().max()))
    return float((a - b).abs().max()) <= rel * scale


def as_gpt2(model):
    """Our attention-only model as a Hugging Face GPT-2: our heads, extra heads of zeros (GPT-2
    splits d_model into heads), MLPs of zeros, and an unembedding with our bias."""
    cfg = model.cfg
    d, H, e = cfg.d_model, cfg.n_heads, cfg.d_head
    n = d // e
    hf = T.GPT2LMHeadModel(
        T.GPT2Config(
            n_layer=cfg.n_layers, n_embd=d, n_head=n, n_positions=cfg.n_ctx,
            vocab_size=cfg.d_vocab, layer_norm_epsilon=cfg.eps, tie_word_embeddings=False,
        )
    )  # fmt: skip
    with torch.no_grad():
        hf.transformer.wte.weight.copy_(model.W_E)
        hf.transformer.wpe.weight.copy_(model.W_pos)
        for block, h in zip(model.blocks, hf.transformer.h):
            a = block.attn
            h.ln_1.weight.copy_(block.ln1.w)
            h.ln_1.bias.copy_(block.ln1.b)
            w, b = [], []
            for W, bias in ((a.W_Q, a.b_Q), (a.W_K, a.b_K), (a.W_V, a.b_V)):
                full, fb = torch.zeros(d, n, e), torch.zeros(n, e)
                full[:, :H], fb[:H] = W.permute(1, 0, 2), bias
                w.append(full.reshape(d, n * e))
                b.append(fb.reshape(-1))
            h.attn.c_attn.weight.copy_(torch.cat(w, 1))
            h.attn.c_attn.bias.copy_(torch.cat(b))
            out = torch.zeros(n, e, d)
            out[:H] = a.W_O
            h.attn.c_proj.weight.copy_(out.reshape(n * e, d))
            h.attn.c_proj.bias.copy_(a.b_O)
            for p in h.mlp.parameters():
                p.zero_()
        hf.transformer.ln_f.weight.copy_(model.ln_final.w)
        hf.transformer.ln_f.bias.copy_(model.ln_final.b)
        hf.lm_head = torch.nn.Linear(d, cfg.d_vocab, bias=True)
        hf.lm_head.weight.copy_(model.W_U.T)
        hf.lm_head.bias.copy_(model.b_U)
    return hf.eval()


def with_reference(kind):
    """The model of ``kind`` and its Hugging Face twin (a copy taken before any wrapping)."""
    if kind.startswith("attn-only"):
        model = mk.KINDS[kind]()
        return model, as_gpt2(model)
    kept = {}
    wrap = hf_module.bridge_from_hf

    def keep(hf, **kw):
        kept["hf"] = copy.deepcopy(hf).eval()
        return wrap(hf, **kw)

    with mock.patch.object(hf_module, "bridge_from_hf", keep):
        with mock.patch.object(mk, "bridge_from_hf", keep):
            model = mk.KINDS[kind]()
    return model, kept["hf"]


def hf_greedy(ref, prompts, n, pad):
    with torch.no_grad():
        out = ref.generate(
            prompts.tokens, attention_mask=prompts.mask.long(), max_new_tokens=n,
            do_sample=False, pad_token_id=pad, eos_token_id=None, output_scores=True,
            return_dict_in_generate=True,
        )  # fmt: skip
    return out.sequences, torch.stack(out.scores, 1)


def _edits(model):
    cfg = model.cfg
    last = cfg.n_layers - 1
    gen = torch.Generator().manual_seed(0)
    vector = torch.randn(cfg.d_model, generator=gen)

    def sharpen(pattern, hook):  # each query row on its own: rows agree cached or not
        return pattern.pow(2) / pattern.pow(2).sum(-1, keepdim=True)

    source = [[(t + 3) % 30 + 2 for t in r] for r in ROWS]
    return [
        HeadAblation(heads=[(0, 1), (last, 0)], ablation="resample", seed=3),
        Steering(f"blocks.{last}.hook_resid_pre", vector, scale=2.0, positions="new"),
        UserHook(f"blocks.{last}.attn.hook_pattern", sharpen, positions="all"),
        Patch(source, heads=[(0, 0)], positions=[-1, -2]),
    ]


# GPT-J's adapter computes attention in the wrapped module and discards hook_pattern edits,
# saying so in this warning; the test's other edits still act there.
@pytest.mark.filterwarnings("ignore:A hook on attn.hook_pattern returned a modified tensor")
@pytest.mark.parametrize("kind", KINDS)
def test_exact_on_every_model_kind(kind):
    """Clean: Hugging Face's own greedy tokens. Edited (all four kinds of intervention at
    once): the tokens of a loop of whole forward passes with the same hooks, no cache."""
    model, ref = with_reference(kind)
    prompts = prompts_of(model, ROWS)
    assert prompts.padded
    with torch.no_grad():  # the twin is the same function (the comparison means something)
        assert close(ref(prompts.tokens[:1]).logits, model(prompts.tokens[:1]))
    clean = generate(model, ROWS, max_new_tokens=5, keep_logits=True)
    tokens, scores = hf_greedy(ref, prompts, 5, pad_id(model))
    assert torch.equal(clean.tokens, tokens), kind
    assert close(clean.logits, scores), kind
    if runtime_of(model).kind == "bridge":
        assert runtime_of(model).decoding() == "unbridged", kind

    edits = _edits(model)
    cached = generate(model, ROWS, max_new_tokens=4, interventions=edits, keep_logits=True)
    whole = generate(
        model, ROWS, max_new_tokens=4, interventions=edits, keep_logits=True, kv_cache=False
    )
    assert cached.attrs["engine"].startswith("kv cache") and whole.attrs["engine"] == "whole passes"
    assert torch.equal(cached.tokens, whole.tokens), kind
    assert close(cached.logits, whole.logits), kind
    # the edits act at every step (the steering only on new tokens), not only on the prompt
    moved = (cached.logits - clean.logits[:, :4]).abs().amax(dim=(0, 2))
    assert bool((moved > 1e-3).all()), (kind, moved)


@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_head_ablations_agree_cached_or_not(induction_model, ablation):
    edit = HeadAblation(heads=["L1H1"], ablation=ablation, positions="all")
    a = generate(induction_model, ROWS, max_new_tokens=6, interventions=[edit], keep_logits=True)
    b = generate(
        induction_model, ROWS, max_new_tokens=6, interventions=[edit], keep_logits=True,
        kv_cache=False,
    )  # fmt: skip
    assert torch.equal(a.tokens, b.tokens) and close(a.logits, b.logits)
    assert a.attrs["ablation"] == ablation


def test_hooks_fire_with_the_shapes_of_each_pass(induction_model):
    """The prompt's pass carries every prompt column, each later pass one column; the pattern
    of a cached step is one query row over every key so far, and the cache holds the keys a
    hook on hook_k edited."""
    seen = {}

    def record(x, hook):
        seen.setdefault(hook.name, []).append(tuple(x.shape))

    names = ["blocks.1.attn.hook_z", "blocks.1.attn.hook_pattern", "blocks.0.hook_resid_pre"]
    edits = [UserHook(n, record) for n in names]
    generate(induction_model, ROWS, max_new_tokens=3, interventions=edits)
    assert seen["blocks.1.attn.hook_z"] == [(3, 7, 2, 32), (3, 1, 2, 32), (3, 1, 2, 32)]
    assert seen["blocks.1.attn.hook_pattern"] == [(3, 2, 7, 7), (3, 2, 1, 8), (3, 2, 1, 9)]
    assert seen["blocks.0.hook_resid_pre"][1] == (3, 1, 128)

    def push(k, hook):  # an edit of the prompt's keys only: later tokens read it from the cache
        return k + 0.5

    edit = [UserHook("blocks.1.attn.hook_k", push, positions="prompt")]
    a = generate(induction_model, ROWS, max_new_tokens=4, interventions=edit, keep_logits=True)
    b = generate(
        induction_model, ROWS, max_new_tokens=4, interventions=edit, keep_logits=True,
        kv_cache=False,
    )  # fmt: skip
    clean = generate(induction_model, ROWS, max_new_tokens=4, keep_logits=True)
    assert close(a.logits, b.logits) and not close(a.logits, clean.logits)


def test_bridge_hooks_fire_on_cached_steps():
    model = mk.kind_model("llama (GQA, rotary)")
    seen = {}

    def recorder(name):  # a bridge's hook.name is the aliased hook's own name
        return lambda x, hook: seen.setdefault(name, []).append(tuple(x.shape))

    names = ["hook_z", "hook_pattern", "hook_resid_pre"]
    hooks = ["blocks.1.attn.hook_z", "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_pre"]
    edits = [UserHook(h, recorder(n)) for h, n in zip(hooks, names)]
    generate(model, ROWS, max_new_tokens=2, interventions=edits)
    assert seen["hook_z"] == [(3, 7, 4, 8), (3, 1, 4, 8)]
    assert seen["hook_pattern"] == [(3, 4, 7, 7), (3, 4, 1, 8)]
    assert seen["hook_resid_pre"] == [(3, 7, 32), (3, 1, 32)]


def test_padding_and_chunks_change_no_prompt(induction_model):
    both = generate(induction_model, ROWS, max_new_tokens=5, keep_logits=True)
    alone = generate(induction_model, [ROWS[1]], max_new_tokens=5, keep_logits=True)
    assert torch.equal(both.new_tokens[1:2], alone.new_tokens)
    assert close(both.logits[1:2], alone.logits)
    est = generate(induction_model, ROWS, max_new_tokens=5, estimate=True)
    budget = est.budget_for(1)
    split = generate(induction_model, ROWS, max_new_tokens=5, memory_budget=budget)
    assert (
        generate(
            induction_model, ROWS, max_new_tokens=5, memory_budget=budget, estimate=True
        ).chunks
        == 3
    )
    assert torch.equal(split.tokens, both.tokens)


def test_sampling_is_deterministic_by_seed(induction_model):
    def run(**kw):
        return generate(induction_model, ROWS, max_new_tokens=8, **kw).new_tokens

    assert torch.equal(run(temperature=1.0, seed=4), run(temperature=1.0, seed=4))
    assert not torch.equal(run(temperature=1.5, seed=4), run(temperature=1.5, seed=5))
    greedy = run()
    assert torch.equal(run(temperature=0.7, top_k=1, seed=9), greedy)
    assert torch.equal(run(temperature=0.7, top_p=1e-6, seed=9), greedy)
    # a prompt's draws are its own: the same tokens alone or beside others
    alone = generate(induction_model, [ROWS[0]], max_new_tokens=8, temperature=1.0, seed=4)
    assert torch.equal(alone.new_tokens, run(temperature=1.0, seed=4)[:1])


def test_a_stop_token_ends_a_prompt(induction_model):
    free = generate(induction_model, ROWS, max_new_tokens=6)
    stop = int(free.new_tokens[0, 2])
    g = generate(induction_model, ROWS, max_new_tokens=6, stop=stop)
    first = int((free.new_tokens[0] == stop).nonzero()[0])
    assert g.lengths[0] == first + 1 and bool(g.stopped[0])
    assert torch.isnan(g.logprobs[0, first + 1 :]).all()
    assert torch.equal(g.new_tokens[0, : first + 1], free.new_tokens[0, : first + 1])


def test_compare_generations_marks_the_first_difference(induction_model):
    df = compare_generations(
        induction_model, ROWS, interventions=[HeadAblation(heads=["L1H1"])], max_new_tokens=5
    )
    firsts = df.attrs["first_difference"]
    assert len(firsts) == 3 and df["first_difference"].sum() == sum(f is not None for f in firsts)
    row = df[(df["prompt"] == 0) & (df["step"] == 0)].iloc[0]
    # each token under the model that chose it, scored again by a whole pass of the sequence
    clean = generate(induction_model, ROWS, max_new_tokens=5, keep_logits=True)
    # a log-probability from a whole pass against the cached one: logit - logsumexp, so it
    # moves by a few ulps of the logits' size (module docstring), and the bar is 1e-6 of
    # that size (about 8 ulps), not 1e-6 absolute
    size = max(1.0, float(clean.logits.abs().max()))
    assert abs(row["clean_logprob"] - float(clean.logprobs[0, 0])) < 1e-6 * size
    if row["same"]:
        assert abs(row["clean_logprob_edited"] - row["edited_logprob"]) < 1e-4
    assert set(df.columns) >= {"clean", "edited", "clean_logprob_edited", "edited_logprob_clean"}


def test_smollm2_equals_hugging_face_and_its_ablated_loop(smollm):
    from interp.models.pretrained import smollm2_cache

    ref = T.AutoModelForCausalLM.from_pretrained(smollm2_cache()).eval()
    text = ["The cat sat on the mat. The cat sat on", "One, two, three,"]
    prompts = prompts_of(smollm, text)
    g = generate(smollm, text, max_new_tokens=4, keep_logits=True)
    tokens, scores = hf_greedy(ref, prompts, 4, pad_id(smollm))
    assert torch.equal(g.tokens, tokens)
    assert close(g.logits, scores)
    heads = ["L18H6", "L17H3", "L17H4", "L17H5", "L18H7", "L23H2"]
    edit = [HeadAblation(heads=heads)]
    a = generate(smollm, text[:1], max_new_tokens=3, interventions=edit, keep_logits=True)
    b = generate(
        smollm, text[:1], max_new_tokens=3, interventions=edit, keep_logits=True, kv_cache=False
    )
    assert torch.equal(a.tokens, b.tokens) and close(a.logits, b.logits)


BAD_CALLS = [
    (dict(prompt=[[5] * 49]), "exceeds the model's context n_ctx=48"),
    (dict(max_new_tokens=45), "goes past the model's context of 48 tokens"),
    (dict(max_new_tokens=None), "max_new_tokens must be an integer"),
    (dict(max_new_tokens=float("inf")), "unbounded generation is refused"),
    (dict(max_new_tokens=2.5), "max_new_tokens must be an integer"),
    (dict(temperature=-0.5), "temperature must be a finite number >= 0"),
    (dict(temperature=float("nan")), "temperature must be a finite number >= 0"),
    (dict(temperature=1.0, top_p=0.0), "top_p must be in (0, 1]"),
    (dict(temperature=1.0, top_p=1.5), "top_p must be in (0, 1]"),
    (dict(temperature=1.0, top_p=float("nan")), "top_p must be in (0, 1]"),
    (dict(temperature=1.0, top_k=0), "top_k must be >= 1"),
    (dict(top_k=5), "temperature=0 is greedy"),
    (dict(stop="t5"), "this model has no tokenizer"),
    (dict(interventions=[HeadAblation(heads=["L2H0"])]), "layer 2"),
    (dict(interventions=[HeadAblation(heads=["L0H1"], ablation="patch")]), "unknown ablation"),
    (dict(interventions=[HeadAblation(heads=["L0H0"], positions=[9])]), "outside the prompt"),
    (dict(interventions=[Steering("blocks.5.hook_resid_pre", torch.ones(128))]), "is not a hook"),
    (dict(interventions=[Steering("blocks.0.hook_resid_pre", torch.ones(64))]), "carries (128,)"),
    (dict(interventions=[Steering("blocks.0.attn.hook_z", torch.ones(32))]), "carries (2, 32)"),
    (dict(interventions=[UserHook("blocks.0.hook_nothing", print)]), "is not a hook"),
    (dict(interventions=[Patch(ROWS[:2], heads=["L0H0"])]), "same tokens' shape"),
    (dict(interventions=[Patch(ROWS, heads=["L0H0"], positions="new")]), "no generated tokens"),
    (dict(interventions=["L1H1"]), "is not an intervention"),
]


@pytest.mark.parametrize("call, message", BAD_CALLS, ids=[m for _, m in BAD_CALLS])
def test_bad_input_is_refused_before_any_forward_pass(induction_model, call, message):
    from interp import InterpError

    passes = []
    handle = induction_model.blocks[0].register_forward_pre_hook(lambda *a: passes.append(1))
    kwargs = {"max_new_tokens": 3, **call}
    prompt = kwargs.pop("prompt", ROWS)
    try:
        with pytest.raises(InterpError) as err:
            generate(induction_model, prompt, **kwargs)
    finally:
        handle.remove()
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert passes == []


@pytest.mark.parametrize("kind", sorted(ENCODERS))
def test_an_encoder_cannot_generate(kind):
    from interp import InterpError

    with pytest.raises(InterpError, match="cannot generate"):
        generate(mk.kind_model(kind), ROWS, max_new_tokens=2)


def test_the_generation_page_example_prints_what_it_says(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "generation.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    exec(compile(code, "docs/generation.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[[41, 50, 20, 8, 45]]" and lines[1] == "[[39, 46, 5, 46, 5]]"
    assert "# [[41, 50, 20, 8, 45]]" in code and "# [[39, 46, 5, 46, 5]]" in code
    assert "clean_logprob_edited" in lines[2]


class _Plain(AttnOnlyTransformer):
    """Our model with no ``forward_from``: no built-in kind knows it, so it is the plain kind."""

    def forward(self, tokens, *args, **kwargs):
        tokens = self.check_tokens(tokens)
        resid = self.hook_embed(self.embed.W_E[tokens])
        pos = self.pos_embed.W_pos[: tokens.shape[1]][None].expand(tokens.shape[0], -1, -1)
        resid = resid + self.hook_pos_embed(pos)
        for block in self.blocks:
            resid = block(resid)
        return self.ln_final(resid) @ self.unembed.W_U + self.unembed.b_U

    forward_from = None


def test_a_model_of_the_plain_kind_generates_with_whole_passes(induction_model):
    from interp import InterpError

    plain = _Plain(induction_model.cfg)
    plain.load_state_dict(induction_model.state_dict())
    plain.eval()
    assert runtime_of(plain).kind == "plain" and not runtime_of(plain).kv_cache
    rows = torch.tensor([ROWS[0], ROWS[0][::-1]])
    edit = [HeadAblation(heads=["L1H1"])]
    got = generate(plain, rows, max_new_tokens=4, interventions=edit, keep_logits=True)
    want = generate(induction_model, rows, max_new_tokens=4, interventions=edit, keep_logits=True)
    assert got.attrs["engine"] == "whole passes"
    assert torch.equal(got.tokens, want.tokens) and close(got.logits, want.logits)
    with pytest.raises(InterpError, match="cannot mask left padding"):
        generate(plain, ROWS, max_new_tokens=2)

"""Exact QK attribution and rotary-aware QK circuits (issue 24), on every kind of model.

Each architecture is a small random Hugging Face model wrapped in a bridge (its own
rotary convention, norms and score scale), plus our attention-only model. The rows
are checked against a hand computation from the model's hooks (its rotated queries
and keys), not against the attribution's own algebra.
"""

import pytest
import torch
from model_kinds import IDS, KINDS, SMALL, build  # noqa: F401  (KINDS: every kind QK tools support)

import interp.analysis as A
from interp.core.errors import InterpError
from interp.models import load_model
from interp.runtime import runtime_of


def _hf(*args, **kw):
    return build(*args, **kw)


def _tokens(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, min(40, model.cfg.d_vocab), (3, 9), generator=g)


def _by_hand(model, tokens, layer, head):
    """Scores from the model's own rotated queries and keys (hook_rot_q / hook_rot_k, or
    hook_q / hook_k without rotary), times its scale: [batch, query, key]."""
    _, c = model.run_with_cache(tokens)
    rot = f"blocks.{layer}.attn.hook_rot_q" in c
    q = c[f"blocks.{layer}.attn.hook_{'rot_q' if rot else 'q'}"][:, :, head]
    k_all = c[f"blocks.{layer}.attn.hook_{'rot_k' if rot else 'k'}"]
    g = head // (model.cfg.n_heads // k_all.shape[2])  # the key/value head it shares
    s = torch.einsum("bpd,bkd->bpk", q, k_all[:, :, g]) * runtime_of(model).qk_geometry(layer).scale
    return s, rot


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_rows_add_up_to_the_models_own_score(kind):
    model = KINDS[kind]()
    tokens = _tokens(model)
    layer, head = model.cfg.n_layers - 1, model.cfg.n_heads - 1
    df = A.qk_attribution(model, tokens, layer=layer, head=head, query_positions=[-1, 4], by="head")
    assert df.attrs["score_gap"] < 1e-4, kind
    sums = df.groupby(["query_position", "key_position"])["value"].sum()
    hand, rotated = _by_hand(model, tokens, layer, head)
    _, c = model.run_with_cache(tokens)
    model_scores = c[f"blocks.{layer}.attn.hook_attn_scores"][:, head]
    live = model_scores > -1e20
    cap = runtime_of(model).qk_geometry(layer).softcap
    capped = hand if cap is None else cap * torch.tanh(hand / cap)  # Gemma-2 hooks after the cap
    hooks_agree = bool((capped - model_scores)[live].abs().max() < 1e-4 * hand.abs().max())
    if kind.startswith("gpt-neox"):
        # its adapter's hook_rot_q / hook_rot_k are not what its scores are computed from
        assert not hooks_agree
    elif df.attrs["checked_against"] == "scores":  # GPT-J's adapter hooks the pattern there
        assert hooks_agree, kind
        scale = float(hand.abs().max())
        for (p, k), v in sums.items():
            if "gemma" in kind and k < p - 3:
                continue  # outside the sliding window: masked, not scored
            assert abs(v - float(hand[:, p, k].mean())) < 1e-4 * scale, (kind, p, k)
    assert set(df.columns[:3]) == {"layer", "head", "label"}
    assert df["label"].iloc[0] == f"L{layer}H{head}"


def test_grouped_query_heads_share_their_key_side():
    model = KINDS["llama (GQA, rotary)"]()
    tokens = _tokens(model)
    a = A.qk_attribution(model, tokens, layer=2, head=0, by="layer")
    b = A.qk_attribution(model, tokens, layer=2, head=1, by="layer")  # same key/value head
    assert a.attrs["score_gap"] < 1e-4 and b.attrs["score_gap"] < 1e-4
    assert not torch.allclose(torch.tensor(a["value"].values), torch.tensor(b["value"].values))


def test_groupings_and_contrast_sum_to_the_same_scores():
    model = KINDS["qwen3 (QK-norm)"]()
    tokens = _tokens(model)
    totals = [
        A.qk_attribution(model, tokens, layer=2, head=1, by=by)["value"].sum()
        for by in ("head", "component", "layer")
    ]
    assert max(totals) - min(totals) < 1e-5 * max(1.0, abs(totals[0]))
    per_key = A.qk_attribution(model, tokens, layer=2, head=1, key_positions=[2, 6], by="layer")
    diff = A.qk_attribution(model, tokens, layer=2, head=1, contrast=(2, 6), by="layer")
    cell = per_key.groupby("key_position")["value"].sum()
    assert abs(diff["value"].sum() - (cell[2] - cell[6])) < 1e-5
    assert "key_position" not in diff.columns and diff.attrs["contrast"] == [[2] * 3, [6] * 3]


def test_the_induction_head_attends_through_the_previous_token_head():
    """On the shipped model, L1H1's score on its induction target is carried by the key-side
    L0H1 piece (K-composition), the query side being the token's own embedding."""
    from interp.datasets import repeated_random_tokens

    model = load_model("induction-2l")
    data = repeated_random_tokens(8, 10, d_vocab=64, seed=1)
    n = data.tokens.shape[1]
    target = n - 10  # the token after the last one's first copy
    df = A.qk_attribution(model, data.tokens, layer=1, head=1, key_positions=[target], by="head")
    top = df.loc[df["value"].idxmax()]
    assert top["key_component"] == "L0H1", df.nlargest(3, "value")


def test_interventions_sit_beside_the_attribution():
    model = KINDS["gemma-2 (softcap, scalar, window, sandwich norms)"]()
    out = A.qk_interventions(model, _tokens(model), layer=2, head=1, top=2)
    assert list(out["side"]) == ["query", "query", "key", "key"]
    assert (out["gap"] - (out["measured"] - out["attribution"])).abs().max() < 1e-6
    assert ((out["attention_moved"] >= 0) & (out["attention_moved"] <= 1)).all()
    # the frozen-norm prediction and the real change agree in sign on the top pieces here
    assert (out["attribution"] * out["measured"] > 0).all(), out
    with pytest.raises(InterpError, match="holds the attention pattern"):
        gptj = KINDS["gpt-j (interleaved rotary)"]()
        A.qk_interventions(gptj, _tokens(gptj), layer=2, head=1)


def test_per_sequence_positions_give_each_sequence_its_own_rows():
    """One (query, key) per sequence: each sequence's rows sum to its own score from the
    model's hooks; the same cells given for all sequences give the mean of those rows."""
    model = KINDS["llama (GQA, rotary)"]()
    tokens = _tokens(model)
    q, k = [[8], [5], [6]], [[2], [5], [0]]
    df = A.qk_attribution(model, tokens, layer=2, head=1, query_positions=q, key_positions=k)
    hand, _ = _by_hand(model, tokens, 2, 1)
    per = df.groupby(["sequence", "query_position", "key_position"])["value"].sum()
    scale = float(hand.abs().max())
    assert list(per.index) == [(b, q[b][0], k[b][0]) for b in range(3)]
    for b in range(3):
        assert abs(per[(b, q[b][0], k[b][0])] - float(hand[b, q[b][0], k[b][0]])) < 1e-4 * scale
    same = dict(layer=2, head=1, by="layer")
    each = A.qk_attribution(
        model, tokens, query_positions=[[7]] * 3, key_positions=[[3]] * 3, **same
    )
    shared = A.qk_attribution(model, tokens, query_positions=7, key_positions=[3], **same)
    mean = each.groupby(["query_component", "key_component"], sort=False)["value"].mean()
    assert abs(mean.to_numpy() - shared["value"].to_numpy()).max() < 1e-5 * scale
    out = A.qk_interventions(
        model, tokens, layer=2, head=1, query_positions=q, key_positions=k, top=1
    )
    assert list(out["side"]) == ["query", "key"] and out["measured"].notna().all()


@pytest.mark.parametrize(
    "kind", ["llama (GQA, rotary)", "gpt-neox (partial rotary)", "llama yarn (rotary gain)"]
)
def test_layer_0_scores_are_the_rotary_circuit_at_each_offset(kind):
    """In layer 0 the residual stream is the token embedding alone, so each score of a
    forward pass is the circuit's entry at the two tokens and their offset (biases are
    zero at initialisation: no jitter here)."""
    builder = {
        "llama (GQA, rotary)": ("LlamaConfig", "LlamaForCausalLM", "meta-llama/Llama-3.2-1B"),
        "llama yarn (rotary gain)": (
            "LlamaConfig",
            "LlamaForCausalLM",
            "meta-llama/Llama-3.2-1B",
        ),
        "gpt-neox (partial rotary)": (
            "GPTNeoXConfig",
            "GPTNeoXForCausalLM",
            "EleutherAI/pythia-70m",
        ),
    }[kind]
    extra = {"num_key_value_heads": 2} if "llama" in kind else {"rotary_pct": 0.25}
    if "yarn" in kind:  # its attention_scaling multiplies cos and sin: the gain meets q and k
        extra["rope_scaling"] = dict(
            rope_type="yarn", factor=4.0, original_max_position_embeddings=16
        )
    model = _hf(*builder, jitter=0.0, **extra, **SMALL)
    if "yarn" in kind:
        assert runtime_of(model).qk_geometry(0).rotary.gain != 1.0
    tokens = _tokens(model)
    _, c = model.run_with_cache(tokens)
    s = c["blocks.0.attn.hook_attn_scores"]
    scale = runtime_of(model).qk_geometry(0).scale
    worst = 0.0
    for h in range(4):
        for d in range(9):
            C = A.qk_circuit(model, layer=0, head=h, offset=d).AB * scale
            p = torch.arange(d, 9)
            got = s[:, h, p, p - d]
            want = C[tokens[:, p], tokens[:, p - d]]
            worst = max(worst, float((got - want).abs().max()))
    assert worst < 1e-5 * float(s[s > -1e20].abs().max())


def test_offset_free_circuits_of_rotary_models_are_refused():
    model = KINDS["llama (GQA, rotary)"]()
    with pytest.raises(InterpError, match="offset="):
        A.qk_circuit(model, layer=0, head=0)
    with pytest.raises(InterpError, match="offset must be an int"):
        A.qk_circuit(model, layer=0, head=0, offset=1.5)
    with pytest.raises(InterpError, match="rotary models"):
        A.qk_circuit(load_model("induction-2l"), layer=0, head=0, offset=1)


def test_bad_inputs_are_named_before_the_forward():
    model = load_model("induction-2l")
    t = _tokens(model)
    cases = [
        (dict(layer=1, head=1, key_positions=[8], query_positions=3), "after query position 3"),
        (dict(layer=1, head=1, contrast=(1,)), "two key positions"),
        (dict(layer=1, head=1, contrast=(2, 2)), "same key twice"),
        (dict(layer=1, head=1, contrast=(2, [1, 2])), "2 positions for 3"),
        (dict(layer=1, head=1, by="neuron"), "unknown by"),
        (dict(layer=1, head=9), "head"),
        (dict(layer=1, head=1, query_positions=20), "out of range"),
        (dict(layer=1, head=1, query_positions=[]), "empty"),
        (dict(layer=1, head=1, query_positions=1.5), "must be an integer"),
        (dict(layer=1, head=1, query_positions=[[1], [2]]), "2 lists of positions for 3"),
        (dict(layer=1, head=1, query_positions=3, contrast=(8, 2)), "contrast position 8"),
        (dict(layer=1, head=1, key_positions=[1], contrast=(2, 1)), "not both"),
    ]
    for kw, message in cases:
        with pytest.raises(InterpError, match=message):
            A.qk_attribution(model, t, **kw)
    with pytest.raises(InterpError, match="top must be >= 1"):
        A.qk_interventions(model, t, layer=1, head=1, top=0)


@pytest.mark.parametrize("kind", ["llama (GQA, rotary)", "gpt-neox (partial rotary)"])
def test_rotary_bands_add_up_to_the_scores(kind):
    model = KINDS[kind]()
    tokens = _tokens(model)
    bands = A.rotary_bands(model, tokens, layer=2, head=1)
    whole = A.qk_attribution(model, tokens, layer=2, head=1, by="layer")
    n_keys = whole["key_position"].nunique()
    assert abs(bands["value"].sum() * n_keys - whole["value"].sum()) < 1e-5 * max(
        1.0, float(whole["value"].abs().sum())
    )
    rotary = runtime_of(model).qk_geometry(2).rotary
    assert (bands["band"] == "unrotated").any() == (rotary.dims < model.cfg.d_head)
    assert bands["frequency"].iloc[0] == pytest.approx(1.0)  # the fastest band first
    with pytest.raises(InterpError, match="no rotary embeddings"):
        A.rotary_bands(load_model("induction-2l"), _tokens(model), layer=1, head=1)


def test_rotary_bands_equal_the_models_rotated_queries_and_keys_pair_by_pair():
    """Each band's value from the model's own hook_rot_q / hook_rot_k (Llama pairs dimension
    i with i + d_head / 2), its frequency from the config's rope_theta: no attribution code."""
    model = KINDS["llama (GQA, rotary)"]()
    tokens = _tokens(model)
    layer, head = 2, 3
    bands = A.rotary_bands(model, tokens, layer=layer, head=head, query_positions=[-1, 4])
    _, c = model.run_with_cache(tokens)
    q = c[f"blocks.{layer}.attn.hook_rot_q"][:, :, head]  # [batch, pos, d_head]
    k_all = c[f"blocks.{layer}.attn.hook_rot_k"]  # [batch, pos, kv_head, d_head]
    k = k_all[:, :, head // (model.cfg.n_heads // k_all.shape[2])]
    d = q.shape[-1]
    half = d // 2
    cells = [(p, j) for p in (8, 4) for j in range(p + 1)]  # every key each query may see
    qi, ki = torch.tensor([p for p, _ in cells]), torch.tensor([j for _, j in cells])
    prod = q[:, qi] * k[:, ki] / d**0.5  # [batch, cell, d_head]
    want = (prod[..., :half] + prod[..., half:]).mean((0, 1))  # [band]
    got = torch.tensor(bands["value"].to_numpy(), dtype=want.dtype)
    assert (got - want).abs().max() < 1e-5 * float(want.abs().max())
    theta = 10000.0  # LlamaConfig's default rope_theta
    freqs = 1.0 / theta ** (torch.arange(0, d, 2).double() / d)
    assert bands["frequency"].to_numpy() == pytest.approx(freqs.numpy(), rel=1e-5)


def test_the_pass_stops_after_the_heads_layer(induction_model):
    """Attributing a layer-0 head runs block 0 only: block 1 never runs, and the cost says
    less than half a forward pass of this two-layer model (block 0 up to its pattern, no
    unembedding: issue 44's FLOP count)."""
    runs = []
    handle = induction_model.blocks[1].register_forward_hook(lambda *a: runs.append(1))
    try:
        df = A.qk_attribution(induction_model, _tokens(induction_model), layer=0, head=1)
    finally:
        handle.remove()
    assert runs == [] and 0.25 < df.attrs["forward_equivalents"] < 0.5
    out = A.qk_interventions(induction_model, _tokens(induction_model), layer=1, head=1, top=1)
    # its passes: the attribution's, the no-op check's and one per row, each stopped after
    # L1's pattern (the attribution's own pass: one of them)
    one = A.qk_attribution(induction_model, _tokens(induction_model), layer=1, head=1)
    each = one.attrs["forward_equivalents"]
    # (each is rounded to 1e-3: n of them differ from the sum by up to n x 5e-4)
    assert out.attrs["forward_equivalents"] == pytest.approx((2 + len(out)) * each, abs=5e-3)

"""Circuits: the graph, exact path patching, edge attribution and exact circuit evaluation.

Every number is checked against an independent hooks-only computation of its
definition (ARENA's two-pass path patching; activation patching of a sender;
TransformerLens's split-qkv input hooks for gradients), on our attention-only
model, a GPT-2 bridge and a Llama bridge with grouped-query attention.
"""

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import jitter

from interp import InterpError
from interp.analysis import (
    attribute_edges,
    build_graph,
    circuit_curve,
    evaluate_circuit,
    find_circuit,
    load_circuit,
    path_patch,
)
from interp.core.hooks import hook_name
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.datasets import repeated_random_tokens
from interp.models import load_model
from interp.models.hf import random_gpt2, random_llama

MODELS = {
    "attn-only": lambda: load_model("induction-2l"),
    "gpt2": lambda: jitter(random_gpt2(2, vocab=30)),
    "llama-gqa": lambda: jitter(random_llama(2, vocab=30)),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def _pair(seed=0, n=7, vocab=30):
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(2, vocab, (3, n), generator=gen)
    corrupted = torch.randint(2, vocab, (3, n), generator=gen)
    return clean, corrupted


METRIC = logit_diff_metric(torch.tensor([5, 7, 9]), torch.tensor([6, 8, 10]))


# ------------------------------------------------------------- hooks-only references
def _sender_out(model, cache, name):
    """A sender's output from a cache: a head's z @ W_O, an MLP's output, an embedding."""
    if name in ("embed", "pos_embed"):
        return cache[hook_name(name)]
    if name.endswith(".mlp"):
        return cache[hook_name("mlp_out", int(name[1:].split(".")[0]))]
    layer, head = (int(x) for x in name[1:].split("H"))
    z = cache[hook_name("z", layer)][:, :, head]
    return z @ model.W_O[layer, head]


def _reference_path_patch(model, clean, corrupted, sender, receivers, metric, position=None):
    """Path patching by hooks alone (ARENA's two passes, layer by layer): a pass whose input to
    a receiver's layer is moved by the sender's corrupted - clean output captures the
    receivers' q/k/v (or MLP input) there, earlier receivers already replaced; the last pass
    is the clean run with every receiver replaced and the logits' input moved. ``position``:
    the output moves at that stream position only (an edge per position)."""
    with torch.no_grad():
        _, cc = model.run_with_cache(clean)
        _, kc = model.run_with_cache(corrupted)
    delta = _sender_out(model, kc, sender) - _sender_out(model, cc, sender)
    if position is not None:
        only = torch.zeros(delta.shape[1], 1)
        only[position] = 1.0
        delta = delta * only
    graph = build_graph(model)
    steps = []  # (layer, part, where the input is moved, what is captured, [heads])
    final = False
    for r in receivers:
        j = graph.receiver_indices(r)[0]
        layer, kind, head = graph.receiver_layer[j], graph.receiver_input[j], graph.receiver_head[j]
        if kind == "logits":
            final = True
        elif kind == "mlp":
            steps.append(
                (layer, 1, hook_name("resid_mid", layer), f"blocks.{layer}.mlp.hook_in", None)
            )
        else:
            steps.append((layer, 0, hook_name("resid_pre", layer), hook_name(kind, layer), head))
    replaced = []  # hooks that put captured receiver inputs back

    def putter(want, head, value):
        def put(x, hook):
            if head is None:
                return value
            x = x.clone()
            x[:, :, head] = value[:, :, head]
            return x

        return (want, put)

    for _, _, where, want, head in sorted(steps, key=lambda t: (t[0], t[1])):
        grabbed: dict = {}

        def grab(x, hook, grabbed=grabbed):
            grabbed["x"] = x.clone()

        hooks = [*replaced, (where, lambda x, hook: x + delta), (want, grab)]
        with torch.no_grad():
            model.run_with_hooks(clean, fwd_hooks=hooks)
        replaced.append(putter(want, head, grabbed["x"]))
    if final:
        name = hook_name("resid_post", model.cfg.n_layers - 1)
        replaced.append((name, lambda x, hook: x + delta))
    with torch.no_grad():
        return float(metric(model.run_with_hooks(clean, fwd_hooks=replaced), clean))


def _reference_sender_patch(model, clean, corrupted, sender, metric, position=None):
    """Activation patching of one sender's whole output (at ``position`` only, if given):
    every edge out of it corrupted."""
    at = slice(None) if position is None else position
    with torch.no_grad():
        _, kc = model.run_with_cache(corrupted)
    if sender in ("embed", "pos_embed"):
        name, head = hook_name(sender), None
    elif sender.endswith(".mlp"):
        name, head = hook_name("mlp_out", int(sender[1:].split(".")[0])), None
    else:
        layer, head = (int(x) for x in sender[1:].split("H"))
        name = hook_name("z", layer)

    def put(x, hook):
        x = x.clone()
        if head is None:
            x[:, at] = kc[name][:, at]
        else:
            x[:, at, head] = kc[name][:, at, head]
        return x

    hook = (name, put)
    with torch.no_grad():
        return float(metric(model.run_with_hooks(clean, fwd_hooks=[hook]), clean))


# ------------------------------------------------------------------------ the graph
def test_the_graph_counts_and_labels(model):
    g = build_graph(model)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    kv = g.n_kv_heads
    assert g.receivers[-1] == "logits" and g.senders[0] == "embed"
    assert sum(1 for x in g.receiver_input if x == "k") == L * kv
    if g.grouped:
        assert "L1KV1.k" in g.receivers and "L1H3.k" not in g.receivers
    edges = g.edges()
    assert len(edges) == g.n_edges and set(edges.columns) >= {
        "sender",
        "receiver",
        "receiver_input",
    }
    # a sender precedes its receivers: same-layer heads never feed each other
    assert not ((edges["sender_layer"] == edges["receiver_layer"])
                & edges["receiver_input"].isin(["q", "k", "v"])).any()  # fmt: skip
    assert f"L0H1 -> L1H{min(1, H - 1)}.q" in g.edge_labels()
    assert str(g).endswith(f"{g.n_edges:,} edges")


def test_smollm_graph_has_key_value_groups(smollm):
    g = build_graph(smollm)
    assert g.n_edges == 70_651 and g.n_kv_heads == 3
    assert sum(1 for x in g.receiver_input if x == "k") == 90  # 3 per layer, not 9 copies


# ---------------------------------------------------------------- exact path patching
def test_path_patching_equals_the_two_pass_algorithm(model):
    clean, corrupted = _pair()
    g = build_graph(model)
    L = model.cfg.n_layers
    kv = "KV1" if g.grouped else "H1"
    cases = [
        (["L0H1"], ["L1H1.q"]),
        (["embed", "L0H0"], [f"L1{kv}.k", f"L1{kv}.v"]),
        (["L0H1"], ["L1H0.q", "logits"]),
        (["embed"], ["L0H1.v", f"L{L - 1}H1.q"]),  # receivers in two layers
    ]
    if g.has_mlp:
        cases.append((["L0.mlp", "L0H1"], ["L1.mlp", "logits"]))
    for senders, receivers in cases:
        df = path_patch(
            model, clean, corrupted_tokens=corrupted, senders=senders, receivers=receivers,
            metric=METRIC,
        )  # fmt: skip
        for row in df.itertuples():
            want = _reference_path_patch(model, clean, corrupted, row.sender, receivers, METRIC)
            assert row.patched == pytest.approx(want, abs=1e-5, rel=1e-5), (senders, receivers)


def test_direct_paths_to_the_logits_default(model):
    clean, corrupted = _pair(1)
    df = path_patch(model, clean, corrupted_tokens=corrupted, metric=METRIC)
    g = build_graph(model)
    assert df["sender"].tolist() == list(g.senders) and df.attrs["receivers"] == ["logits"]
    row = df.iloc[3]
    want = _reference_path_patch(model, clean, corrupted, row["sender"], ["logits"], METRIC)
    assert row["patched"] == pytest.approx(want, abs=1e-5, rel=1e-5)


def test_a_few_senders_passes_record_only_their_outputs(model):
    """Path patching a few senders records only their outputs (a whole layer's heads, one head
    of another, the embedding), and their rows equal the every-sender table's (each to 1e-6 of
    its scale)."""
    from interp.engine.edges.run import sender_outputs
    from interp.runtime import runtime_of

    clean, corrupted = _pair(3)
    H, g = model.cfg.n_heads, build_graph(model)
    few = ["embed", *(f"L0H{h}" for h in range(H)), "L1H1"]
    every = path_patch(model, clean, corrupted_tokens=corrupted, metric=METRIC)
    got = path_patch(model, clean, corrupted_tokens=corrupted, metric=METRIC, senders=few)
    assert got["sender"].tolist() == few
    want = every.set_index("sender").loc[few, "patched"].to_numpy()
    scale = float(every["patched"].abs().max())
    assert np.abs(got["patched"].to_numpy() - want).max() <= 1e-6 * scale
    idx = sorted(g.sender_index(s) for s in few)
    rt = runtime_of(model)
    part, _ = sender_outputs(rt, g, clean, senders=idx)
    whole, _ = sender_outputs(rt, g, clean)
    assert part.shape[0] == len(few)
    gap = float((part - whole[idx]).abs().max())  # the wanted heads projected alone
    assert gap <= 1e-6 * float(whole.abs().max())  # NaN fails


def test_denoising_edits_the_corrupted_run_with_the_clean_outputs(model):
    """direction="denoising": a sender's clean output reaches the receivers in the corrupted
    run (hooks-only reference with the two runs' roles swapped); edge effects are measured
    from the corrupted run, and EAP differentiates it."""
    clean, corrupted = _pair(2)
    senders, receivers = ["embed", "L0H1"], ["L1H1.k", "L1H0.q"]
    df = path_patch(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, senders=senders,
        receivers=receivers, direction="denoising",
    )  # fmt: skip
    for row in df.itertuples():
        want = _reference_path_patch(model, corrupted, clean, row.sender, receivers, METRIC)
        assert row.patched == pytest.approx(want, abs=1e-5, rel=1e-5), row.sender
        assert row.effect == pytest.approx(row.patched - row.corrupted, abs=1e-6)
    for method in ("exact", "eap"):
        kw = dict(metric=METRIC, method=method, edges=["L0H1 -> L1H1.k", "embed -> logits"])
        den = attribute_edges(model, clean, corrupted_tokens=corrupted, direction="denoising", **kw)
        swapped = attribute_edges(model, corrupted, corrupted_tokens=clean, **kw)
        col = "exact" if method == "exact" else "estimate"
        np.testing.assert_allclose(den[col], swapped[col], rtol=1e-5, atol=1e-6)
        assert den.attrs["direction"] == "denoising" and swapped.attrs["direction"] == "noising"


# --------------------------------------------------------------- circuits, exactly
def test_whole_graph_is_clean_and_empty_graph_is_corrupted(model):
    clean, corrupted = _pair(2)
    whole = evaluate_circuit(model, clean, corrupted_tokens=corrupted, edges=None, metric=METRIC)
    with torch.no_grad():
        logits = model(clean)
        want_clean = float(METRIC(logits, clean))
        want_corrupted = float(METRIC(model(corrupted), corrupted))
    # Nothing is edited, but the engine unembeds only the metric's rows: the model's own
    # metric to float32 rounding on any CPU (a row subset rounds otherwise on other kernels).
    # The metric is a difference of logits, so its rounding is a few ulps of the logits'
    # size, not of the difference: 1e-6 of that size (about 8 ulps), not 1e-6 absolute.
    size = max(1.0, float(logits.abs().max()))
    assert whole["metric"].item() == pytest.approx(want_clean, rel=1e-6, abs=1e-6 * size)
    empty = evaluate_circuit(model, clean, corrupted_tokens=corrupted, edges=[], metric=METRIC)
    assert empty["metric"].item() == pytest.approx(want_corrupted, abs=1e-4, rel=1e-4)
    assert whole["faithfulness"].item() == pytest.approx(1.0, abs=1e-6)
    assert abs(empty["faithfulness"].item()) < 1e-4


def test_cutting_a_senders_edges_is_patching_its_output(model):
    """A circuit without any edge out of sender s: every receiver reads s's corrupted output,
    which is activation patching of s (hooks-only), whatever s feeds."""
    clean, corrupted = _pair(3)
    g = build_graph(model)
    senders = ["embed", "L0H1", "L1H0"] + (["L0.mlp"] if g.has_mlp else [])
    for sender in senders:
        s = g.sender_index(sender)
        keep = g.valid.copy()
        keep[s] = False
        got = evaluate_circuit(model, clean, corrupted_tokens=corrupted, edges=keep, metric=METRIC)
        want = _reference_sender_patch(model, clean, corrupted, sender, METRIC)
        assert got["metric"].item() == pytest.approx(want, abs=1e-5, rel=1e-5), sender


# ------------------------------------------------------------- edges per position ("each")
def test_cutting_a_senders_edges_at_one_position_is_patching_it_there(model):
    """positions="each": a circuit without sender s's edges at position p reads s's corrupted
    output there only, which is activation patching of s at p (hooks-only)."""
    clean, corrupted = _pair(3)
    g = build_graph(model)
    P = clean.shape[1]
    for sender in ["embed", "L0H1", "L1H0"] + (["L0.mlp"] if g.has_mlp else []):
        for p in (1, P - 1):
            keep = np.repeat(g.valid[..., None], P, axis=-1)
            keep[g.sender_index(sender), :, p] = False
            got = evaluate_circuit(
                model, clean, corrupted_tokens=corrupted, edges=keep, metric=METRIC,
                positions="each",
            )  # fmt: skip
            want = _reference_sender_patch(model, clean, corrupted, sender, METRIC, position=p)
            assert got["metric"].item() == pytest.approx(want, abs=1e-5, rel=1e-5), (sender, p)
            cut = g.valid[g.sender_index(sender)].sum()
            assert got["n_edges"].item() == g.valid.sum() * P - cut


def test_edges_per_position_are_exact_and_add_up(model):
    """Exact per-position edge effects are path patches at that position; EAP per position
    sums over positions to EAP; the whole graph per position is clean, none is corrupted."""
    clean, corrupted = _pair(5)
    g = build_graph(model)
    P = clean.shape[1]
    k1 = next(r for r in g.receivers if r.startswith("L1") and r.endswith(".k"))
    picks = [f"L0H1 -> {k1} @2", f"L0H1 -> {k1} @{P - 1}", f"embed -> logits @{P - 1}"]
    ex = attribute_edges(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, method="exact", edges=picks,
        positions="each",
    )  # fmt: skip
    columns = ["sender", "receiver", "receiver_input", "position", "label", "exact"]
    assert list(ex.columns) == columns
    assert sorted(ex["label"]) == sorted(picks)
    for row in ex.itertuples():
        want = _reference_path_patch(
            model, clean, corrupted, row.sender, [row.receiver], METRIC, position=row.position
        )
        assert row.exact == pytest.approx(want - ex.attrs["clean"], abs=1e-5, rel=1e-5), row
    eap = attribute_edges(model, clean, corrupted_tokens=corrupted, metric=METRIC)
    each = attribute_edges(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, positions="each"
    )
    assert len(each) == len(eap) * P and each.attrs["positions"].startswith("each")
    summed = each.groupby(["sender", "receiver"], sort=False)["estimate"].sum()
    np.testing.assert_allclose(
        summed.reindex(pd.MultiIndex.from_frame(eap[["sender", "receiver"]])).to_numpy(),
        eap["estimate"].to_numpy(), atol=1e-5, rtol=1e-5,
    )  # fmt: skip
    kw = dict(corrupted_tokens=corrupted, metric=METRIC, positions="each")
    faith = evaluate_circuit(model, clean, edges=each, **kw)["faithfulness"].item()
    assert faith == pytest.approx(1.0, abs=1e-6)
    assert abs(evaluate_circuit(model, clean, edges=[], **kw)["faithfulness"].item()) < 1e-4
    # zero ablation per position: the same sums, the same ends
    zero = dict(metric=METRIC, ablation="zero")
    plain = attribute_edges(model, clean, **zero)
    each = attribute_edges(model, clean, positions="each", **zero)
    summed = each.groupby(["sender", "receiver"], sort=False)["estimate"].sum()
    np.testing.assert_allclose(summed.to_numpy(), plain["estimate"].to_numpy(), atol=1e-5)
    for edges, want in ((None, 1.0), ([], 0.0)):
        got = evaluate_circuit(model, clean, edges=edges, positions="each", **zero)
        assert got["faithfulness"].item() == pytest.approx(want, abs=1e-4)


def test_edges_per_position_refuse_what_they_cannot_read(induction_task):
    model, clean, corrupted, metric = induction_task
    kw = dict(corrupted_tokens=corrupted, metric=metric, positions="each")
    P = clean.shape[1]
    with pytest.raises(InterpError, match=f"position {P} is outside a prompt of {P} tokens"):
        evaluate_circuit(model, clean, edges=[f"L0H1 -> L1H1.k @{P}"], **kw)
    with pytest.raises(InterpError, match="position after '@' must be an integer"):
        evaluate_circuit(model, clean, edges=["L0H1 -> L1H1.k @x"], **kw)
    with pytest.raises(InterpError, match="per position it must be"):
        evaluate_circuit(model, clean, edges=np.ones((2, 2, 2), dtype=bool), **kw)
    with pytest.raises(InterpError, match="positions='each' .* is for attribute_edges"):
        path_patch(model, clean, senders=["L0H1"], **kw)
    each = attribute_edges(model, clean, **kw)
    with pytest.raises(InterpError, match="per edge and position .* sum them first"):
        circuit_curve(model, clean, scores=each, sizes=[1], corrupted_tokens=corrupted,
                      metric=metric)  # fmt: skip


def test_zero_ablation_of_every_edge_zeroes_every_output(model):
    clean, _ = _pair(4)
    got = evaluate_circuit(model, clean, edges=[], metric=METRIC, ablation="zero")
    names = [hook_name("embed"), *(hook_name("z", l) for l in range(model.cfg.n_layers))]
    g = build_graph(model)
    if "pos_embed" in g.senders:
        names.append(hook_name("pos_embed"))
    if g.has_mlp:
        names += [hook_name("mlp_out", l) for l in range(model.cfg.n_layers)]
    with torch.no_grad():
        logits = model.run_with_hooks(
            clean, fwd_hooks=[(n, lambda x, hook: torch.zeros_like(x)) for n in names]
        )
    assert got["metric"].item() == pytest.approx(float(METRIC(logits, clean)), abs=1e-4)


# ---------------------------------------------------------------- edge attribution
def test_exact_edge_effects_are_single_edge_path_patches(model):
    clean, corrupted = _pair(5)
    g = build_graph(model)
    picks = ["L0H1 -> L1H1.q", "embed -> logits", f"L0H0 -> {g.receivers[len(g.receivers) // 2]}"]
    df = attribute_edges(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, method="exact", edges=picks
    )
    assert list(df.columns) == ["sender", "receiver", "receiver_input", "label", "exact"]
    for row in df.itertuples():
        want = _reference_path_patch(model, clean, corrupted, row.sender, [row.receiver], METRIC)
        assert row.exact == pytest.approx(want - df.attrs["clean"], abs=1e-5, rel=1e-5), row


def test_eap_equals_gradients_through_transformer_lens_split_inputs():
    """On a Llama bridge (GQA), TransformerLens's split-qkv input hooks (hook_q_input [batch,
    pos, head, d_model]; hook_k_input per key/value head) give the gradient at each head's
    input by plain autograd: EAP scores are (corrupted - clean) . that gradient."""
    model = jitter(random_llama(2, vocab=30))
    clean, corrupted = _pair(6)
    eap = attribute_edges(model, clean, corrupted_tokens=corrupted, metric=METRIC)
    split = jitter(random_llama(2, vocab=30))
    split.set_use_split_qkv_input(True)
    names = [f"blocks.1.hook_{k}_input" for k in ("q", "k", "v")]
    kept = {}

    def keep(x, hook):
        x = x.detach().requires_grad_(True)
        kept[hook.name] = x
        return x

    params = [p for p in split.parameters()]
    for p in params:
        p.requires_grad_(False)
    logits = split.run_with_hooks(clean, fwd_hooks=[(n, keep) for n in names])
    grads = dict(zip(kept, torch.autograd.grad(METRIC(logits, clean), list(kept.values()))))
    with torch.no_grad():
        _, cc = split.run_with_cache(clean)
        _, kc = split.run_with_cache(corrupted)
    delta = _sender_out(split, kc, "L0H1") - _sender_out(split, cc, "L0H1")
    table = eap.set_index("label")["estimate"]
    for kind, idx, label in (("q", 2, "L0H1 -> L1H2.q"), ("k", 1, "L0H1 -> L1KV1.k"),
                             ("v", 0, "L0H1 -> L1KV0.v")):  # fmt: skip
        g = grads[[n for n in grads if f"hook_{kind}_input" in n][0]][:, :, idx]
        assert table[label] == pytest.approx(float((delta * g).sum()), abs=1e-5, rel=1e-4)


def test_eap_ig_is_the_mean_gradient_over_interpolated_embeddings():
    """EAP-IG by hand on a Llama bridge (GQA): the token embedding interpolated from the
    corrupted prompt's to the clean one's at k/3 (k = 1..3), the gradient at each head's own
    input by plain autograd through TransformerLens's split-qkv hooks, averaged over the
    steps, times (corrupted - clean) sender output. The engine sums the steps' gradients
    and scores once; the two must agree."""
    model = jitter(random_llama(2, vocab=30))
    clean, corrupted = _pair(6)
    ig = attribute_edges(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, method="eap-ig", steps=3
    )
    split = jitter(random_llama(2, vocab=30))
    split.set_use_split_qkv_input(True)
    for p in split.parameters():
        p.requires_grad_(False)
    names = [f"blocks.1.hook_{k}_input" for k in ("q", "k", "v")]
    with torch.no_grad():
        _, cc = split.run_with_cache(clean)
        _, kc = split.run_with_cache(corrupted)
    e_clean, e_corr = cc[hook_name("embed")], kc[hook_name("embed")]
    mean: dict[str, torch.Tensor] = {}
    for k in (1, 2, 3):
        kept: dict[str, torch.Tensor] = {}

        def keep(x, hook, kept=kept):
            x = x.detach().requires_grad_(True)
            kept[hook.name] = x
            return x

        def interpolated(x, hook, a=k / 3):
            return e_corr + a * (e_clean - e_corr)

        hooks = [(hook_name("embed"), interpolated), *((n, keep) for n in names)]
        logits = split.run_with_hooks(clean, fwd_hooks=hooks)
        grads = torch.autograd.grad(METRIC(logits, clean), list(kept.values()))
        for name, g in zip(kept, grads):
            mean[name] = mean.get(name, 0) + g / 3
    delta = _sender_out(split, kc, "L0H1") - _sender_out(split, cc, "L0H1")
    table = ig.set_index("label")["estimate"]
    for kind, idx, label in (("q", 2, "L0H1 -> L1H2.q"), ("k", 1, "L0H1 -> L1KV1.k"),
                             ("v", 0, "L0H1 -> L1KV0.v")):  # fmt: skip
        g = mean[[n for n in mean if f"hook_{kind}_input" in n][0]][:, :, idx]
        assert table[label] == pytest.approx(float((delta * g).sum()), abs=1e-5, rel=1e-4)


def test_eap_ig_with_one_step_is_eap_and_differs_with_more():
    model = load_model("induction-2l")
    clean, corrupted = _pair(7, vocab=64)
    eap = attribute_edges(model, clean, corrupted_tokens=corrupted, metric=METRIC)
    one = attribute_edges(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, method="eap-ig", steps=1
    )
    five = attribute_edges(
        model, clean, corrupted_tokens=corrupted, metric=METRIC, method="eap-ig", steps=5
    )
    np.testing.assert_allclose(one["estimate"], eap["estimate"], atol=1e-6)
    assert not np.allclose(five["estimate"], eap["estimate"], atol=1e-3)
    # counted work: 1 source forward + each step's forward and backward (each as much as a
    # forward to the activations: issue 44's FLOPs), so five steps are 11 / 3 of one
    assert one.attrs["forward_equivalents"] == eap.attrs["forward_equivalents"]
    assert five.attrs["steps"] == 5 and five.attrs["forward_equivalents"] == pytest.approx(
        one.attrs["forward_equivalents"] * 11 / 3, rel=2e-3
    )
    assert eap.attrs["forward_equivalents"] == 3  # the source pass, a forward and a backward


# ----------------------------------------------------------------- the induction circuit
@pytest.fixture(scope="module")
def induction_task():
    model = load_model("induction-2l")
    data = repeated_random_tokens(16, 12, d_vocab=64, seed=3)
    corrupted = data.tokens.clone()
    gen = torch.Generator().manual_seed(9)
    corrupted[:, 1:13] = torch.randint(1, 64, (16, 12), generator=gen)  # first copy replaced
    return model, data.tokens, corrupted, loss_metric(data.loss_mask)


def test_the_found_circuit_is_verified_and_round_trips(induction_task, tmp_path):
    model, clean, corrupted, metric = induction_task
    exact = attribute_edges(model, clean, corrupted_tokens=corrupted, metric=metric, method="exact")
    circuit = find_circuit(
        model, clean, corrupted_tokens=corrupted, metric=metric, scores=exact, target=0.8
    )
    edges = set(circuit.edges()["label"])
    assert {"L0H1 -> L1H1.k", "L1H1 -> logits", "embed -> L1H1.v"} <= edges
    assert circuit.info["faithfulness"] >= 0.8 and circuit.n_edges <= 6
    check = evaluate_circuit(model, clean, corrupted_tokens=corrupted, metric=metric, edges=circuit)
    assert check["faithfulness"].item() == pytest.approx(circuit.info["faithfulness"])
    path = circuit.save(tmp_path / "c.json")
    back = load_circuit(path, model)
    assert set(back.edges()["label"]) == edges and back.info["target"] == 0.8
    smaller = find_circuit(  # on other prompts of the same task it still holds
        model, clean[:8], corrupted_tokens=corrupted[:8], metric=loss_metric(), scores=exact
    )
    assert smaller.info["faithfulness"] >= 0.8
    # A bracket from a curve bisects inside it and finds the same circuit; one whose top
    # does not reach the target is refused with what it reaches.
    kw = dict(corrupted_tokens=corrupted, metric=metric, scores=exact)
    within = find_circuit(model, clean, bracket=(2, 8), **kw)
    assert set(within.edges()["label"]) == edges and set(within.info["evaluations"]) <= {
        "2", "3", "4", "5", "6", "7", "8"
    }  # fmt: skip
    with pytest.raises(InterpError, match="bracket's top-1 circuit reaches only"):
        find_circuit(model, clean, bracket=(0, 1), **kw)
    with pytest.raises(InterpError, match="bracket must be"):
        find_circuit(model, clean, bracket=(5, 5), **kw)


def test_curves_beat_random_circuits(induction_task):
    model, clean, corrupted, metric = induction_task
    eap = attribute_edges(model, clean, corrupted_tokens=corrupted, metric=metric)
    curve = circuit_curve(
        model, clean, corrupted_tokens=corrupted, metric=metric, scores=eap, sizes=[4, 8, 42],
        random_draws=3,
    )  # fmt: skip
    top = curve[curve["kind"] == "top"].set_index("n_edges")["faithfulness"]
    rand = curve[curve["kind"] == "random"].groupby("n_edges")["faithfulness"].median()
    assert top[42] == pytest.approx(1.0) and top[8] > rand[8]
    assert curve.attrs["circuits"] == 3 * 4  # the baselines come from the clean and corrupted runs


def test_bad_input_is_named(induction_task):
    model, clean, corrupted, metric = induction_task
    with pytest.raises(InterpError, match="unknown method"):
        attribute_edges(model, clean, corrupted_tokens=corrupted, metric=metric, method="acdc")
    with pytest.raises(InterpError, match="needs corrupted_tokens"):
        attribute_edges(model, clean, metric=metric)
    with pytest.raises(InterpError, match="eap-ig interpolates"):
        attribute_edges(model, clean, metric=metric, method="eap-ig", ablation="zero")
    with pytest.raises(InterpError, match="corrupted_tokens are for ablation='patch'"):
        evaluate_circuit(model, clean, corrupted_tokens=corrupted, edges=None, metric=metric,
                         ablation="mean")  # fmt: skip
    with pytest.raises(InterpError, match="is not an edge: the sender writes after"):
        evaluate_circuit(model, clean, corrupted_tokens=corrupted, metric=metric,
                         edges=["L1H1 -> L1H0.q"])  # fmt: skip
    with pytest.raises(InterpError, match="not a sender of this graph"):
        path_patch(model, clean, corrupted_tokens=corrupted, metric=metric, senders=["L5H0"])
    with pytest.raises(InterpError, match="not a receiver of this graph"):
        path_patch(model, clean, corrupted_tokens=corrupted, metric=metric, receivers=["mlp"])
    with pytest.raises(InterpError, match="does not precede"):
        path_patch(model, clean, corrupted_tokens=corrupted, metric=metric, senders=["L1H0"],
                   receivers=["L1H1.q"])  # fmt: skip
    with pytest.raises(InterpError, match="target must be in"):
        find_circuit(model, clean, corrupted_tokens=corrupted, metric=metric, scores=np.zeros(
            build_graph(model).valid.shape), target=1.5)  # fmt: skip

"""Components, paths, edges and circuits refuse bad input before the work (issue 23).

Each test is one cause of a raw traceback, a NaN or a silently wrong number that the tools
added for components and circuits had; each names the problem and the fix in one
InterpError, before any forward pass where the input alone shows it. The command-line
side (one line on stderr, exit 2, nothing written) is in tests/test_bad_inputs_cli.py.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

import interp.analysis as A
from interp import InterpError
from interp.core.metrics import logit_diff_metric, loss_metric
from interp.datasets import repeated_random_tokens
from interp.models import load_model
from interp.models.hf import random_gpt2, random_llama

CLEAN = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7], [0, 9, 3, 4, 11, 9, 3, 4]])
CORRUPTED = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7], [0, 9, 3, 4, 12, 9, 3, 4]])
METRIC = logit_diff_metric(torch.tensor([8, 11]), torch.tensor([9, 12]))
TASK = dict(corrupted_tokens=CORRUPTED, metric=METRIC)


@pytest.fixture(scope="module")
def model():
    return load_model("induction-2l")


class _NoPasses:
    """Count the model's forward passes: a refusal "before any work" runs none."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __enter__(self):
        def count(module, args):
            self.calls += 1

        self.handle = self.model.blocks[0].register_forward_pre_hook(count)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def refused(fn, match, model=None):
    """``fn()`` raises an InterpError matching ``match``, with no forward pass of ``model``."""
    if model is None:
        with pytest.raises(InterpError, match=match):
            fn()
        return
    with _NoPasses(model) as seen, pytest.raises(InterpError, match=match):
        fn()
    assert seen.calls == 0, f"{seen.calls} forward passes ran before the refusal"


# 1. unknown receivers and senders ----------------------------------------------------
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(receivers=["L9H9.q"]), r"'L9H9.q' is not a receiver of this graph: it names layer 9"),
        (dict(receivers=["L1H1.x"]), r"'L1H1.x' is not a receiver of this graph"),
        (dict(receivers=["L1H7"]), r"names head 7, but a layer has heads 0..1"),
        (dict(senders=["L0H9"]), r"'L0H9' is not a sender of this graph: it names head 9"),
        (dict(senders=[(0.0, 1)]), r"a \(layer, head\) pair is two integers"),
        (dict(senders=["L0.mlp"]), r"no MLPs: it is attention-only"),
    ],
)
def test_1_unknown_receivers_and_senders_are_named(model, kw, match):
    refused(lambda: A.path_patch(model, CLEAN, **TASK, **kw), match, model)


# 2 and 3. circuit files edited by hand, and circuits of another model --------------------
@pytest.fixture(scope="module")
def saved(model, tmp_path_factory):
    scores = A.attribute_edges(model, CLEAN, **TASK)
    circuit = A.find_circuit(model, CLEAN, **TASK, scores=scores, target=0.5)
    path = tmp_path_factory.mktemp("c") / "c.json"
    circuit.save(path)
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d.pop("edges"), r"lacks its 'edges'"),
        (lambda d: d.update(edges={"a": 1}), r"'edges' must be a list, got dict"),
        (lambda d: d["edges"].append({"sender": "L0H1"}), r"edge \d+ .* needs a sender and"),
        (
            lambda d: d["edges"].append({"sender": "L0H1", "receiver": "L0H0.q"}),
            r"edge \d+ \(L0H1 -> L0H0.q\): L0H1 -> L0H0.q is not an edge",
        ),  # fmt: skip
        (
            lambda d: d["edges"].append({"sender": "L7H1", "receiver": "logits"}),
            r"edge \d+ \(L7H1 -> logits\): 'L7H1' is not a sender",
        ),  # fmt: skip
        (lambda d: d["edges"][0].update(score="big"), r"edge 0's score must be a number"),
        (lambda d: d.update(info=[1]), r"'info' must be a mapping"),
        (lambda d: d.update(format="other"), r"not an interp circuit file"),
    ],
)
def test_2_a_hand_edited_circuit_file_is_refused_naming_the_damage(model, saved, tmp_path, edit,
                                                                   match):  # fmt: skip
    doc = json.loads(json.dumps(saved))
    edit(doc)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    refused(lambda: A.load_circuit(path, model), match)
    path.write_text("{not json")
    refused(lambda: A.load_circuit(path, model), r"is not JSON")


def test_3_a_circuit_of_another_model_is_refused_unless_asked(model, saved, tmp_path):
    doc = json.loads(json.dumps(saved))
    doc["model"] = "some-other-model"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    refused(lambda: A.load_circuit(path, model), r"circuit of 'some-other-model', not of this")
    circuit = A.load_circuit(path, model, any_model=True)  # the explicit override
    assert circuit.n_edges == len(saved["edges"])


# 4. corrupted tokens equal to the clean ones, and runs that agree -------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda m: A.path_patch(m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC),
        lambda m: A.evaluate_circuit(m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC, edges=None),
        lambda m: A.circuit_curve(
            m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC, scores=np.ones((6, 13))
        ),  # fmt: skip
        lambda m: A.find_circuit(
            m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC, scores=np.ones((6, 13))
        ),  # fmt: skip
        lambda m: A.attribute_edges(m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC),
        lambda m: A.patch_heads(m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC),
        lambda m: A.patch_components(
            m, CLEAN, corrupted_tokens=CLEAN, metric=METRIC, component="z", by="head"
        ),  # fmt: skip
        lambda m: A.attribute_heads(
            m, CLEAN, metric=METRIC, ablation="patch", corrupted_tokens=CLEAN
        ),  # fmt: skip
    ],
    ids=[
        "path_patch",
        "evaluate_circuit",
        "circuit_curve",
        "find_circuit",
        "attribute_edges",
        "patch_heads",
        "patch_components",
        "attribute_heads",
    ],
)
def test_4_corrupted_tokens_equal_to_the_clean_ones_are_refused_first(model, call):
    refused(lambda: call(model), r"corrupted tokens are the clean tokens", model)


def test_4_runs_that_agree_are_refused_not_a_nan(model):
    other = CLEAN.clone()
    other[:, 1] = 30  # a change after position 0: a causal model reads position 0 the same
    metric = logit_diff_metric(3, 4, at=0)  # so the two runs' metrics agree
    for call in (
        lambda: A.path_patch(model, CLEAN, corrupted_tokens=other, metric=metric),
        lambda: A.evaluate_circuit(model, CLEAN, corrupted_tokens=other, metric=metric, edges=[]),
    ):
        refused(call, r"the two runs give the same metric .* divide by zero")


# 5. patch_components checks its metric like the other patching functions ----------------
def test_5_patch_components_checks_the_metric_values(model):
    def two_numbers(logits, tokens):
        return logits[:, -1, :2].mean(0)

    kw = dict(corrupted_tokens=CORRUPTED, component="resid_pre", by="layer")
    refused(
        lambda: A.patch_components(model, CLEAN, metric=two_numbers, **kw), r"must return a scalar"
    )
    nan = lambda logits, tokens: logits.sum() * float("nan")  # noqa: E731
    refused(lambda: A.patch_components(model, CLEAN, metric=nan, **kw), r"returned nan")


# 6. a metric that returns a Python float -------------------------------------------------
def test_6_a_float_metric_is_refused_for_estimates_and_accepted_exactly(model):
    def plain(logits, tokens):
        return float(logits[:, -1, 8].mean() - logits[:, -1, 9].mean())

    kw = dict(corrupted_tokens=CORRUPTED, metric=plain)
    refused(lambda: A.attribute_edges(model, CLEAN, **kw), r"returned a float, which is not diff")
    exact = A.attribute_edges(model, CLEAN, method="exact", edges=["L1H1 -> logits"], **kw)
    assert np.isfinite(exact["exact"]).all()


# 7. edge_agreement on tables, and on missing scores ---------------------------------------
def test_7_edge_agreement_reads_tables_and_refuses_missing_scores(model):
    exact = A.attribute_edges(model, CLEAN, **TASK, method="exact")
    eap = A.attribute_edges(model, CLEAN, **TASK)
    table = A.edge_agreement(exact, eap, threshold=0.05)  # two tables, as they come
    series = A.edge_agreement(
        exact.set_index("label")["exact"], eap.set_index("label")["estimate"], threshold=0.05
    )
    pd.testing.assert_frame_equal(table, series)
    holes = exact.set_index("label")["exact"].copy()
    holes.iloc[3] = np.nan
    refused(lambda: A.edge_agreement(holes, eap, threshold=0.05), r"no score for 1 edges .*dropna")
    refused(lambda: A.edge_agreement([1.0], eap, threshold=0.05), r"must be a Series of scores")


# 8 and 9. curves: an empty size list, and scores of some edges only ----------------------
def test_8_an_empty_list_of_sizes_is_refused(model):
    refused(
        lambda: A.circuit_curve(model, CLEAN, **TASK, scores=np.ones((6, 13)), sizes=[]),
        r"sizes is empty",
        model,
    )


def test_9_a_curve_counts_the_edges_it_kept(model):
    g = A.build_graph(model)
    scores = np.full(g.valid.shape, np.nan)
    scores[g.valid] = np.arange(g.n_edges, dtype=float)
    scores[g.valid & (np.cumsum(g.valid).reshape(g.valid.shape) > 10)] = np.nan  # 10 scored
    curve = A.circuit_curve(model, CLEAN, **TASK, scores=scores, sizes=[3, 10])
    assert curve["n_edges"].tolist() == [3, 10]
    refused(
        lambda: A.circuit_curve(model, CLEAN, **TASK, scores=scores, sizes=[20]),
        r"exceeds the 10 edges the scores rank",
        model,
    )


# 10. a per-position table where whole edges are read -------------------------------------
def test_10_a_per_position_table_is_not_read_as_whole_edges(model):
    each = A.attribute_edges(model, CLEAN, **TASK, positions="each", edges=["L0H1 -> L1H1.k"])
    refused(
        lambda: A.evaluate_circuit(model, CLEAN, **TASK, edges=each),
        r"holds edges per position .* positions='each'",
        model,
    )
    assert (
        A.evaluate_circuit(model, CLEAN, **TASK, edges=each, positions="each")["n_edges"].item()
        == 8
    )


# 11. unbounded work refused with its estimate, before it starts ---------------------------
def test_11_unbounded_work_is_refused_with_its_estimate(model, monkeypatch):
    start = time.perf_counter()
    refused(
        lambda: A.null_space_probe(model, CLEAN, layer=1, head=1, n_directions=10**7),
        r"probing 10,000,000 directions would run about [\d,]+ forward passes .* fewer n_dir",
        model,
    )
    refused(
        lambda: A.attribute_edges(model, CLEAN, **TASK, method="eap-ig", steps=10**6),
        r"would run about 2,000,001 forward passes .* fewer steps",  # a forward, a backward
        model,
    )
    refused(
        lambda: A.circuit_curve(model, CLEAN, **TASK, scores=np.ones((6, 13)), points=10**6),
        r"points=1,000,000 is more sizes than the graph has edges",
        model,
    )
    assert time.perf_counter() - start < 60  # refused at once, not after the work
    monkeypatch.setenv("INTERP_WORK_LIMIT", "10")  # a small limit stands for a big graph
    refused(
        lambda: A.attribute_edges(model, CLEAN, **TASK, method="exact"),
        r"exact effects of 42 edges would run about .* pass edges=",
        model,
    )
    refused(
        lambda: A.attribute_edges(model, CLEAN, **TASK, method="exact", positions="each"),
        r"exact effects of 336 edges at each position",
        model,
    )
    monkeypatch.setenv("INTERP_WORK_LIMIT", "2")
    refused(  # the exact sweeps too: 2 layers x 2 heads x 8 positions, each edit rerunning
        # the blocks after its layer and then the unembedding, beside the base and source
        # passes (about 16 in FLOPs: issue 44's cost model; 10 when the readout went uncounted)
        lambda: A.patch_components(model, CLEAN, **TASK, component="z", by="head_position"),
        r"an exact sweep of 32 edits would run about 16 .* fewer heads, components or positions",
    )
    refused(  # an ablation is refused before the pass its means come from (the sweep's
        # passes, each with its unembedding, and that pass: about 3, as the run counts them;
        # 4 when each edit of one head was counted through every head's W_O)
        lambda: A.ablate_heads(model, CLEAN, ablation="mean"),
        r"an exact sweep of 4 edits would run about 3 forward passes",
        model,
    )
    monkeypatch.delenv("INTERP_WORK_LIMIT")
    import interp.core.memory as M

    monkeypatch.setattr(M, "available_memory", lambda device=None: 256 << 10)  # 256 KiB free
    refused(
        lambda: A.attribute_edges(model, CLEAN, **TASK, positions="each"),
        r"a table of 336 edge scores needs about .* whole edges \(positions=None\)",
        model,
    )


# 15. one rule for token ids -------------------------------------------------------------
def test_15_a_string_of_digits_is_a_token_id_in_the_api_as_on_the_cli():
    gpt2 = random_gpt2(2, vocab=30)
    t = torch.tensor([[0, 5, 6, 7]])
    by_string = A.direct_logit_attribution(gpt2, t, answer="7", wrong=" 8 ")
    by_int = A.direct_logit_attribution(gpt2, t, answer=7, wrong=8)
    pd.testing.assert_frame_equal(by_string, by_int)
    by_text = A.direct_logit_attribution(gpt2, t, answer="t7", wrong="t8")  # text: one token
    pd.testing.assert_frame_equal(by_text, by_int)


# 16. one loss baseline: every run scored against the clean tokens -------------------------
def test_16_every_patching_table_scores_both_runs_on_the_clean_tokens(model):
    data = repeated_random_tokens(2, 6, d_vocab=64, seed=1)
    corrupted = data.tokens.clone()
    corrupted[:, 1:7] = repeated_random_tokens(2, 6, d_vocab=64, seed=2).tokens[:, 1:7]
    loss = loss_metric(data.loss_mask)
    kw = dict(corrupted_tokens=corrupted, metric=loss)
    heads = A.patch_heads(model, data.tokens, heads=["L1H1"], **kw)
    paths = A.path_patch(model, data.tokens, senders=["L1H1"], **kw)
    with torch.no_grad():
        want = float(loss(model(corrupted), data.tokens))  # the corrupted run, clean targets
    assert heads["corrupted"].item() == pytest.approx(want, rel=1e-5)
    assert paths["corrupted"].item() == pytest.approx(want, rel=1e-5)
    assert heads.attrs["scored_on"] == paths.attrs["scored_on"] == "the clean tokens, in both runs"


# 17. right padding ----------------------------------------------------------------------
def test_17_reading_right_padding_is_refused_with_the_fix():
    gpt2 = random_gpt2(2, vocab=30)  # its tokenizer pads with id 1 (its end-of-text too)
    padded = torch.tensor([[0, 5, 6, 7], [0, 5, 1, 1]])
    for call in (
        lambda: A.direct_logit_attribution(gpt2, padded, answer=7),
        lambda: A.logit_lens(gpt2, padded),
        lambda: A.patch_heads(
            gpt2, padded, corrupted_tokens=padded.flip(0), metric=logit_diff_metric(3, 4)
        ),  # fmt: skip
    ):
        refused(call, r"sequence 1 is right-padded: .* position [23], .*side = 'left'", gpt2)
    A.direct_logit_attribution(gpt2, padded, answer=7, at=1)  # a position before the padding
    one = torch.tensor([[0, 5, 6, 7], [0, 5, 6, 1]])  # one end-of-text token: maybe content
    with pytest.warns(UserWarning, match="sequence 1 is right-padded: .* end-of-text token"):
        A.direct_logit_attribution(gpt2, one, answer=7)


# minor: GQA labels, edge errors, floats -------------------------------------------------
def test_a_query_head_label_of_a_shared_key_says_so():
    llama = random_llama(2, vocab=30, n_heads=4, n_kv_heads=2)
    g = A.build_graph(llama)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert g.receiver_indices("L1H3.k") == g.receiver_indices("L1KV1.k")
    assert "query heads L1H2..L1H3 share" in str(seen[0].message)


def test_edge_errors_name_the_edge_and_floats_are_not_rounded(model):
    g = A.build_graph(model)
    bad = g.valid.copy()
    bad[g.sender_index("L1H1"), g.receiver_indices("L0H0.q")[0]] = True
    refused(
        lambda: A.evaluate_circuit(model, CLEAN, **TASK, edges=bad),
        r"holds L1H1 -> L0H0.q, which is not an edge",
        model,
    )
    refused(lambda: A.circuit_curve(model, CLEAN, **TASK, scores=np.ones((6, 13)), sizes=[2.5]),
            r"each size must be an integer, got 2.5", model)  # fmt: skip
    refused(lambda: A.find_circuit(model, CLEAN, **TASK, scores=np.ones((6, 13)), bracket=(1.0, 4)),
            r"bracket must be an integer, got 1.0", model)  # fmt: skip
    refused(lambda: A.attribute_edges(model, CLEAN, **TASK, method="eap-ig", steps=2.0),
            r"steps must be an integer, got 2.0", model)  # fmt: skip


# every public analysis: no model is one clear line, not an AttributeError ----------------
def _takes_a_model(name):
    import inspect

    fn = getattr(A, name)
    if not callable(fn) or isinstance(fn, type):
        return False
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "model"


MODEL_FUNCTIONS = sorted(n for n in A.__all__ if _takes_a_model(n))


@pytest.mark.parametrize("name", MODEL_FUNCTIONS)
def test_no_model_is_refused_by_every_analysis(name):
    import inspect

    fn = getattr(A, name)
    sig = inspect.signature(fn)
    args = [None] + [CLEAN] * sum(
        p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty
        for p in list(sig.parameters.values())[1:]
    )
    required = {
        k: None
        for k, p in sig.parameters.items()
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    }
    refused(lambda: fn(*args, **required), r"no model given|is not a hooked model")

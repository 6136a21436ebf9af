"""The pretrained lab in features (interp.experiments.pretrained_heads.features), on the
shipped induction model: a random residual dictionary at L1H1's input for the query side,
the shipped layer-0 writer dictionary for the key side, repeated random tokens."""

import math

import pytest
import torch

from interp.core.errors import InterpError
from interp.core.paths import data_dir
from interp.datasets import RepeatedTokens, repeated_random_tokens, repeated_tokens
from interp.dictionaries import Dictionary, load_dictionary
from interp.experiments.induction.why_attend import induction_targets
from interp.experiments.pretrained_heads.features import head_in_features, repeated_text

LAYER, HEAD = 1, 1


@pytest.fixture(scope="module")
def parts(induction_model):
    writer = load_dictionary(data_dir() / "induction-2l-attn0")
    resid = Dictionary.random(d_in=128, d_sae=64, architecture="topk", k=4,
                              hook_name="blocks.1.hook_resid_pre", seed=0)  # fmt: skip
    data = repeated_random_tokens(12, 20, d_vocab=64, seed=5)
    reading = repeated_tokens(8, d_vocab=64, seq_len=48, seed=6).tokens
    return induction_model, resid, writer, data, reading


@pytest.fixture(scope="module")
def found(parts):
    model, resid, writer, data, reading = parts
    return head_in_features(model, data, layer=LAYER, head=HEAD, query_dictionary=resid,
                            key_dictionaries=[writer], reading_tokens=reading, top=5,
                            checks=3)  # fmt: skip


def test_each_prompts_rows_sum_to_the_models_own_score(parts, found):
    model, _, _, data, _ = parts
    q, k = induction_targets(data)
    name = f"blocks.{LAYER}.attn.hook_attn_scores"
    with torch.no_grad():
        _, cache = model.run_with_cache(data.tokens, names_filter=[name])
    own = cache[name][:, HEAD]
    want = torch.tensor([float(own[s, q[s][0], k[s][0]]) for s in range(len(data))])
    per = found.per_prompt.sort_values("sequence")
    assert per["sequence"].tolist() == list(range(len(data)))
    got = torch.tensor(per["score"].tolist())
    scale = float(want.abs().max())  # the tolerance is relative to the scores' scale
    assert float((got - want).abs().max()) <= 1e-4 * scale
    assert found.score == pytest.approx(float(want.mean()), abs=1e-4 * scale)


def test_the_shares_add_up_and_the_top_pairs_are_feature_pairs(found):
    s = found.shares
    assert set(s) == {"top_pairs", "other_feature_pairs", "error", "b_dec", "rest"}
    assert all(math.isfinite(v) for v in s.values())
    assert sum(s.values()) == pytest.approx(1.0, abs=1e-6)  # relative: shares of the sum
    pairs = found.pairs
    assert 0 < len(pairs) <= 5 and pairs["value"].is_monotonic_decreasing
    assert s["top_pairs"] == pytest.approx(float(pairs["share"].sum()), abs=1e-6)
    sides = found.sides.groupby("side")["share"].sum()  # each side's parts: the whole score
    assert sides.to_dict() == pytest.approx({"query": 1.0, "key": 1.0}, abs=1e-6)
    parts = set(found.sides["part"])
    assert {"blocks.0.hook_attn_out features", "blocks.0.hook_attn_out error"} <= parts
    assert {"blocks.1.hook_resid_pre features", "blocks.1.hook_resid_pre error"} <= parts
    assert all(p.startswith("F") for p in [*pairs["query_piece"], *pairs["key_piece"]])


def test_each_top_feature_is_read_from_its_activations(found):
    m = found.meanings
    assert set(m.loc[m["side"] == "query", "piece"]) == set(found.pairs["query_piece"])
    assert set(m.loc[m["side"] == "key", "piece"]) == set(found.pairs["key_piece"])
    assert set(m.loc[m["side"] == "key", "hook"]) == {"blocks.0.hook_attn_out"}
    assert m["previous_share"].between(0, 1).all() and (m["contexts"] != "").all()


def test_the_interventions_put_measured_beside_attribution(found):
    t = found.interventions
    assert {"side", "piece", "rank", "attribution", "measured", "within_a_tenth"} <= set(t.columns)
    assert len(t) == 6 and t["side"].tolist() == ["query", "key"] * 3
    assert t[["attribution", "measured"]].notna().all().all()  # each pair's features reached
    per = found.per_prompt.set_index("sequence")
    for r in t.itertuples():  # the removed features are each prompt's top feature pair's
        assert r.piece == per.at[r.sequence, f"feature_{r.side}_piece"]
    assert ((t["measured"] - t["attribution"]).abs() <= 0.1 * t["attribution"].abs()).tolist() \
        == t["within_a_tenth"].tolist()  # fmt: skip


def test_bad_input_is_refused_in_one_clear_line(parts):
    model, resid, writer, data, reading = parts
    opts = dict(layer=LAYER, head=HEAD, reading_tokens=reading)
    after = Dictionary.random(d_in=128, d_sae=16, architecture="topk", k=2,
                              hook_name="blocks.1.hook_attn_out", seed=0)  # fmt: skip
    with pytest.raises(InterpError):  # a writer after the head
        head_in_features(model, data, query_dictionary=resid, key_dictionaries=[after], **opts)
    with pytest.raises(InterpError, match="residual"):  # a writer on the query side
        head_in_features(model, data, query_dictionary=writer, key_dictionaries=[writer], **opts)
    with pytest.raises(InterpError, match="key_dictionaries"):
        head_in_features(model, data, query_dictionary=resid, key_dictionaries=[], **opts)
    fields = ("tokens", "predictable", "segment_len", "first_start", "second_start")
    none = RepeatedTokens(*(getattr(data, f)[:0] for f in fields))
    with pytest.raises(InterpError, match="no prompts"):
        head_in_features(model, none, query_dictionary=resid, key_dictionaries=[writer], **opts)
    with pytest.raises(InterpError, match="prompts"):
        repeated_text(model, prompts=0, half=8)
    with pytest.raises(InterpError, match="context"):
        repeated_text(model, prompts=1, half=40)

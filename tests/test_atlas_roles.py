"""Atlas roles against interventions on the real models: a label must say what the head does.

A role is a score that beats its shuffled control and reaches an effect-size floor
(:mod:`interp.analysis.heads.atlas.roles`). Here a seeded sample of the heads that hold each
role on SmolLM2 (and on the induction model, where that is where the role shows), and of
heads that hold none, is put through an intervention on the model, on tokens the atlas never
saw:

* induction: zero-ablating the heads raises the loss on repeated random tokens;
* previous-token, duplicate-token: blocking the head's attention to its stripe keys
  (attention knockout, Geva et al. 2023) changes its output; the induction model's
  previous-token head raises the induction loss when ablated;
* sink: on natural text, replacing the first token keeps the head's attention on it;
* copying: the head's direct effect raises the token it reads over the one it reads least;
* copy suppression: removing the head raises the logit of the copied token (McDougall et al.
  2024's setup: a token that appears earlier and is predicted). SmolLM2 has no such head; its
  heads whose OV circuit suppresses (formerly labelled) do not attend to the copy, and
  removing them does not raise it. A head made to suppress (the induction model's L1H1 with
  ``W_O`` negated) is labelled, and removing it does.

One SmolLM2 (the session's), small batches; numbers measured on the full model are in the
atlas section of docs/heads.md.
"""

import pydoc_data.topics

import numpy as np
import pytest
import torch

import interp.analysis as A
from interp.analysis.heads.atlas.roles import assign_roles, effect_sizes, role_counts
from interp.core.hooks import hook_name
from interp.core.metrics import Metric
from interp.core.protocol import bos_token_id
from interp.datasets import repeated_random_tokens, repeated_tokens
from interp.engine.cache import cache_of, run_until
from interp.models import load_model

SAMPLE = 3  # heads drawn per role, and as many unlabelled ones


def _held(df, role):
    """Labels of the heads holding ``role`` (in ``roles``, not only first)."""
    return [r.label for r in df.itertuples() if role in str(r.roles).split(", ")]


def _unlabelled(df, layers):
    return [r.label for r in df.itertuples() if r.role == "none" and r.layer in layers]


def _draw(labels, seed=0):
    rng = np.random.default_rng(seed)
    return sorted(rng.choice(labels, min(SAMPLE, len(labels)), replace=False).tolist())


def _lh(label):
    layer, head = label[1:].split("H")
    return int(layer), int(head)


def _copied_logit(mask):
    """Mean over ``mask``'s positions of the next token's logit minus the mean logit: on
    repeated tokens the next token appeared earlier and is the one the model predicts."""

    def fn(logits, tokens):
        x = logits[:, :-1].float()
        nxt = x.gather(-1, tokens[:, 1:, None].to(x.device))[..., 0] - x.mean(-1)
        m = mask[:, :-1].to(x.device, x.dtype)
        return (nxt * m).sum() / m.sum()

    return Metric(fn, name="copied_logit", mean_over_prompts=True)


@pytest.fixture(scope="module")
def atlas(smollm):
    return A.head_atlas(smollm, A.probe_tokens(smollm, n=4, seed=0))


@pytest.fixture(scope="module")
def unseen(smollm):
    """Repeated random tokens of another seed than the atlas's probe."""
    d_vocab = int(smollm.cfg.d_vocab)
    return repeated_random_tokens(4, 50, d_vocab=d_vocab, bos=bos_token_id(smollm), seed=1)


# ---- the rule, on synthetic scores -------------------------------------------------------


def _stats(**maxima):
    return {k: {"max": v, "mean": v / 4, "std": v / 8} for k, v in maxima.items()}


def test_a_score_that_beats_the_control_but_not_its_floor_gets_no_role():
    # SmolLM2's copy-suppression control reached 5 of 512: 0.02 beat it and was labelled
    stats = _stats(copy_suppression=5 / 512, induction=0.12)
    values = {"copy_suppression": np.array([[0.02, 0.9]]), "induction": np.array([[0.0, 0.0]])}
    assert [r for r, _ in assign_roles(values, stats, 1, 2)] == ["none", "none"]  # no QK half
    values["induction"] = np.array([[0.5, 0.5]])
    got = assign_roles(values, stats, 1, 2)
    assert got[0] == ("induction", "induction")  # 0.02: not a suppression, at any control
    assert got[1] == ("copy-suppression", "copy-suppression, induction")  # it refines induction
    sizes = effect_sizes(stats)
    assert sizes["copy_suppression"]["binds"] == "floor" and sizes["copy_suppression"]["bar"] == 0.5


def test_the_control_binds_where_it_reaches_above_the_floor():
    stats = _stats(copying=0.9, copying_top1=0.01, sink=0.7)
    sizes = effect_sizes(stats)
    assert sizes["copying"]["binds"] == "control" and sizes["copying"]["bar"] == 0.9
    assert sizes["sink"]["bar"] == 0.7 and sizes["copying_top1"]["bar"] == 0.5
    values = {
        "copying": np.array([[0.95, 0.95, 0.85]]),  # saturated positivity alone is not copying
        "copying_top1": np.array([[0.2, 0.8, 0.8]]),
        "sink": np.array([[0.0, 0.0, 0.0]]),
        "sink_swapped": np.array([[0.0, 0.0, 0.0]]),
    }
    assert [r for r, _ in assign_roles(values, stats, 1, 3)] == ["none", "copying", "none"]


def test_a_sink_is_positional_when_swapping_the_first_token_keeps_half_of_it():
    stats = _stats(sink=0.3)
    values = {"sink": np.array([[0.8, 0.8, 0.45]]), "sink_swapped": np.array([[0.4, 0.39, 0.45]])}
    got = [r for r, _ in assign_roles(values, stats, 1, 3)]
    assert got == ["positional sink", "content sink", "none"]  # 0.45: not most of the row


# ---- the induction model -----------------------------------------------------------------


def test_induction_model_previous_token_and_induction_heads_carry_the_induction_loss():
    model = load_model("induction-2l")
    df = A.head_atlas(model)
    roles = df.set_index("label")["role"]
    assert roles["L0H1"] == "previous-token" and roles["L1H1"] == "induction"
    data = repeated_tokens(32, d_vocab=64, seq_len=48, segment_lengths=(8, 12), seed=5)
    effect = A.ablate_heads(model, data.tokens, loss_mask=data.loss_mask, heads=["L0H1", "L1H1"])
    assert (effect["effect"] > 0.5).all(), effect  # nats of induction loss each


def test_a_head_made_to_suppress_is_copy_suppression_and_removing_it_raises_the_copy():
    data = repeated_tokens(32, d_vocab=64, seq_len=48, segment_lengths=(8, 12), seed=5)
    metric = _copied_logit(data.loss_mask)
    model = load_model("induction-2l")  # a fresh copy: the session's is never edited
    before = A.ablate_heads(model, data.tokens, metric=metric, heads=["L1H1"])["effect"].item()
    with torch.no_grad():
        model.blocks[1].attn.W_O[1].neg_()  # L1H1 now pushes down what it copied
    df = A.head_atlas(model).set_index("label")
    assert df.loc["L1H1", "role"] == "copy-suppression", df.loc["L1H1", ["roles"]]
    assert df.loc["L1H1", "copy_suppression"] > 0.9 and df.loc["L1H1", "induction"] > 0.5
    after = A.ablate_heads(model, data.tokens, metric=metric, heads=["L1H1"])["effect"].item()
    assert before < -1.0 < 1.0 < after, (before, after)  # logits of the copied token


# ---- SmolLM2 -----------------------------------------------------------------------------


def test_smollm_role_counts_are_few_for_the_rare_roles(atlas):
    counts = role_counts(atlas)["roles"]
    assert counts["copy-suppression"] == 0 and counts["content sink"] == 0  # were 48 and 7
    assert 5 <= counts["induction"] <= 12 and counts["copying"] <= 16  # copying was 64
    known = ["L18H6", "L17H3", "L17H4", "L17H5", "L18H7", "L23H2"]
    assert set(known) <= set(_held(atlas, "induction"))
    sizes = atlas.attrs["effect_sizes"]
    assert all(e["bar"] == max(e["floor"], e["control_max"]) for e in sizes.values())
    assert sizes["copy_suppression"]["binds"] == "floor" and sizes["copying"]["binds"] == "control"


def test_smollm_induction_heads_raise_the_induction_loss_when_ablated(smollm, atlas, unseen):
    labelled = _draw(_held(atlas, "induction"))
    layers = {_lh(h)[0] for h in _held(atlas, "induction")}
    contrast = _draw(_unlabelled(atlas, range(min(layers), max(layers) + 1)))
    groups = {"induction": labelled, "none": contrast, **{h: [h] for h in labelled}}
    df = A.ablate_head_groups(smollm, unseen.tokens, loss_mask=unseen.loss_mask, groups=groups)
    effect = df.set_index("group")["effect"]  # nats of loss on the repeated half
    assert effect["induction"] > 1.0 and effect["induction"] > 5 * abs(effect["none"]), df
    assert (effect[labelled] > 0.05).all(), df  # each head alone too


def _knockout_changes(model, tokens, labels, keys):
    """Per head, the mean ``|z' - z| / |z|`` of its output over the rows with ``keys`` when
    its attention to them is blocked (attention knockout: the row renormalised over the
    rest), each head alone."""
    names = sorted({hook_name("z", _lh(h)[0]) for h in labels})
    clean = cache_of(model, tokens, names)
    rows = keys.any(-1)
    out, got = [], {}
    for label in labels:
        layer, head = _lh(label)
        z_name = hook_name("z", layer)

        def block(pattern, hook, head=head):
            pattern = pattern.clone()
            kept = pattern[:, head] * (~keys).to(pattern.dtype)
            pattern[:, head] = kept / kept.sum(-1, keepdim=True).clamp_min(1e-30)
            return pattern

        def keep(z, hook, head=head):
            got["z"] = z[:, :, head].detach().clone()

        run_until(model, tokens, [(hook_name("pattern", layer), block), (z_name, keep)], z_name)
        z = clean[z_name][:, :, head]
        change = (got["z"] - z).norm(dim=-1) / z.norm(dim=-1).clamp_min(1e-12)
        out.append(float(change[rows].mean()))
    return out


@pytest.mark.parametrize("role", ["previous-token", "duplicate-token"])
def test_smollm_stripe_heads_output_comes_from_their_stripe(smollm, atlas, unseen, role):
    """Labelled heads against heads whose score the control cannot tell from shuffled weights
    (heads just under the floor are neither: a floor is a line through a continuum)."""
    stripe = role.replace("-", "_")
    tokens = unseen.tokens[:2]
    keys = A.stripe_mask(tokens, stripe)
    labelled = _draw(_held(atlas, role))
    chance = atlas.attrs["effect_sizes"][stripe]["control_max"]
    layers = range(int(smollm.cfg.n_layers))
    contrast = _draw(
        [h for h in _unlabelled(atlas, layers) if atlas.set_index("label").loc[h, stripe] < chance]
    )
    change = _knockout_changes(smollm, tokens, labelled + contrast, keys)
    held, none = change[: len(labelled)], change[len(labelled) :]
    assert min(held) > max(none), (labelled, held, contrast, none)  # share of |z| it moves


def _natural_text(model, n=4, length=48):
    text = " ".join(pydoc_data.topics.topics.values())[:200_000]
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    starts = np.random.default_rng(0).choice(len(ids) // length - 1, n, replace=False) * length
    rows = [[bos_token_id(model), *ids[s : s + length - 1]] for s in starts]
    return torch.tensor(rows)


def test_smollm_positional_sinks_keep_the_first_position_whatever_token_is_there(smollm, atlas):
    """On natural text (Python's documentation), with BOS and then three other first tokens:
    every head's attention on key 0, from one stopped pass per first token."""
    text = _natural_text(smollm)
    words = A.ordinary_word_ids(smollm)
    order = torch.randperm(len(words), generator=torch.Generator().manual_seed(0))
    names = [hook_name("pattern", l) for l in range(int(smollm.cfg.n_layers))]
    on_first = []  # [first token, layer, head]: mean attention on key 0 over query rows 1..
    for first in [None, *words[order[:3]].tolist()]:
        t = text.clone()
        if first is not None:
            t[:, 0] = first
        pats = cache_of(smollm, t, names)
        on_first.append(torch.stack([pats[n][:, :, 1:, 0].mean((0, 2)) for n in names]))
    x = torch.stack(on_first).flatten(1).numpy()  # [first, head] in the table's order
    sinks = atlas["roles"].str.contains("positional sink").to_numpy()
    none = (atlas["role"] == "none").to_numpy()
    assert (x[1:, sinks] >= 0.5 * x[0, sinks]).all(), x[:, sinks]  # the position pulls
    assert np.median(x[0, sinks]) > 0.5 > np.median(x[0, none]), (x[0, sinks], x[0, none])


def test_smollm_copying_heads_raise_the_token_they_read(smollm, atlas):
    words = A.ordinary_word_ids(smollm)
    gen = torch.Generator().manual_seed(0)
    tokens = words[torch.randint(len(words), (8, 40), generator=gen)]
    tokens = torch.cat([torch.full((8, 1), bos_token_id(smollm)), tokens], 1)
    read = list(range(-8, 0))  # the query rows read
    labelled = _draw(_held(atlas, "copying"))
    layers = {_lh(h)[0] for h in _held(atlas, "copying")}
    contrast = _draw(_unlabelled(atlas, range(min(layers), max(layers) + 1)))
    heads = labelled + contrast
    names = sorted({hook_name("pattern", _lh(h)[0]) for h in heads})
    pats = cache_of(smollm, tokens, names)
    effect = []
    for h in heads:
        layer, head = _lh(h)
        seen = pats[hook_name("pattern", layer)][:, head, read, 1:-8].sum(1)  # [batch, key]
        most = tokens.gather(1, seen.argmax(-1, keepdim=True) + 1)[:, 0]
        least = tokens.gather(1, seen.argmin(-1, keepdim=True) + 1)[:, 0]
        keep = most != least
        df = A.direct_logit_attribution(
            smollm, tokens[keep], answer=most[keep], wrong=least[keep], at=read
        )
        effect.append(float(df.set_index("label").loc[h, "value"]))
    mine, other = effect[: len(labelled)], effect[len(labelled) :]
    assert np.mean(mine) > max(0.0, np.mean(other)), (heads, effect)  # logits


def test_smollm_has_no_copy_suppression_and_its_suppressing_ov_heads_do_not_suppress_the_copy(
    smollm, atlas, unseen
):
    """McDougall's copy suppression attends to the copy and pushes it down; SmolLM2's heads
    whose OV circuit pushes down most tokens (the OV half, formerly enough) attend elsewhere."""
    assert not _held(atlas, "copy-suppression")
    floor = atlas.attrs["effect_sizes"]["copy_suppression"]["bar"]
    ov_only = atlas[atlas["copy_suppression"] >= floor]
    assert len(ov_only) >= SAMPLE and (ov_only["induction"] < 0.1).all()  # no QK half
    sample = _draw(ov_only["label"].tolist())
    induction = _draw(_held(atlas, "induction"))
    groups = {"induction": induction, **{h: [h] for h in sample}}
    tokens = unseen.tokens[:2]
    df = A.ablate_head_groups(
        smollm, tokens, metric=_copied_logit(unseen.loss_mask[:2]), groups=groups
    )
    effect = df.set_index("group")["effect"]  # logits of the copied token
    assert effect["induction"] < -1.0, df  # removing the heads that copy it lowers it
    assert effect[sample].mean() < 0 and effect[sample].max() < 0.1 * -effect["induction"], df

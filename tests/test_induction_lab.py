"""The induction lab's claims, computed on the shipped checkpoint and held-out data."""

import math

import pytest

from interp.labs.induction import analyse
from interp.models import load_induction_model


@pytest.fixture(scope="module")
def findings():
    return analyse(load_induction_model())


def test_previous_token_and_induction_heads(findings):
    assert findings.prev_head[0] == 0 and findings.induction_head[0] == 1
    assert findings.score_of(findings.prev_head, "previous_token") > 0.8
    assert findings.score_of(findings.induction_head, "induction") > 0.8


def test_top_k_composition_is_the_circuit(findings):
    kc = findings.composition
    top = kc.loc[kc["score"].idxmax()]
    assert (top["src_label"], top["label"]) == (findings.prev_label, findings.induction_label)
    assert top["score"] > 2 * top["baseline"]
    assert findings.kcomp_diagonal_fraction > 0.9


def test_induction_head_copies(findings):
    row = findings.copying.set_index("label").loc[findings.induction_label]
    assert row["copying_score"] > 0.85
    assert row["top1_self_fraction"] > 0.9


def test_losses_and_icl(findings):
    assert findings.losses["repeated"] < 0.2
    assert abs(findings.losses["first_half"] - math.log(63)) < 0.05  # 63 content tokens
    assert findings.icl["score"] < -1


def test_ablations_identify_the_roles(findings):
    delta = findings.ablation.set_index("label")["delta"]
    assert delta[findings.induction_label] > 1.0
    assert delta[findings.prev_label] > 1.0
    assert delta.abs().min() < 0.1
    groups = findings.group_ablation.set_index("group")["delta"]
    # Knocking out both roles together is at least as damaging as a large single ablation.
    assert groups["previous-token + induction"] > 1.0


@pytest.mark.slow
def test_retraining_with_the_same_seed_reproduces_the_shipped_checkpoint():
    """The shipped file is honestly reproducible: same seed, same config, same scores."""

    from interp.training import InductionTrainConfig, train_induction

    shipped, meta = load_induction_model(with_meta=True)
    result = train_induction(InductionTrainConfig.from_dict(meta["training"]), progress=False)
    last, ref = result.history[-1], meta["history"][-1]
    for key in ("induction", "previous_token", "repeated_loss", "first_half_loss"):
        assert last[key] == pytest.approx(ref[key], abs=0.02), key
    again, before = analyse(result.model), analyse(shipped)
    assert (again.prev_label, again.induction_label) == (before.prev_label, before.induction_label)
    # Same CPU kind: bit-identical; another CPU's kernels may round differently.
    diffs = [
        float((p - q).abs().max())
        for p, q in zip(result.model.state_dict().values(), shipped.state_dict().values())
    ]
    assert max(diffs) < 0.05


def test_training_is_deterministic_by_seed():
    import torch

    from interp.training import InductionTrainConfig, train_induction

    cfg = InductionTrainConfig(steps=40, eval_every=20, eval_size=16, batch_size=16)
    a, b = (train_induction(cfg, progress=False) for _ in range(2))
    for (n, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), n
    assert a.history == [{**h, "seconds": a.history[i]["seconds"]} for i, h in enumerate(b.history)]

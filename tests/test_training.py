"""Training the induction model: the shipped checkpoint is reproducible from its seed and config.

Training runs on one torch thread (interp.training.induction.deterministic_algorithms),
so the result does not depend on how many threads the machine or a test
worker gives torch.
"""

import pytest
from conftest import run_cli

from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.models.checkpoints import load_checkpoint


@pytest.mark.slow
def test_retraining_with_the_same_seed_reproduces_the_shipped_checkpoint():
    """The shipped file is honestly reproducible: same seed and config, same scores and weights."""
    import torch

    from interp.analysis.heads.scores import head_scores
    from interp.training.induction import InductionTrainConfig, train_induction

    shipped, meta = load_checkpoint(data_dir() / INDUCTION_CHECKPOINT)
    result = train_induction(InductionTrainConfig.from_dict(meta["training"]), progress=False)
    # The first evaluation and the end. In between, around the loss's fast drop (steps
    # 200-500), another CPU's rounding moves the curve by a few hundredths; it converges again.
    assert len(result.history) == len(meta["history"])
    for got, ref in (
        (result.history[0], meta["history"][0]),
        (result.history[-1], meta["history"][-1]),
    ):
        for key in ("induction", "previous_token", "repeated_loss", "first_half_loss"):
            assert got[key] == pytest.approx(ref[key], abs=0.02), (got["step"], key)
    probe = torch.randint(1, 64, (8, 20)).repeat(1, 2)
    a, b = head_scores(result.model, probe), head_scores(shipped, probe)
    assert a.nlargest(1, "induction")["label"].item() == b.nlargest(1, "induction")["label"].item()
    # Same CPU kind: bit-identical; another CPU's kernels may round differently.
    diffs = [
        float((p - q).abs().max())
        for p, q in zip(result.model.state_dict().values(), shipped.state_dict().values())
    ]
    assert max(diffs) < 0.05


def test_training_is_deterministic_by_seed():
    import torch

    from interp.training.induction import InductionTrainConfig, train_induction

    cfg = InductionTrainConfig(steps=40, eval_every=20, eval_size=16, batch_size=16)
    a, b = (train_induction(cfg, progress=False) for _ in range(2))
    for (n, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), n
    assert a.history == [{**h, "seconds": a.history[i]["seconds"]} for i, h in enumerate(b.history)]


def test_train_cli_writes_a_checkpoint_that_loads(tmp_path):
    out = tmp_path / "ck"
    proc = run_cli("train", "induction", "--out", str(out), "--steps", "30", "--quiet")
    assert proc.returncode == 0, proc.stderr
    model, meta = load_checkpoint(out)
    assert meta["history"][-1]["step"] == 30 and model.cfg.n_layers == 2
    bad = run_cli("train", "induction", "--out", str(out / "config.json"), "--steps", "2")
    assert bad.returncode == 2 and "is a file" in bad.stderr

"""Checkpoints: atomic, verified, and clear errors for every kind of damage."""

import json
import shutil

import pytest
import torch

from interp import CheckpointError
from interp.models import load_induction_model
from interp.paths import INDUCTION_CHECKPOINT, data_dir
from interp.training import CONFIG, WEIGHTS, InductionTrainConfig, load_checkpoint, save_checkpoint

SHIPPED = data_dir() / INDUCTION_CHECKPOINT


def test_shipped_checkpoint_loads_and_is_small():
    model, meta = load_induction_model(with_meta=True)
    assert (SHIPPED / WEIGHTS).stat().st_size < 600_000
    assert meta["seed"] == 0 and meta["training"]["eval_lengths"] == [8, 12, 16]
    assert model.W_Q.shape == (2, 2, 128, 32) and not model.training


@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, dst)
    return dst


def test_truncated_weights(copy):
    data = (copy / WEIGHTS).read_bytes()
    (copy / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(copy)


def test_missing_files_and_bad_config(copy, tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nowhere")
    (copy / CONFIG).write_text("{not json")
    with pytest.raises(CheckpointError, match="config .* is invalid"):
        load_checkpoint(copy)
    (copy / WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match="missing model.safetensors"):
        load_checkpoint(copy)


def test_wrong_shapes(copy):
    meta = json.loads((copy / CONFIG).read_text())
    meta["model"]["d_head"] = 16
    (copy / CONFIG).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="has shape"):
        load_checkpoint(copy)


def test_save_roundtrip_is_atomic(tmp_path):
    from interp.training import train_induction

    result = train_induction(
        InductionTrainConfig(steps=3, eval_every=3, eval_size=8, batch_size=4), progress=False
    )
    out = save_checkpoint(result, tmp_path / "c")
    model, meta = load_checkpoint(out)
    for (n, p), (_, q) in zip(model.state_dict().items(), result.model.state_dict().items()):
        assert torch.equal(p, q), n
    assert not list(out.glob(".*.tmp"))

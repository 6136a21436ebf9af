"""Checkpoints: atomic, verified, and clear errors for every kind of damage."""

import json
import shutil
import subprocess
import sys
import time

import pytest
import torch

from interp import CheckpointError
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.models.checkpoints import CONFIG, WEIGHTS, load_checkpoint, save_checkpoint

SHIPPED = data_dir() / INDUCTION_CHECKPOINT


def test_shipped_checkpoint_loads_and_is_small():
    model, meta = load_checkpoint(SHIPPED)
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
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(copy)
    (copy / WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match="incomplete: it has no model.safetensors"):
        load_checkpoint(copy)


def test_wrong_shapes(copy):
    meta = json.loads((copy / CONFIG).read_text())
    meta["model"]["d_head"] = 16
    (copy / CONFIG).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="has shape"):
        load_checkpoint(copy)


def test_save_roundtrip(tmp_path):
    model, _ = load_checkpoint(SHIPPED)
    out = save_checkpoint(model, tmp_path / "c", meta={"note": "copy"})
    again, meta = load_checkpoint(out)
    for (n, p), q in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(p, q), n
    assert meta["note"] == "copy" and not list(out.glob(".*.tmp"))


KILLED_WRITER = """
import sys, time
from pathlib import Path
from interp.models.checkpoints import load_checkpoint, save_checkpoint
import safetensors.torch as st

real = st.save_file
def slow(state, path):  # write half a file, then hang until killed
    real(state, path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    print("writing", flush=True)
    time.sleep(60)
st.save_file = slow
model, _ = load_checkpoint(sys.argv[1])
save_checkpoint(model, sys.argv[2])
"""


def test_a_writer_killed_mid_write_leaves_the_old_checkpoint(copy, tmp_path):
    """SIGKILL during the weights write: the old files are untouched and still verify."""
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(SHIPPED), str(copy)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.2)
    proc.kill()
    proc.wait()
    assert {p.name: p.read_bytes() for p in copy.iterdir() if not p.name.startswith(".")} == before
    load_checkpoint(copy)  # verifies

"""The SmolLM2 cache: every file verified, damage reported and rebuilt, bad folders refused early.

The rebuild below converts the GGUF once into a private cache folder (the
session's shared copy is left to whichever worker needs it first; a lock
makes concurrent first loads convert once).
"""

import json
import shutil

import pytest

from interp import InterpError
from interp.models import pretrained


def test_a_damaged_cache_is_reported_and_rebuilt(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    target = pretrained.smollm2_cache()
    target.mkdir(parents=True)
    (target / "config.json").write_text('{"num_hidden_layers": 31}')
    entry = {"size": 2, "sha256": "0" * 64, "mtime_ns": 0}
    (target / pretrained.MANIFEST).write_text(
        json.dumps(
            {"version": pretrained.MANIFEST_VERSION, "source": "x", "files": {"config.json": entry}}
        )
    )
    assert pretrained.cache_status(target).startswith("config.json truncated")
    folder = pretrained.ensure_smollm2()
    assert "rebuilding" in capsys.readouterr().err
    assert pretrained.cache_status(folder, full=True) == "ok"
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 30
    manifest = json.loads((folder / pretrained.MANIFEST).read_text())
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= set(manifest["files"])
    leftovers = [p for p in tmp_path.glob(".smollm2-135m-f32.*") if p.is_dir()]
    assert leftovers == []  # no temporary folder left behind


@pytest.fixture
def damaged(tmp_path, smollm):
    """A fresh copy of the verified cache (the session model is loaded, so it exists)."""
    from interp.paths import cache_dir

    real = cache_dir() / "smollm2-135m-f32"
    dst = tmp_path / "copy"
    shutil.copytree(real, dst)
    return dst


def test_every_file_of_the_cache_is_checked(damaged):
    assert pretrained.cache_status(damaged) == "ok"
    tok = damaged / "tokenizer.json"
    tok.write_bytes(tok.read_bytes()[:1000])  # truncated
    assert pretrained.cache_status(damaged).startswith("tokenizer.json truncated")


def test_an_edited_config_of_the_same_size_is_caught(damaged):
    cfg = damaged / "config.json"
    cfg.write_text(cfg.read_text().replace('"num_hidden_layers": 30', '"num_hidden_layers": 31'))
    assert pretrained.cache_status(damaged) == "config.json corrupt (SHA-256 mismatch)"


def test_weights_flipped_in_place_are_caught_by_a_full_check(damaged):
    import os

    w = damaged / "model.safetensors"
    st = w.stat()
    with open(w, "r+b") as f:
        f.seek(st.st_size // 2)
        b = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([b[0] ^ 1]))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    assert pretrained.cache_status(damaged) == "ok"  # the fast check trusts size + mtime
    assert (
        pretrained.cache_status(damaged, full=True)
        == "model.safetensors corrupt (SHA-256 mismatch)"
    )
    (damaged / "generation_config.json").unlink()
    assert pretrained.cache_status(damaged) == "generation_config.json missing"


def test_an_unusable_cache_folder_fails_before_converting(tmp_path, monkeypatch):
    from interp.models import load_model

    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "afile"))
    with pytest.raises(InterpError, match="INTERP_CACHE .* is a file"):
        load_model("smollm2-135m")
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "afile" / "sub"))
    with pytest.raises(InterpError, match="is not writable"):
        load_model("smollm2-135m")
    monkeypatch.setenv("INTERP_CACHE", "/proc/interp-cache")
    with pytest.raises(InterpError, match="is not writable"):
        load_model("smollm2-135m")

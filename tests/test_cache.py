"""The SmolLM2 cache: every file verified, damage reported and repaired, bad folders refused early.

The repair below works on a private copy of the cache (the session's shared
copy is built by whichever worker needs it first; a lock makes concurrent
first loads convert once).
"""

import json
import shutil

import pytest

from interp import InterpError
from interp.models import pretrained


def test_a_damaged_cache_is_reported_and_repaired(tmp_path, monkeypatch, capsys, smollm):
    """Damaged small files (config, tokenizer, generation config) are rewritten from the
    GGUF's metadata to the manifest's hashes; the verified weights are not converted again.
    (A missing or damaged weights file takes the full conversion, which builds the session's
    cache on a fresh machine.)"""
    from interp.core.paths import cache_dir

    real = cache_dir() / "smollm2-135m-f32"
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    target = pretrained.smollm2_cache()
    shutil.copytree(real, target)
    (target / "config.json").write_text('{"num_hidden_layers": 31}')
    tok = target / "tokenizer.json"
    tok.write_bytes(tok.read_bytes()[:1000])
    (target / "generation_config.json").unlink()
    weights = (target / "model.safetensors").stat()
    assert pretrained.cache_status(target).startswith("config.json truncated")
    folder = pretrained.ensure_smollm2()
    assert "rebuilding" in capsys.readouterr().err
    assert pretrained.cache_status(folder, full=True) == "ok"
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 30
    after = (folder / "model.safetensors").stat()
    assert (after.st_ino, after.st_mtime_ns) == (weights.st_ino, weights.st_mtime_ns)
    leftovers = [p for p in tmp_path.glob(".smollm2-135m-f32.*") if p.is_dir()]
    assert leftovers == []  # no temporary folder left behind


@pytest.fixture
def damaged(tmp_path, smollm):
    """A fresh copy of the verified cache (the session model is loaded, so it exists)."""
    from interp.core.paths import cache_dir

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

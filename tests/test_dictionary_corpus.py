"""The offline Python corpus: a fixed selection, disjoint splits, the model's tokenizer or
a character fallback; and ``interp train dictionary`` end to end."""

import json
import subprocess
import sys

import pytest
import torch

from interp.core.errors import InterpError
from interp.datasets import python_text, stdlib_files
from interp.dictionaries import load_dictionary
from interp.models import load_model


@pytest.fixture(scope="module")
def model():
    return load_model("induction-2l")


def test_fixed_selection_and_disjoint_splits(model):
    root, train = stdlib_files("train")
    _, test = stdlib_files("test")
    assert not set(train) & set(test) and len(test) < len(train)
    assert not any("site-packages" in f or f.startswith("test/") for f in train)
    a = python_text(model, n_sequences=6, seq_len=20)
    b = python_text(model, n_sequences=6, seq_len=20)
    assert torch.equal(a.tokens, b.tokens) and a.files == b.files
    assert a.files == tuple(train[: len(a.files)])
    assert (a.tokens[:, 0] == 0).all() and int(a.tokens.max()) < model.cfg.d_vocab
    assert a.n_tokens == 120 and a.tokenizer == "characters"
    # characters: the most frequent one of the files read gets the first id, 1
    text = "".join((root / f).read_text(encoding="utf-8", errors="replace") for f in a.files)
    top = max(set(text), key=lambda c: (text.count(c), -ord(c)))
    body = a.tokens[:, 1:].flatten()
    assert [i for i, c in enumerate(text[: len(body)]) if c == top] == (
        body == 1
    ).nonzero().flatten().tolist()
    t = python_text(model, n_sequences=2, seq_len=20, split="test")
    assert t.files[0] == test[0]
    with pytest.raises(InterpError, match="exceeds the model's context"):
        python_text(model, n_sequences=2, seq_len=1000)
    with pytest.raises(InterpError, match="split must be one of"):
        python_text(model, n_sequences=2, seq_len=20, split="dev")


def _cli(*args):
    code = "import sys; from interp.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def test_cli_trains_and_writes_sae_lens_layout(tmp_path):
    out = tmp_path / "sae"
    common = ["train", "dictionary", "--model", "induction-2l", "--hook", "blocks.1.hook_resid_pre"]
    r = _cli(*common, "--features", "32", "--k", "2", "--corpus", "repeated", "--sequences", "16",
             "--eval-sequences", "8", "--out", str(out), "--quiet")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "variance explained" in r.stdout and "without error" in r.stdout
    D = load_dictionary(out)
    cfg = json.loads((out / "cfg.json").read_text())
    assert (D.d_sae, D.k, D.hook_name) == (32, 2, "blocks.1.hook_resid_pre")
    assert cfg["metadata"]["corpus"]["name"] == "repeated-random-tokens"
    assert cfg["metadata"]["command"].startswith("interp train dictionary")
    bad = _cli(*common, "--features", "8", "--k", "9", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--k 9" in bad.stderr
    bad = _cli("train", "dictionary", "--features", "8", "--k", "2")
    assert bad.returncode == 2 and "needs --out, --hook" in bad.stderr

"""``interp generate``: the side-by-side table, its page (in headless Chromium), a Hugging Face
folder with a steering vector, and bad input refused in one line before any work."""

import contextlib
import io
import json

import numpy as np
import pandas as pd
import pytest
import torch

from interp.cli import main

PROMPT = "0 28 32 10 41 50 20 8 45 28 32 10"  # a segment, then its start: induction continues it


def cli(capsys, argv):
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors (one line, exit 2)
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err.strip()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One run of ``interp generate`` on the shipped model: its table, page and printout."""
    folder = tmp_path_factory.mktemp("generate")
    table, page = folder / "gen.csv", folder / "gen.html"
    argv = ["generate", "--prompt", PROMPT, "--ablate", "L1H1", "--max-new-tokens", "6",
            "--out", table, "--page", page]  # fmt: skip
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([str(a) for a in argv]) == 0
    return table, page, stdout.getvalue()


def test_the_table_holds_both_continuations_and_their_scores(written):
    table, _, stdout = written
    df = pd.read_csv(table)
    assert list(df["clean_id"]) == [41, 50, 20, 8, 45, 28]  # the repeat, continued
    first = df[df["first_difference"]]
    assert list(first["step"]) == [0]  # without L1H1 the repeat is lost at once
    # each token under the model that wrote it and under the other one
    assert (df["clean_logprob"] > df["clean_logprob_edited"]).all()
    meta = json.loads(table.with_name("gen.meta.json").read_text())
    assert "compare_generations" in json.dumps(meta)
    assert "first difference at new token 0" in stdout and "estimate:" in stdout


@pytest.mark.browser
def test_the_page_marks_the_first_difference_in_chromium(written, chromium_paths):
    from browser import browser

    _, page, _ = written
    with browser(page, chromium_paths) as driver:
        marked = driver.execute_script(
            "return Array.from(document.querySelectorAll('.tok.first-diff')).map(e => "
            "[e.closest('td').dataset.name, e.dataset.step, e.getBoundingClientRect().width])"
        )
        cells = driver.execute_script("return document.querySelectorAll('td.continuation').length")
        logs = driver.get_log("browser")
    assert cells == 2
    assert sorted(m[0] for m in marked) == ["clean", "edited"]
    assert all(m[1] == "0" and m[2] > 0 for m in marked), marked
    assert [e for e in logs if e["level"] == "SEVERE"] == []


def test_a_hugging_face_folder_with_a_steering_vector(tmp_path, capsys):
    from transformers import GPT2Config, GPT2LMHeadModel

    from interp.models.hf_tokenizers import word_tokenizer

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=30)
    GPT2LMHeadModel(config).save_pretrained(tmp_path / "m")
    word_tokenizer(30).save_pretrained(tmp_path / "m")
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=32) * 5)
    out = tmp_path / "gen.md"
    rc, stdout, err = cli(
        capsys,
        ["generate", "--model", tmp_path / "m", "--prompt", "t3 t4 t5 t3 t4", "--steer",
         f"blocks.1.hook_resid_pre:{tmp_path / 'v.npy'}:4", "--positions", "new",
         "--max-new-tokens", "4", "--out", out],
    )  # fmt: skip
    assert rc == 0, err
    assert "add 4 x a vector at blocks.1.hook_resid_pre (new positions)" in stdout
    assert out.is_file()


def _vector(tmp_path, n):
    path = tmp_path / f"v{n}.npy"
    np.save(path, np.ones(n))
    return path


BAD = [
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--temperature", "nan"], "--temperature must be >= 0"),
    (["--top-p", "1.5", "--temperature", "1"], "--top-p must be (0, 1]"),
    (["--top-p", "0", "--temperature", "1"], "--top-p must be (0, 1]"),
    (["--top-k", "3"], "give --temperature above 0"),
    (["--max-new-tokens", "0"], "must be >= 1"),
    (["--max-new-tokens", "40"], "goes past the model's context of 48 tokens"),
    (["--ablate", "L7H0"], "layer"),
    (["--steer", "blocks.0.hook_resid_pre:v.npy"], "is not HOOK:VECTOR_FILE:SCALE"),
    (["--steer", "blocks.0.hook_resid_pre:missing.npy:2"], "no vector file"),
    (["--steer", "blocks.9.hook_resid_pre:{v128}:2"], "is not a hook of this model"),
    (["--steer", "blocks.0.hook_resid_pre:{v7}:2"], "carries (128,) per position"),
    (["--stop", "t5"], "this model has no tokenizer"),
]


@pytest.mark.parametrize("extra, message", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_before_any_work(tmp_path, capsys, extra, message):
    v = {"v7": _vector(tmp_path, 7), "v128": _vector(tmp_path, 128)}
    extra = [e.format(**v) for e in extra]
    if not any(e.startswith("--ablate") or e.startswith("--steer") for e in extra):
        extra = ["--ablate", "L1H1", *extra]
    out = tmp_path / "gen.csv"
    rc, _, err = cli(capsys, ["generate", "--prompt", PROMPT, *extra, "--out", out])
    assert rc == 2, err
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()


def test_a_prompt_past_the_context_and_no_edit_are_refused(tmp_path, capsys):
    out = tmp_path / "gen.csv"
    long = " ".join(["5"] * 60)
    rc, _, err = cli(capsys, ["generate", "--prompt", long, "--ablate", "L1H1", "--out", out])
    assert rc == 2 and "exceeds the model's context n_ctx=48" in err, err
    rc, _, err = cli(capsys, ["generate", "--prompt", PROMPT, "--out", out])
    assert rc == 2 and "nothing to compare" in err, err
    assert not out.exists()

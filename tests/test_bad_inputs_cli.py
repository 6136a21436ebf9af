"""Bad input on the command line, and interrupted writes: refused before any work, all or nothing.

* every option is checked before anything is written (``dla --by layer --figure``);
  a command's outputs (table, sidecar, figure, circuit) are computed first and then
  written together, so a failure or Ctrl-C leaves every old file or every new one;
* a Hugging Face folder without its tokenizer is refused when it loads;
* one rule for typed tokens: digits only is an id, anything else one token of text;
* what needs only the tokenizer is checked before the weights load;
* integers are parsed strictly: a float (or ``1_0``) is refused, never rounded.
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from interp import InterpError
from interp.cli import main
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir

PROMPT = "0 5 6 7 8 5 6 7"


def one_line(capsys, argv, message, code=2):
    capsys.readouterr()  # what building the test's folders printed
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == code, err
    assert message in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def gpt2_dir(folder, *, tokenizer=True, damaged=False, word_config=False):
    """A small GPT-2 folder as a user saves one; ``damaged`` truncates its weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from interp.models.hf_tokenizers import word_tokenizer

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=30, bos_token_id=0,
        eos_token_id=1,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(folder)
    if tokenizer:
        word_tokenizer(30).save_pretrained(folder)
    if word_config:
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, "interp_tokenizer": "word"}))
    if damaged:
        w = folder / "model.safetensors"
        w.write_bytes(w.read_bytes()[:100])
    return folder


def listing(d):
    return sorted(p.name for p in Path(d).iterdir())


# ------------------------------------------------ 1. every option first, then all outputs
def test_dla_figure_needs_by_head_before_anything_is_written(tmp_path, capsys):
    argv = ["dla", "--prompt", PROMPT, "--answer", "8", "--by", "layer", "--out",
            tmp_path / "t.csv", "--figure", tmp_path / "f.svg"]  # fmt: skip
    one_line(capsys, argv, "needs --by head (not --by layer)")
    assert listing(tmp_path) == []  # before: t.csv and t.meta.json were written first


def test_a_figure_that_fails_leaves_no_table(tmp_path, capsys, monkeypatch):
    """Drawing fails after the analysis: the table is not written without its figure."""
    import interp.experiments.common as common

    def broken(*args, **kwargs):
        raise InterpError("cannot draw this")

    monkeypatch.setattr(common, "lens_figure", broken)
    argv = ["lens", "--prompt", PROMPT, "--out", tmp_path / "l.csv", "--figure",
            tmp_path / "l.svg"]  # fmt: skip
    one_line(capsys, argv, "cannot draw this")
    assert listing(tmp_path) == []


def test_circuit_outputs_are_checked_distinct_and_written_together(tmp_path, capsys, monkeypatch):
    import interp.outputs.figures as figures

    out, table = tmp_path / "c.json", tmp_path / "c.csv"
    one_line(capsys, ["circuit", "--out", out, "--table", out], "would write the same file")
    sidecar = tmp_path / "c.meta.json"
    one_line(capsys, ["circuit", "--out", sidecar, "--table", table], "would write the same file")
    assert listing(tmp_path) == []

    def broken(*args, **kwargs):
        raise InterpError("cannot draw this circuit")

    monkeypatch.setattr(figures, "circuit_figure", broken)
    argv = ["circuit", "--n", "4", "--method", "eap", "--out", out, "--table", table,
            "--figure", tmp_path / "c.svg"]  # fmt: skip
    one_line(capsys, argv, "cannot draw this circuit")
    assert listing(tmp_path) == []  # before: the circuit and its table were already written


# ------------------------------------------------ 2. Ctrl-C: every old file or every new one
OLD = {"c.json": "old circuit", "e.csv": "old,table\n", "e.meta.json": "{}", "c.svg": "<svg/>"}


@pytest.fixture
def old_outputs(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    for name, text in OLD.items():
        (d / name).write_text(text)
    argv = ["circuit", "--n", "4", "--method", "eap", "--out", d / "c.json", "--table",
            d / "e.csv", "--figure", d / "c.svg"]  # fmt: skip
    return d, [str(a) for a in argv]


def assert_old(d):
    assert listing(d) == sorted(OLD)  # no temporary file or folder left
    assert {name: (d / name).read_text() for name in OLD} == OLD


def test_circuit_interrupted_while_computing_keeps_the_old_files(old_outputs, monkeypatch, capsys):
    import interp.analysis.circuits.search as search

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search, "find_circuit", interrupted)
    d, argv = old_outputs
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    assert_old(d)


def test_circuit_interrupted_while_writing_keeps_the_old_files(old_outputs, monkeypatch, capsys):
    """Ctrl-C as the last file (the figure) is written: the circuit and its table, written
    just before, do not replace the old ones (before: a new circuit and table, an old figure)."""
    import interp.outputs.files as files

    real = files.write_text

    def write_text(path, text):
        if Path(path).suffix == ".svg":
            raise KeyboardInterrupt
        return real(path, text)

    monkeypatch.setattr(files, "write_text", write_text)
    d, argv = old_outputs
    assert main(argv) == 130
    assert_old(d)


def test_circuit_interrupted_between_the_final_moves_puts_the_old_files_back(
    old_outputs, monkeypatch, capsys
):
    d, argv = old_outputs
    real, moved = os.replace, []

    def replace(src, dst):
        if Path(dst).parent == d:
            moved.append(dst)
            if len(moved) == 2:  # the first new file is in place
                raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert main(argv) == 130
    monkeypatch.undo()
    assert_old(d)


def test_an_uninterrupted_circuit_replaces_every_file(old_outputs, capsys):
    d, argv = old_outputs
    assert main(argv) == 0
    assert listing(d) == sorted(OLD)
    assert json.loads((d / "c.json").read_text())["format"] == "interp-circuit"
    assert (d / "c.svg").read_text().startswith("<svg")
    meta = json.loads((d / "e.meta.json").read_text())
    assert meta["table"] == "e.csv"  # the sidecar names the table, not a temporary file


def test_write_files_is_all_or_nothing(tmp_path):
    from interp.outputs.files import atomic_files, write_files

    (tmp_path / "a.txt").write_text("old a")

    def half(path):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_files({tmp_path / "a.txt": lambda p: p.write_text("new a"), tmp_path / "b.txt": half})
    assert listing(tmp_path) == ["a.txt"] and (tmp_path / "a.txt").read_text() == "old a"
    with pytest.raises(InterpError, match="are the same file"):
        with atomic_files(tmp_path / "a.txt", tmp_path / "." / "a.txt"):
            pass
    sub = tmp_path / "sub"
    sub.mkdir()

    def with_sidecar(path):
        path.write_text("b")
        path.with_name("b.meta.json").write_text("{}")

    write_files({tmp_path / "a.txt": lambda p: p.write_text("new a"), sub / "b.txt": with_sidecar})
    assert (tmp_path / "a.txt").read_text() == "new a"
    assert listing(tmp_path) == ["a.txt", "sub"] and listing(sub) == ["b.meta.json", "b.txt"]


# ------------------------------------------------ 3. a Hugging Face folder needs its tokenizer
def test_a_folder_without_its_tokenizer_is_refused_at_load(tmp_path, capsys):
    from interp.models import load_model
    from interp.models.loader import load_tokenizer

    d = gpt2_dir(tmp_path / "g", tokenizer=False)
    for call in (load_model, load_tokenizer):
        with pytest.raises(
            InterpError, match=r"has no tokenizer files .*tokenizer.save_pretrained"
        ):
            call(d)  # before: loaded, and encoded every prompt to []
    out = tmp_path / "t.csv"
    argv = ["dla", "--model", d, "--prompt", "hello world", "--answer", "5", "--out", out]
    one_line(capsys, argv, "has no tokenizer files")
    one_line(capsys, ["scores", "--model", d, "--out", out], "has no tokenizer files")
    assert not out.exists()


def test_the_tokenizer_refusal_comes_before_the_weights(tmp_path):
    from interp.models import load_model

    d = gpt2_dir(tmp_path / "g", tokenizer=False, damaged=True)
    with pytest.raises(InterpError, match="has no tokenizer files"):
        load_model(d)
    (d / "tokenizer_config.json").write_text('{"tokenizer_class": "GPT2Tokenizer"}')
    with pytest.raises(InterpError, match="encodes text to no tokens"):
        load_model(d)  # a tokenizer without its vocabulary files


def test_models_that_need_no_tokenizer_files_keep_loading(tmp_path):
    from interp.models import load_model
    from interp.models.hf import random_gpt2
    from interp.models.loader import load_tokenizer

    toy = load_model(gpt2_dir(tmp_path / "w", tokenizer=False, word_config=True))
    assert toy.to_tokens("t5 t12").tolist() == [[0, 5, 12]]
    assert load_tokenizer(tmp_path / "w")("t5")["input_ids"] == [5]
    assert load_tokenizer("induction-2l") is None  # our checkpoints: prompts are ids
    assert load_model("induction-2l").cfg.n_layers == 2
    assert random_gpt2(1, vocab=30).to_tokens("t3").tolist() == [[0, 3]]
    assert load_tokenizer("minilm-l6")("the bank")["input_ids"]
    bad = tmp_path / "w" / "config.json"
    bad.write_text(json.dumps({**json.loads(bad.read_text()), "interp_tokenizer": "bpe"}))
    with pytest.raises(InterpError, match='the only value is "word"'):
        load_model(tmp_path / "w")


# ------------------------------------------------ 4. one rule for typed tokens
def test_digits_only_is_an_id_and_anything_else_is_one_token_of_text():
    from interp.cli.args import is_token_id, pair_arg
    from interp.cli.inputs import token_id
    from interp.models.hf_tokenizers import word_tokenizer

    tok = word_tokenizer(30)
    assert [is_token_id(t) for t in ("7", " 7 ", "-1", "7.0", "t7", "")] == [
        True, True, False, False, False, False,
    ]  # fmt: skip
    assert token_id(tok, "12") == 12  # an id, not the word "12" (not in this vocabulary)
    assert token_id(tok, " 12 ") == token_id(None, "12") == 12
    assert token_id(tok, "t12") == 12
    with pytest.raises(InterpError, match=r"--answer '-1' is text \(not a token id\)"):
        token_id(None, "-1", "--answer")  # before: the id -1, refused only after loading
    with pytest.raises(InterpError, match="with the digits 0-9"):
        token_id(None, "\u0663", "--answer")  # an Arabic-Indic 3: before, silently the id 3
    with pytest.raises(InterpError, match=r"'t5 t6' is 2 tokens"):
        token_id(tok, "t5 t6")
    assert pair_arg(" Mary, John") == (" Mary", " John")
    for same in ("05,5", "5, 5", "Mary,Mary"):
        with pytest.raises(InterpError, match="same token twice"):
            pair_arg(same)
    pair_arg("\u00b2,2")  # a superscript 2 is no id: before, int() raised a ValueError


def test_the_cli_reads_typed_tokens_as_the_api_does(tmp_path, capsys):
    from interp import read_table
    from interp.analysis import direct_logit_attribution
    from interp.models import load_model

    d = gpt2_dir(tmp_path / "g")
    model = load_model(d)
    tokens = model.to_tokens("t2 t3 t4")
    out = tmp_path / "t.csv"
    for answer, wrong in [("7", " 8 "), ("t7", " t8"), ("7", "t9")]:
        argv = ["dla", "--model", d, "--prompt", "t2 t3 t4", "--answer", answer, "--wrong",
                wrong, "--out", out, "--top", "0"]  # fmt: skip
        assert main([str(a) for a in argv]) == 0
        want = direct_logit_attribution(model, tokens, answer=answer, wrong=wrong)
        np.testing.assert_allclose(read_table(out)["value"], want["value"], rtol=1e-5)
    ckpt = load_model("induction-2l")
    with pytest.raises(InterpError, match="is text") as api:
        direct_logit_attribution(ckpt, torch.tensor([[0, 5, 6]]), answer="-1")
    argv = ["dla", "--prompt", "0 5 6", "--answer", "-1", "--out", tmp_path / "n.csv"]
    err = one_line(capsys, argv, "--answer '-1' is text (not a token id)")  # before: an id
    assert str(api.value).split("'-1'")[1].split(";")[0] in err  # the API's words
    assert not (tmp_path / "n.csv").exists()


def test_a_word_and_its_id_are_the_same_token(tmp_path, capsys):
    d = gpt2_dir(tmp_path / "g")
    argv = ["dla", "--model", d, "--prompt", "t2 t3", "--answer", "t7", "--wrong", "7",
            "--out", tmp_path / "t.csv"]  # fmt: skip
    one_line(capsys, argv, "are the same token (id 7)")
    argv = ["patch", "--model", d, "--clean", "t2 t3", "--corrupted", "t2 t4", "--logit-diff",
            "t5, 5", "--out", tmp_path / "t.csv"]  # fmt: skip
    one_line(capsys, argv, "are the same token (id 5)")


@pytest.mark.parametrize(
    "command, option",
    [("dla", "--answer"), ("dla", "--wrong"), ("lens", "--target"), ("attention", "--answer"),
     ("patch", "--logit-diff"), ("ablate", "--logit-diff"), ("circuit", "--logit-diff"),
     ("paths", "--logit-diff")],
)  # fmt: skip
def test_help_states_the_rule(capsys, command, option):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    options = text[text.index("options:") :]
    after = options[options.index(f"{option} ") :]
    assert "digits only (7, spaces around ignored) is a token id" in after[:400], after[:400]


# ------------------------------------------------ 5. tokenizer-only checks before the weights
@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A GPT-2 folder with its tokenizer and truncated weights, and a damaged checkpoint."""
    d = tmp_path_factory.mktemp("damaged")
    ckpt = d / "ckpt"
    shutil.copytree(data_dir() / INDUCTION_CHECKPOINT, ckpt)
    w = ckpt / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    return gpt2_dir(d / "g", damaged=True), ckpt


TOKENIZER_FIRST = [
    (["patch", "--model", "{g}", "--clean", "t2 t3", "--corrupted", "t2 t3 t4",
      "--logit-diff", "t5,t6"], "must have the same length"),
    (["attribute", "--model", "{g}", "--ablation", "patch", "--prompt", "t2 t3", "--corrupted",
      "t2", "--metric", "logit-diff", "--logit-diff", "5,6"], "must have the same length"),
    (["patch", "--model", "{g}", "--clean", "t2 t3", "--corrupted", "t2 t4",
      "--logit-diff", "5,6", "--component", "resid_pre", "--by", "head"],
     "one vector per layer"),
    (["ablate", "--model", "{g}", "--prompt", "t2 t3", "--positions", "5"],
     "--positions [5] out of range"),
    (["ablate", "--model", "{ckpt}", "--prompt", "hello there"], "this model has no tokenizer"),
    (["scores", "--model", "{ckpt}", "--prompt", "hello there"], "this model has no tokenizer"),
    (["dla", "--model", "{g}", "--prompt", "t2 t3", "--answer", "t5 t6"], "is 2 tokens"),
    (["dla", "--model", "{g}", "--prompt", "t2 t3", "--answer", "5", "--at", "4"],
     "--at [4] out of range"),
    (["lens", "--model", "{g}", "--prompt", "t2 t3", "--target", "t5 t6"], "is 2 tokens"),
    (["attention", "--model", "{g}", "--prompt", "t2 t3", "--answer", "t5 t6"], "is 2 tokens"),
    (["circuit", "--model", "{g}", "--clean", "t2 t3", "--corrupted", "t2 t3 t4",
      "--metric", "loss"], "each corrupted twin needs its clean prompt's token count"),
    (["paths", "--model", "{g}", "--receivers", "L1H1.x"], "--receivers label 'L1H1.x' is not one"),
    (["paths", "--model", "{g}", "--senders", "L0H1,unembed"], "--senders label 'unembed'"),
    (["attention", "--model", "{g}", "--prompt", "t2 t3", "--heads", "L1X2"],
     "--heads label 'L1X2' is not of the form L<layer>H<head>"),
    (["ablate", "--model", "{g}", "--heads", "L0H1,1.4"], "--heads label '1.4' is not of the form"),
]  # fmt: skip


@pytest.mark.parametrize(
    "argv, message", TOKENIZER_FIRST, ids=[f"{a[0]}: {m}" for a, m in TOKENIZER_FIRST]
)
def test_tokenizer_only_checks_come_before_the_weights_load(
    damaged, tmp_path, capsys, argv, message
):
    """Every case would otherwise fail on the damaged weights ("damaged or incomplete")."""
    g, ckpt = damaged
    name = {"circuit": "c.json", "attention": "a.html"}.get(argv[0], "t.csv")
    argv = [a.format(g=g, ckpt=ckpt) for a in argv] + ["--out", str(tmp_path / name)]
    err = one_line(capsys, argv, message)
    assert "damaged" not in err and "incomplete" not in err, err
    assert listing(tmp_path) == []


# ------------------------------------------------ 6. integers are integers
def test_floats_and_odd_integers_are_refused_naming_the_option(tmp_path, capsys):
    out = tmp_path / "t.csv"
    (tmp_path / "u.txt").write_text("0 5 6\n0 1_0 7\n")
    np.save(tmp_path / "big.npy", np.array([[0, 2**64 - 1]], dtype=np.uint64))
    cases = [
        (["ablate", "--out", out, "--positions", "1.0"], "--positions must be comma-separated",
         "'1.0' is a float"),
        (["dla", "--prompt", PROMPT, "--answer", "8", "--at", "2.5", "--out", out],
         "--at must be comma-separated integers", "is a float"),
        (["ablate", "--out", out, "--prompt", "0 5.0 6"], "give the prompt as token ids",
         "'5.0' is not one"),
        (["ablate", "--out", out, "--prompt", "0 1_0 6"], "give the prompt as token ids",
         "'1_0' is not one"),  # before: int("1_0") == 10
        (["ablate", "--out", out, "--tokens", tmp_path / "u.txt"], "must hold integer token ids",
         "'1_0' is not one"),
        (["ablate", "--out", out, "--tokens", tmp_path / "big.npy"], "beyond any vocabulary", ""),
    ]  # fmt: skip
    for argv, message, detail in cases:
        assert detail in one_line(capsys, argv, message)
    for argv, message in [
        (["ablate", "--out", out, "--top", "2.5"], "argument --top: expected an integer, got the "
         "float '2.5'"),
        (["ablate", "--out", out, "--top", "1_0"], "argument --top: expected an integer"),
        (["circuit", "--out", out, "--steps", "2.0"], "argument --steps: expected an integer"),
        (["lab", "induction", "--seed", "1e3"], "argument --seed: seed must be an integer, got "
         "the float '1e3'"),
    ]:  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main([str(a) for a in argv])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and message in err and len(err.splitlines()) == 1, err
    assert listing(tmp_path) == ["big.npy", "u.txt"]

"""Options given twice, and the cost options of ``dla``, ``lens`` and ``atlas``.

* An option that takes one value, given twice, is one line on stderr and exit 2, naming
  the option and how to give several, before any model or tokenizer loads; nothing is
  written. Every option of every command is tried, so a new option cannot slip back
  to argparse's "the last one wins".
* ``--clean`` / ``--corrupted`` (with ``--logit-diff``) append in pairs, on ``patch`` as on
  ``circuit`` and ``paths``: the pairs are one batch, as the API takes it.
* ``dla``, ``lens`` and ``atlas`` print their cost, ``--estimate`` stops there (no forward
  pass, nothing written) and ``--memory`` is the budget the analysis plans under.
"""

import argparse
import re
from pathlib import Path

import pytest
import torch

import interp
from interp.cli import build_parser, main

PROMPT = "0 5 6 7 8 5 6 7"
# The options that may be given more than once, and append: everything else takes one value.
APPENDING = {
    (command, option)
    for command in ("patch", "circuit", "paths")
    for option in ("--clean", "--corrupted", "--logit-diff")
} | {("lab", "--model"), ("generate", "--steer")}


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading a model or a tokenizer fails the test: the input alone shows the problem."""
    import interp.models.loader as loader

    def loaded(*args, **kwargs):
        raise AssertionError("a model or tokenizer loaded before the refusal")

    monkeypatch.setattr(loader, "load_model", loaded)
    monkeypatch.setattr(loader, "load_tokenizer", loaded)


@pytest.fixture
def forwards(monkeypatch):
    """``calls()``: forward passes of every model the CLI loads during the test."""
    import interp.models.loader as loader

    original, count, handles = loader.load_model, [0], []

    def load_model(*args, **kwargs):
        model = original(*args, **kwargs)
        hook = lambda module, inputs: count.__setitem__(0, count[0] + 1)  # noqa: E731
        handles.append(model.blocks[0].register_forward_pre_hook(hook))
        return model

    monkeypatch.setattr(loader, "load_model", load_model)
    yield lambda: count[0]
    for h in handles:
        h.remove()


def commands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def value(action, tmp_path, n):
    """A value ``action`` accepts (the ``n``-th of two that differ, where it can)."""
    if action.choices:
        return str(list(action.choices)[min(n, len(action.choices) - 1)])
    if action.type is None:
        return str(tmp_path / f"v{n}.csv")
    for text in (str(n + 2), f"{n + 1}GiB"):
        try:
            action.type(text)
            return text
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    raise AssertionError(f"no test value for {action.option_strings}")


def value_options():
    """``(command, option)`` of every option that takes a value, in every command."""
    return [
        (name, max(a.option_strings, key=len))
        for name, p in commands().items()
        for a in p._actions
        if a.option_strings and a.nargs != 0
    ]


VALUE_OPTIONS = value_options()


def argv_repeating(command, option, tmp_path):
    """``command`` with every required argument, and ``option`` twice with valid values:
    without the repeat, this parses."""
    p = commands()[command]
    argv = [command]
    for a in p._actions:
        if not a.option_strings and a.nargs != 0:  # a positional (lab NAME, train WHAT)
            argv.append(value(a, tmp_path, 0))
        elif a.required and option not in a.option_strings:
            argv += [a.option_strings[0], value(a, tmp_path, 0)]
    action = p._option_string_actions[option]
    return argv + [option, value(action, tmp_path, 0), option, value(action, tmp_path, 1)]


@pytest.mark.parametrize("command, option", VALUE_OPTIONS, ids=[" ".join(c) for c in VALUE_OPTIONS])
def test_a_repeated_single_value_option_is_refused_not_silently_replaced(
    command, option, tmp_path, capsys, nothing_loads
):
    """A repeated single-value option silently kept the last one: argparse kept the second
    ``--prompt`` (or ``--heads``, ``--clean``...) and the command ran on it, exit 0. Now the
    second is refused at once, unless the option appends (then both are kept)."""
    argv = argv_repeating(command, option, tmp_path)
    build_parser().parse_args(argv[:-2])  # once, it parses: the repeat is the only problem
    parser = commands()[command]
    if (command, option) in APPENDING:
        assert isinstance(parser._option_string_actions[option], argparse._AppendAction)
        args = build_parser().parse_args(argv)
        assert getattr(args, parser._option_string_actions[option].dest) == argv[-3::2]
        return
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2, err
    assert err.startswith(f"interp: error: argument {option}: given twice, but it takes one"), err
    assert len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_every_option_given_twice_was_tried():
    """The list above covers the options the issue names, and every command."""
    tried = set(VALUE_OPTIONS)
    named = [("patch", "--clean"), ("dla", "--prompt"), ("lens", "--prompt"),
             ("ablate", "--prompt"), ("atlas", "--heads"), ("attention", "--prompt")]  # fmt: skip
    assert set(named) <= tried
    assert {c for c, _ in tried} == set(commands()) - {"models"}  # models takes no option


REFUSED = [
    (["dla", "--prompt", PROMPT, "--prompt", "0 5 6", "--answer", "8"], "--prompt",
     "it takes one prompt: run the command once per prompt"),
    (["lens", "--prompt", PROMPT, "--prompt", "0 5 6"], "--prompt", "once per prompt"),
    (["ablate", "--prompt", PROMPT, "--prompt", "0 5 6"], "--prompt",
     "give several as a --tokens file"),
    (["atlas", "--heads", "L0H1", "--heads", "L1H1"], "--heads",
     "name several heads in one, comma-separated (--heads L1H4,L0H7)"),
    (["ablate", "--positions", "3", "--positions", "-1"], "--positions", "--positions 3,-1"),
    (["dla", "--prompt", PROMPT, "--answer", "8", "--answer", "9"], "--answer",
     "it takes one value: give it once"),
    (["ablate", "--prom", PROMPT, "--prompt=0 5 6"], "--prompt", "takes one prompt"),
    (["ablate", "--metric", "loss", "--metric", "logit-diff", "--logit-diff", "5,6"],
     "--metric", "give it once"),
]  # fmt: skip


@pytest.mark.parametrize("argv, option, how", REFUSED, ids=[" ".join(a[:3]) for a, _, _ in REFUSED])
def test_the_repeats_of_the_issue_say_how_to_give_several(
    argv, option, how, tmp_path, capsys, nothing_loads
):
    out = str(tmp_path / ("a.html" if argv[0] == "atlas" else "t.csv"))
    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", out])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"argument {option}: given twice" in err and how in err, err
    assert list(tmp_path.iterdir()) == []


def test_repeated_pairs_on_patch_are_one_batch(tmp_path, capsys):
    """A repeated single-value option silently kept the last one: ``patch --clean A
    --corrupted B --clean C --corrupted D`` measured the second pair only. It is now the
    batch of both pairs, as ``patch_heads`` on both gives it, with one answer pair per
    prompt pair (``--logit-diff`` once per pair, as on ``circuit``)."""
    from interp.analysis import patch_heads
    from interp.core.metrics import logit_diff_metric
    from interp.models import load_model

    pairs = [("0 5 6 7 5 6", "0 5 6 7 8 9"), ("0 9 3 4 9 3", "0 9 3 4 2 8")]
    answers = [("7", "9"), ("4", "8")]
    out = tmp_path / "p.csv"
    argv = ["patch", "--out", str(out)]
    for (c, k), (a, w) in zip(pairs, answers, strict=True):
        argv += ["--clean", c, "--corrupted", k, "--logit-diff", f"{a},{w}"]
    assert main(argv) == 0
    got = interp.read_table(out).set_index("label")
    model = load_model("induction-2l")
    ids = lambda texts: torch.tensor([[int(x) for x in t.split()] for t in texts])  # noqa: E731
    metric = logit_diff_metric(torch.tensor([7, 4]), torch.tensor([9, 8]))
    clean, corrupted = ids([c for c, _ in pairs]), ids([k for _, k in pairs])
    both = patch_heads(model, clean, corrupted_tokens=corrupted, metric=metric).set_index("label")
    second = patch_heads(model, ids([pairs[1][0]]), corrupted_tokens=ids([pairs[1][1]]),
                         metric=logit_diff_metric(4, 8)).set_index("label")  # fmt: skip
    for label in both.index:
        assert got.at[label, "patched"] == pytest.approx(both.at[label, "patched"], abs=1e-5)
    assert got["clean"].iloc[0] == pytest.approx(both["clean"].iloc[0], abs=1e-5)
    assert abs(got["clean"].iloc[0] - second["clean"].iloc[0]) > 0.1  # not the last pair alone
    assert got.attrs["inputs"] == " ".join(f"--clean {c!r} --corrupted {k!r}" for c, k in pairs)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--clean", "0 5 6", "--corrupted", "0 5 7", "--clean", "0 5 8"],
         "2 --clean and 1 --corrupted prompts: give them in pairs"),
        (["--clean", "0 5 6", "--corrupted", "0 5 7", "--clean", "0 5 8", "--corrupted", "0 5 9",
          "--logit-diff", "6,7", "--logit-diff", "8,9", "--logit-diff", "5,6"],
         "3 --logit-diff pairs for 2 prompts"),
        (["--clean", "0 5 6", "--corrupted", "0 5 7", "--clean", "0 5 8 1", "--corrupted",
          "0 5 9 1", "--logit-diff", "6,7"], "the prompt pairs are [3, 4] tokens long"),
        (["--clean", "0 5 6", "--corrupted", "0 5 7", "--clean", "0 5 8", "--corrupted",
          "0 5", "--logit-diff", "6,7"], "the clean prompt 2 is 3 tokens and its corrupted twin 2"),
    ],
)  # fmt: skip
def test_patch_pairs_are_checked_before_the_weights_load(tmp_path, capsys, extra, message):
    assert main(["patch", *extra, "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------ --memory / --estimate on dla, lens, atlas
def printed_estimate(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("estimate: ")]
    assert len(lines) == 1, out
    return lines[0].removeprefix("estimate: ")


def test_dla_lens_and_atlas_estimate_runs_nothing_and_writes_nothing(tmp_path, capsys, forwards):
    from interp.analysis import direct_logit_attribution, logit_lens, probe_tokens
    from interp.analysis.heads.atlas.table import measure_atlas
    from interp.models import load_model

    model = load_model("induction-2l")
    tokens = torch.tensor([[int(x) for x in PROMPT.split()]])
    budget = 8 * 2**20
    expected = {
        "dla": direct_logit_attribution(model, tokens, answer=8, memory_budget=budget,
                                        estimate=True),
        "lens": logit_lens(model, tokens, memory_budget=budget, estimate=True),
        "atlas": measure_atlas(model, probe_tokens(model, n=4, seed=0), memory_budget=budget,
                               estimate=True),
    }  # fmt: skip
    assert expected["atlas"].chunks > 1  # the budget reaches the plan: the probe is split
    runs = {
        "dla": ["dla", "--prompt", PROMPT, "--answer", "8", "--out", tmp_path / "d.csv"],
        "lens": ["lens", "--prompt", PROMPT, "--out", tmp_path / "l.csv"],
        "atlas": ["atlas", "--batch", "4", "--out", tmp_path / "a.html"],
    }
    for command, argv in runs.items():
        capsys.readouterr()
        assert main([str(a) for a in argv] + ["--memory", "8MiB", "--estimate"]) == 0
        assert printed_estimate(capsys.readouterr().out) == str(expected[command]), command
    assert forwards() == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["dla", "--prompt", PROMPT, "--answer", "8", "--out", "{d}/d.csv"],
        ["lens", "--prompt", PROMPT, "--out", "{d}/l.csv"],
        ["atlas", "--batch", "4", "--out", "{d}/a.html"],
    ],
    ids=lambda a: a[0],
)
def test_dla_lens_and_atlas_refuse_work_past_the_memory_budget(tmp_path, capsys, forwards, argv):
    argv = [a.replace("{d}", str(tmp_path)) for a in argv] + ["--memory", "1KiB"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "more than the memory budget" in err and len(err.splitlines()) == 1, err
    assert forwards() == 0
    assert list(tmp_path.iterdir()) == []


def test_dla_and_lens_print_their_cost_and_run_under_the_budget(tmp_path, capsys):
    for command, extra in (("dla", ["--answer", "8"]), ("lens", [])):
        tables = []
        for memory in ([], ["--memory", "1GiB"]):
            out = tmp_path / f"{command}{len(memory)}.csv"
            capsys.readouterr()
            assert main([command, "--prompt", PROMPT, *extra, "--out", str(out), *memory]) == 0
            said = printed_estimate(capsys.readouterr().out)
            assert said.startswith(("direct_logit_attribution: 1 prompts", "logit_lens: 1 prompts"))
            assert ("budget 1.00 GiB" in said) == bool(memory), said
            tables.append(interp.read_table(out))
        assert tables[0].equals(tables[1]), command


# ------------------------------------- the synopsis (docs/cli.md) names every option
def synopsis():
    """``{command: its synopsis lines, groups (INPUT, COST, ...) spelled out}``."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    block = text.split("```bash\n")[1].split("```")[0]
    entries, key = {}, None
    for line in block.splitlines():
        start = re.match(r"(interp (\w+)|([A-Z]+):)", line)
        if start:
            key = start.group(2) or start.group(3)
            entries[key] = f"{entries.get(key, '')} {line}"  # train induction, train dictionary
        elif line.strip():
            entries[key] += " " + line.strip()
    groups = {k: v.split(":", 1)[1] for k, v in entries.items() if k.isupper()}
    out = {}
    for name, text in entries.items():
        if name.isupper():
            continue
        while any(re.search(rf"\b{g}\b", text) for g in groups):
            for g, definition in groups.items():
                text = re.sub(rf"\b{g}\b", definition, text)
        out[name] = text
    return out


def test_the_synopsis_names_every_option_of_every_command():
    lines = synopsis()
    for name, parser in commands().items():
        missing = [
            o
            for a in parser._actions
            for o in a.option_strings
            if o not in ("-h", "--help") and not re.search(rf"{re.escape(o)}(?![\w-])", lines[name])
        ]
        assert not missing, f"docs/cli.md's `interp {name}` lacks {missing}"

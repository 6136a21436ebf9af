"""The README's Python example runs as a script, prints its results, and says what they are."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _row(table: str, label: str) -> list[str]:
    return next(line.split() for line in table.splitlines() if f" {label} " in line)


def test_the_python_example_prints_the_numbers_the_readme_quotes(tmp_path):
    text = README.read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    (tmp_path / "example.py").write_text(code)
    out = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    tables = [t for t in out.split("   layer") if t.strip()]  # each printed table's header
    assert len(tables) == 4 and out.strip().endswith("nats (mean next-token cross-entropy)")
    said = text[text.index("It prints four tables") :].split("\n\n")[0]
    quoted = re.findall(r"(L\dH\d) scores ([0-9.]+) and (?:ablating it )?costs ([0-9.]+)", said)
    assert [h for h, _, _ in quoted] == ["L1H1", "L0H1"]
    score_column = {"L1H1": 4, "L0H1": 5}  # index, layer, head, label, induction, previous_token
    for head, score, cost in quoted:
        assert f"{float(_row(tables[0], head)[score_column[head]]):.3f}" == score, head
        assert f"{float(_row(tables[2], head)[-1]):.3f}" == cost, head  # the effect column
    assert (tmp_path / "ablation.csv").is_file() and (tmp_path / "ablation.meta.json").is_file()


def test_one_glossary_for_the_readme_and_help():
    """The README's vocabulary table is interp.core.glossary, as help(interp.analysis) shows it."""
    import interp.analysis
    from interp.core.glossary import GLOSSARY, markdown, rst

    assert markdown() in README.read_text()
    assert rst() in interp.analysis.__doc__
    for word in GLOSSARY:
        assert f"``{word.split(',')[0].strip()}``" in interp.analysis.__doc__

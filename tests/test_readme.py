"""The README is the front door: short, its links resolve into the site, its Python example
runs as a script and prints what it says, and what it quotes from the pages is on them."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs"


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


def test_one_glossary_for_the_vocabulary_page_and_help():
    """The site's vocabulary table is interp.core.glossary (the page holds the marker the build
    replaces with it; tests/test_docs_site.py finds every word on the built page), and
    help(interp.analysis) shows the same glossary."""
    import interp.analysis
    from interp.core.glossary import GLOSSARY, rst

    assert "<!-- interp:glossary -->" in (DOCS / "vocabulary.md").read_text()
    assert rst() in interp.analysis.__doc__
    for word in GLOSSARY:
        assert f"``{word.split(',')[0].strip()}``" in interp.analysis.__doc__


def _slug(heading: str) -> str:
    """A heading's anchor as the site's table of contents writes it (Python-Markdown's slugify
    of the rendered text: code marks and link targets dropped)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no headings in code
    return {_slug(h) for h in re.findall(r"(?m)^#{1,6} (.+?)\s*$", text)}


def test_the_readme_is_a_front_door_whose_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", text)
    pages = {path for path, _ in links if path.endswith(".md")}
    assert len(pages) >= 10  # the "Where to go next" table links every question's page
    broken = []
    for path, anchor in links:
        target = README.parent / path
        if not target.is_file():
            broken.append(path)
        elif anchor and anchor not in _anchors(target):
            broken.append(f"{path}#{anchor}")
    assert not broken, f"README links that resolve to nothing: {broken}"
    for page in sorted(set(DOCS.glob("*.md")) - {DOCS / "index.md"}):  # the site's own front
        assert f"docs/{page.name}" in pages, f"the README does not link {page.name}"


def test_the_readme_names_every_command():
    import argparse

    from interp.cli import build_parser

    block = README.read_text().split("## Command line")[1].split("```bash\n")[1].split("```")[0]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    named = set(re.findall(r"(?:^interp |\| )(\w+)", block, re.M))
    assert set(sub.choices) <= named, sorted(set(sub.choices) - named)


def test_the_readme_labs_quote_the_labs_page():
    """Each lab's one-line answer in the README quotes numbers the labs page states for it."""
    text = README.read_text()
    labs = text.split("## Labs")[1].split("\n## ")[0]
    page = (DOCS / "labs" / "index.md").read_text()
    rows = {m[0]: m[1] for m in re.findall(r"(?m)^\| \[`([\w-]+)`\]\([^)]*\) \| (.*) \|$", page)}
    items = re.findall(r"(?ms)^\* `([\w-]+)`: (.*?)(?=^\* |\Z)", labs)
    assert sorted(lab for lab, _ in items) == sorted(rows)
    number = re.compile(r"[+-]?\d+(?:\.\d+)?(?:e-?\d+)?")
    for lab, said in items:
        quoted = number.findall(said)
        assert quoted, lab
        missing = [n for n in quoted if n not in number.findall(rows[lab])]
        assert not missing, f"the README's {lab} line quotes {missing}, not on the labs page"

"""Pages, or parts of pages, written at build time from the code, so they cannot drift.

* ``<!-- interp:glossary -->`` in a page becomes :func:`interp.core.glossary.markdown` (the
  vocabulary table), ``<!-- interp:retired -->`` the retired words;
* ``<!-- interp:help -->`` becomes every command's ``--help``, from the parser itself;
* every notebook in ``labs/`` becomes a page ``labs/<notebook>.md``: its prose and code, as
  committed (the notebooks are committed without outputs and are not executed here: the
  test suite runs each one), headed by the command that runs the same lab; the nav entry
  ``labs/index.md`` is expanded into the labs section.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's interp, whatever the environment has installed

LABS_ENTRY = "labs/index.md"
HELP_WIDTH = "100"


def glossary_table() -> str:
    from interp.core.glossary import markdown

    return markdown()


def retired_table() -> str:
    from interp.core.glossary import RETIRED

    rows = ["| retired word | use instead |", "| --- | --- |"]
    rows += [f"| `{old}` | {new} |" for old, new in RETIRED.items()]
    return "\n".join(rows)


def command_help() -> str:
    """Every command's ``--help``, one section each, in the parser's order."""
    import argparse

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps to COLUMNS: the same text everywhere
    try:
        from interp.cli import build_parser

        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parts = []
        for name, command in sub.choices.items():
            parts += [f"### `interp {name}`", "", "```text", command.format_help().rstrip(), "```"]
            parts.append("")
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(parts)


MARKERS = {
    "<!-- interp:glossary -->": glossary_table,
    "<!-- interp:retired -->": retired_table,
    "<!-- interp:help -->": command_help,
}


# ------------------------------------------------------------------------------- the labs
def _labs() -> list[tuple[str, str]]:
    """``(lab name, notebook stem)`` in the order ``interp.experiments.LABS`` lists the labs; a
    notebook of no lab is listed last, under its own name."""
    from interp.experiments import LABS

    stems = {p.stem for p in (ROOT / "labs").glob("*.ipynb")}
    order = [(name, pkg.rsplit(".", 1)[-1]) for name, (pkg, *_rest) in LABS.items()]
    known = [(name, stem) for name, stem in order if stem in stems]
    extra = sorted(stems - {stem for _, stem in known})
    return known + [(stem.replace("_", "-"), stem) for stem in extra]


def _title(nb: dict, stem: str) -> str:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return stem


def notebook_page(lab: str, stem: str) -> str:
    """A lab notebook as Markdown: its prose as written, its code cells as code blocks."""
    nb = json.loads((ROOT / "labs" / f"{stem}.ipynb").read_text())
    title = _title(nb, stem)
    lines = [
        f"# {title}",
        "",
        '!!! info "Run it"',
        f"    `interp lab {lab}` runs this lab and writes `reports/{lab}/`: `report.html`",
        "    (self-contained, renders offline), one CSV per table, one SVG per figure.",
        f"    `make notebooks` opens this notebook, `labs/{stem}.ipynb`, in JupyterLab; it",
        "    writes the same folder. This page shows the notebook's cells; the numbers they",
        "    print are in the lab's report and summarised on the [labs page](index.md).",
        "",
    ]
    dropped_title = False
    for cell in nb["cells"]:
        source = "".join(cell["source"]).rstrip()
        if not source:
            continue
        if cell["cell_type"] == "markdown":
            if not dropped_title and source.startswith(f"# {title}"):
                source = source[len(f"# {title}") :].lstrip("\n")
                dropped_title = True
            lines += [source, ""]
        elif cell["cell_type"] == "code":
            lines += ["```python", source, "```", ""]
    return "\n".join(lines)


_LAB_PAGES: list[tuple[str, str, str]] = []  # (title, uri, markdown)


def on_config(config):
    """Render the lab pages once; expand the labs nav entry into one item per lab."""
    _LAB_PAGES.clear()
    for lab, stem in _labs():
        text = notebook_page(lab, stem)
        _LAB_PAGES.append((text.splitlines()[0][2:], f"labs/{stem}.md", text))
    section = [LABS_ENTRY] + [{title: uri} for title, uri, _ in _LAB_PAGES]

    def expand(items):
        for item in items:
            if isinstance(item, dict):
                for title, value in item.items():
                    if value == LABS_ENTRY:
                        item[title] = section
                    elif isinstance(value, list):
                        expand(value)

    expand(config["nav"] or [])
    return config


def on_files(files, config):
    for _, uri, text in _LAB_PAGES:
        files.append(File.generated(config, uri, content=text))
    return files


def on_page_markdown(markdown, page, config, files):
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown

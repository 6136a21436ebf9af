"""Every lab notebook executes top to bottom (a cell error fails) and writes its lab's output.

Each notebook runs once per session (conftest.lab_run); the lab's own tests
read what it wrote.
"""

import json
from pathlib import Path

import pytest
from conftest import NOTEBOOKS

LABS = Path(__file__).resolve().parents[1] / "labs"


def test_every_notebook_belongs_to_a_lab():
    assert sorted(p.stem for p in LABS.glob("*.ipynb")) == sorted(NOTEBOOKS.values())


def test_notebooks_are_thin():
    """Notebooks call interp; they define no functions or classes of their own."""
    for path in LABS.glob("*.ipynb"):
        nb = json.loads(path.read_text())
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert "\ndef " not in "\n" + code and "\nclass " not in "\n" + code, path.name
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), (
            f"{path.name} is committed with outputs; clear them"
        )


@pytest.mark.notebook
@pytest.mark.parametrize("lab", list(NOTEBOOKS), ids=list(NOTEBOOKS.values()))
def test_notebook_runs_and_writes_its_lab(lab_run, lab):
    out = lab_run(lab)
    marker = json.loads((out / "interp-lab.json").read_text())
    assert marker["lab"] == lab
    assert (out / "report.html").is_file()
    for name in marker["tables"]:
        assert (out / f"{name}.csv").is_file(), name
    for name in marker["figures"]:
        assert (out / "figures" / f"{name}.svg").stat().st_size > 1000, name

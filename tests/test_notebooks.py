"""Lab notebooks: one per lab, thin, opened by one command, writing where `make run` writes.

Each notebook is executed once per session in its lab's own test module
(``conftest.lab_run`` and ``check_notebook_output``), whose tests read what it wrote.
"""

import json
from pathlib import Path

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


def test_notebooks_write_where_make_run_writes(monkeypatch, tmp_path):
    """Opened from labs/ (Jupyter's working folder) or run from the root, one reports/ folder."""
    from interp.experiments import default_out, reports_dir

    root = LABS.parent
    monkeypatch.delenv("INTERP_REPORTS", raising=False)
    monkeypatch.chdir(root / "labs")
    from_labs = default_out("induction")
    monkeypatch.chdir(root)
    assert from_labs == default_out("induction") == root / "reports" / "induction"
    monkeypatch.chdir(tmp_path)  # outside any interp project: the current folder
    assert reports_dir() == tmp_path / "reports"
    monkeypatch.setenv("INTERP_REPORTS", str(tmp_path / "elsewhere"))
    assert default_out("induction") == tmp_path / "elsewhere" / "induction"


def test_one_documented_command_opens_the_notebooks():
    import subprocess

    readme = (LABS.parent / "README.md").read_text()
    assert "make notebooks" in readme
    dry = subprocess.run(
        ["make", "-n", "notebooks"], cwd=LABS.parent, capture_output=True, text=True, check=True
    ).stdout
    assert '".[lab]"' in dry and "jupyter lab labs/" in dry

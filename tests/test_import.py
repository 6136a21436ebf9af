"""`import interp` and `interp --help` are cheap: no heavy module loads (fresh interpreter)."""

import json
import subprocess
import sys

from conftest import run_cli

HEAVY = [
    "torch",
    "transformer_lens",
    "circuitsvis",
    "nbclient",
    "selenium",
    "transformers",
    "pandas",
    "matplotlib",
    "numpy",
]


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_modules():
    assert _loaded_after("import interp, interp.models, interp.analysis, interp.experiments") == []


def test_help_loads_no_torch():
    code = (
        "from interp.cli import main\n"
        "for argv in (['--help'], ['lab', '--help'], ['ablate', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0\n"
    )
    assert _loaded_after(code) == []
    proc = run_cli("--help")
    assert proc.returncode == 0 and "attribute" in proc.stdout and "scores" in proc.stdout


def test_lazy_exports_resolve():
    import interp.analysis
    import interp.models

    for name in interp.analysis.__all__:
        assert getattr(interp.analysis, name) is not None, name
    for name in interp.models.__all__:
        assert getattr(interp.models, name) is not None, name

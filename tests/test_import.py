"""`import interp` is cheap and has no heavy side effects (checked in a fresh interpreter)."""

import json
import subprocess
import sys

HEAVY = [
    "torch",
    "transformer_lens",
    "circuitsvis",
    "nbclient",
    "selenium",
    "transformers",
    "pandas",
]


def test_import_loads_no_heavy_modules():
    code = (
        "import sys, json, time; t = time.perf_counter(); import interp, interp.models, "
        "interp.analysis; dt = time.perf_counter() - t; "
        f"print(json.dumps({{'dt': dt, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["loaded"] == []


def test_lazy_exports_resolve():
    import interp.analysis
    import interp.models

    assert callable(interp.models.attention)
    assert callable(interp.analysis.subspaces)

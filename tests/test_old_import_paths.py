"""Old import paths keep working (issue 43, cause 4): every module path that a README, a docs
page or a notebook ever showed imports again, and a moved one warns naming its new place.

``SHOWN`` is every ``interp.*`` dotted path found in README.md, docs/ and labs/ across the
git history of main (generated once, by ``git grep -o`` over every commit); the old modules
are :data:`interp.core.moved.MOVED` (every module that ever existed under interp/ and no
longer does). Each check runs in one fresh interpreter so that each import is a first one.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from interp.core.moved import MOVED, RENAMED, WITHDRAWN

ROOT = Path(__file__).resolve().parents[1]

SHOWN = [
    "interp.analysis",
    "interp.analysis.circuits.prompts",
    "interp.analysis.circuits.task",
    "interp.analysis.direct_logit_attribution",
    "interp.analysis.frames.SCHEMA",
    "interp.analysis.head_scores",
    "interp.analysis.heads.atlas.roles",
    "interp.analysis.heads.atlas_roles",
    "interp.analysis.heads.scores",
    "interp.analysis.induction",
    "interp.analysis.logit_lens",
    "interp.analysis.null_probe",
    "interp.analysis.qk_attribution",
    "interp.analysis.qk_interventions",
    "interp.checks.token_id",
    "interp.cli",
    "interp.core.checks.token_id",
    "interp.core.glossary",
    "interp.core.glossary.markdown",
    "interp.core.memory",
    "interp.core.metrics",
    "interp.core.precision",
    "interp.core.precision.check_runs",
    "interp.core.precision.tolerance",
    "interp.core.protocol.HookedModel",
    "interp.datasets",
    "interp.dictionaries",
    "interp.engine.chunks",
    "interp.engine.chunks.Footprint",
    "interp.engine.graph.build_graph",
    "interp.engine.sweep",
    "interp.engine.sweeps.sweep",
    "interp.experiments",
    "interp.experiments.LABS",
    "interp.experiments.bank_sense",
    "interp.experiments.circuits",
    "interp.experiments.feature_recovery",
    "interp.experiments.induction",
    "interp.experiments.induction.features",
    "interp.experiments.name_movers",
    "interp.experiments.pretrained_heads",
    "interp.experiments.run_lab",
    "interp.experiments.writer",
    "interp.experiments.writer.write_lab",
    "interp.export",
    "interp.figures",
    "interp.figures.circuit_figure",
    "interp.glossary",
    "interp.glossary.markdown",
    "interp.labs",
    "interp.labs.LABS",
    "interp.labs.bank_sense",
    "interp.labs.circuits",
    "interp.labs.feature_recovery",
    "interp.labs.feature_recovery_report",
    "interp.labs.induction",
    "interp.labs.name_movers",
    "interp.labs.pretrained",
    "interp.labs.pretrained_heads",
    "interp.labs.run_lab",
    "interp.labs.sense_training",
    "interp.labs.writer",
    "interp.labs.writer.write_lab",
    "interp.memory",
    "interp.memory.forward_bytes",
    "interp.metrics",
    "interp.models",
    "interp.models.kv_cache",
    "interp.models.load_model",
    "interp.models.placement",
    "interp.models.toy",
    "interp.models.weights",
    "interp.outputs.figures",
    "interp.outputs.figures.circuit_figure",
    "interp.outputs.frames.SCHEMA",
    "interp.outputs.pages.features.pair_section",
    "interp.precision",
    "interp.precision.check_runs",
    "interp.precision.tolerance",
    "interp.protocol.HookedModel",
    "interp.read_table",
    "interp.runtime",
    "interp.runtime.decoding",
    "interp.runtime.register",
]

PROBE = r"""
import importlib, json, sys, warnings
paths = json.loads(sys.argv[1])
out = {}
for path in paths:
    for name in [n for n, m in sys.modules.items() if type(m).__name__ == "_OldPath"]:
        del sys.modules[name]  # each path is a first import of its old module, so it warns
    parts = path.split(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = None
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError as e:
                if i == 1 or not str(e).startswith("No module named"):
                    error = f"{type(e).__name__}: {e}"
                    if "withdrawn" in str(e):
                        break
                continue
            try:
                for name in parts[i:]:
                    obj = getattr(obj, name)
                error = None
            except AttributeError as e:
                error = f"AttributeError: {e}"
            break
    out[path] = {
        "error": error,
        "warnings": [str(w.message) for w in caught if w.category is DeprecationWarning],
    }
print(json.dumps(out))
"""


def _probe(paths: list[str]) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shown() -> dict:
    return _probe(SHOWN)


def test_every_path_the_docs_ever_showed_imports(shown):
    """Each imports, except a module withdrawn before release, which says so."""
    broken = {p: r["error"] for p, r in shown.items() if r["error"]}
    withdrawn = {p for p in broken if any(p == w or p.startswith(w + ".") for w in WITHDRAWN)}
    assert all("withdrawn" in broken[p] for p in withdrawn)
    assert not set(broken) - withdrawn, broken


def test_old_paths_warn_naming_the_new_place(shown):
    for path, result in shown.items():
        old = next((m for m in MOVED if path == m or path.startswith(m + ".")), None)
        if old is None:
            continue
        new_home = MOVED[old][0]
        assert any(new_home in w for w in result["warnings"]), (path, result)


def test_every_old_module_imports_and_warns():
    results = _probe(sorted(MOVED))
    for old, (new_home, _) in MOVED.items():
        assert results[old]["error"] is None, (old, results[old])
        assert any(f"{old} moved to {new_home}" in w for w in results[old]["warnings"]), old


def test_names_that_moved_elsewhere_or_were_renamed_resolve():
    paths = [f"{old}.{name}" for old, (_, names) in MOVED.items() for name in names]
    paths += [f"{module}.{name}" for module, name in RENAMED]
    results = _probe(paths)
    broken = {p: r["error"] for p, r in results.items() if r["error"]}
    assert not broken, broken
    for module, name in RENAMED:
        new = RENAMED[(module, name)].replace(":", ".")
        assert any(new in w for w in results[f"{module}.{name}"]["warnings"]), (module, name)


def test_the_issue_examples():
    """The six paths the audit found broken: each imports in both forms, with a warning."""
    results = _probe(
        [
            "interp.errors.InterpError",
            "interp.metrics.loss_metric",
            "interp.memory",
            "interp.engine.tasks",
            "interp.analysis.circuit_graph",
        ]
    )
    assert all(r["error"] is None and r["warnings"] for r in results.values()), results
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    from interp.engine import tasks\nexcept DeprecationWarning as w:\n"
        "    print(w)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "interp.engine.tasks moved to interp.engine.edges.task" in run.stdout, run.stderr


def test_a_withdrawn_module_says_so():
    results = _probe(sorted(WITHDRAWN))
    for result in results.values():
        assert "withdrawn" in result["error"], result


def test_a_missing_name_in_a_moved_module_names_the_new_place():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import interp.errors as old

    with pytest.raises(AttributeError, match="interp.core.errors"):
        old.no_such_name  # noqa: B018


def test_the_finder_never_shadows_a_module_that_exists():
    for old in [*MOVED, *WITHDRAWN]:
        rel = Path(*old.split("."))
        assert not (ROOT / rel).with_suffix(".py").exists(), old
        assert not (ROOT / rel / "__init__.py").exists(), old

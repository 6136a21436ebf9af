"""Shared fixtures. Models and lab runs are built once per session and never mutated by tests.

Each lab notebook executes once (:func:`lab_run`); it writes its lab's report,
tables and figures, and the tests of that lab read them. So each lab's full
computation runs once per session, in its notebook, as a user runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
NOTEBOOKS = {
    "induction": "induction",
    "bank-sense": "bank_sense",
    "feature-recovery": "feature_recovery",
    "pretrained": "pretrained_heads",
    "name-movers": "name_movers",
    "circuits": "circuits",
}


def jitter(model, scale=0.05, seed=1):
    """Random init leaves biases and norm weights at 0 and 1: move every parameter a little
    (seeded), so every term of a decomposition counts."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the real ``interp`` console script (the one the venv installed)."""
    exe = Path(sys.executable).with_name("interp")
    return subprocess.run(
        [str(exe), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "INTERP_DEBUG": "", **(env or {})},
    )


def native_bridge(**sizes):
    """A random attention-only LayerNorm TransformerBridge (boot_native), eval mode."""
    from transformer_lens.model_bridge import TransformerBridge

    cfg = dict(
        n_layers=2,
        d_model=32,
        n_heads=4,
        d_head=8,
        n_ctx=16,
        d_vocab=20,
        seed=0,
        attn_only=True,
        act_fn=None,
        normalization_type="LN",
    )
    return TransformerBridge.boot_native({**cfg, **sizes}).eval()


@pytest.fixture(scope="session")
def chromium_paths() -> tuple[str, str]:
    """Paths to Debian's chromium and chromedriver; skip locally, fail under CI=true."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        msg = "headless Chromium not installed (apt-get install chromium chromium-driver)"
        if IN_CI:
            pytest.fail(msg + "; .ci/run should have installed it")
        pytest.skip(msg)
    return browser, driver


@pytest.fixture(scope="session")
def induction_model():
    from interp.models import load_model

    return load_model("induction-2l")


@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M as a TransformerBridge, loaded once per session (first load converts)."""
    from interp.models import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 as a TransformerBridge, loaded once per session."""
    from interp.models import load_model

    return load_model("minilm-l6")


# The slowest modules, started first so the two workers finish together (``--dist loadfile``
# sends whole modules to a worker: a lab's notebook and the tests that read it share one).
# xdist (--dist loadfile, --no-loadscope-reorder) hands each worker two modules at the
# start, in this order: worker 1 the pretrained and name-mover labs (it converts SmolLM2
# once when the cache is cold), worker 2 the retraining and the cache tests, so no worker
# waits for the other's conversion.
SLOW_FIRST = (
    "test_pretrained_lab",
    "test_training",
    "test_name_movers",
    "test_cache",
    # then the longest first, so the last module either worker takes is a short one
    "test_induction_lab",
    "test_pretrained",
    "test_atlas_roles",
    "test_ranks",
    "test_ranks_faults",
    "test_ranks_dictionaries",
    "test_bank_sense",
    "test_feature_recovery",
    "test_circuits_lab",
    "test_docs_site",
    "test_dictionary_corpus",
    "test_old_import_paths",
    "test_cli",
    "test_edge_circuits",
)


def pytest_configure(config):
    """Under pytest-xdist each worker gets one torch thread: two workers then use both cores
    without four threads fighting over two (the suite's time is in many small models)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"  # notebook kernels started by this worker too


def pytest_collection_modifyitems(config, items):
    """Slow modules first (their order is the order xdist hands them out)."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__, len(rank)))


_RUNS: dict[str, Path] = {}


def execute_notebook(name: str, cwd: Path) -> None:
    """Execute ``labs/<name>.ipynb`` top to bottom in ``cwd``; any cell error raises."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "labs" / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()


@pytest.fixture(scope="session")
def lab_run(tmp_path_factory):
    """``lab_run(lab)`` -> the folder its notebook wrote (``reports/<lab>``), run once."""

    def run(lab: str) -> Path:
        if lab not in _RUNS:
            cwd = tmp_path_factory.mktemp(f"nb-{lab}")
            # Notebooks write to interp.experiments.reports_dir(): here, the session's folder.
            os.environ["INTERP_REPORTS"] = str(cwd / "reports")
            try:
                execute_notebook(NOTEBOOKS[lab], cwd)
            finally:
                os.environ.pop("INTERP_REPORTS", None)
            _RUNS[lab] = cwd / "reports" / lab
        return _RUNS[lab]

    return run


def check_notebook_output(out: Path, lab: str) -> None:
    """A notebook ran top to bottom (``lab_run`` raised otherwise) and wrote its lab's output:
    the marker, the report, every table and every figure it lists."""
    import json

    marker = json.loads((out / "interp-lab.json").read_text())
    assert marker["lab"] == lab
    assert (out / "report.html").is_file()
    for name in marker["tables"]:
        assert (out / f"{name}.csv").is_file(), name
        assert (out / f"{name}.meta.json").is_file(), name
    for name in marker["figures"]:
        assert (out / "figures" / f"{name}.svg").stat().st_size > 1000, name


def scores_without_key_piece(model, tokens, layer, piece):
    """Hooks only: ``layer``'s attention scores ``[batch, head, query, key]`` when its keys
    (and only its keys) are computed from ``resid_pre - piece``: one run with the residual
    stream edited keeps the keys the model's own norm and projection make of it, a second,
    clean run gets those keys. An independent check of ``qk_interventions``."""
    import torch

    got = {}

    def edit(x, hook):
        return x - piece.to(x.dtype)

    def keep(name):
        def f(x, hook):
            got[name] = x.detach().clone()

        return f

    with torch.no_grad():
        model.run_with_hooks(
            tokens,
            fwd_hooks=[
                (f"blocks.{layer}.hook_resid_pre", edit),
                (f"blocks.{layer}.attn.hook_k", keep("k")),
            ],
        )
        model.run_with_hooks(
            tokens,
            fwd_hooks=[
                (f"blocks.{layer}.attn.hook_k", lambda x, hook: got["k"].to(x.dtype)),
                (f"blocks.{layer}.attn.hook_attn_scores", keep("s")),
            ],
        )
    return got["s"]


def written_by(model, cache, component):
    """Hooks only: what ``component`` (``"L3.mlp"`` or ``"L3H4"``) wrote into the residual
    stream, ``[batch, pos, d_model]``, from a cache holding :func:`written_hook`."""
    layer = int(component[1:].split(".")[0].split("H")[0])
    if component.endswith(".mlp"):
        return cache[written_hook(component)]
    head = int(component.split("H")[1])
    return cache[written_hook(component)][:, :, head] @ model.blocks[layer].attn.W_O[head]


def written_hook(component):
    """The hook :func:`written_by` reads for ``component``."""
    layer = int(component[1:].split(".")[0].split("H")[0])
    return (
        f"blocks.{layer}.hook_mlp_out"
        if component.endswith(".mlp")
        else f"blocks.{layer}.attn.hook_z"
    )

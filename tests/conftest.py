"""Shared fixtures. Models are built once per session and never mutated by tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the real ``interp`` console script (the one the venv installed)."""
    exe = Path(sys.executable).with_name("interp")
    return subprocess.run(
        [str(exe), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "INTERP_DEBUG": ""},
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
def smollm():
    """SmolLM2-135M as a TransformerBridge, loaded once per session (first load converts)."""
    from interp.models import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 as a TransformerBridge, loaded once per session."""
    from interp.models import load_model

    return load_model("minilm-l6")

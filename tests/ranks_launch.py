"""Two real ``torchrun`` ranks for the tests: gloo, one thread each, on the loopback.

``launch(folder, script, cases_name, cases)`` writes the rank script and a module of cases
(``cases() -> {name: fn}``) into ``folder``, runs the script on 2 ranks through
``python -m torch.distributed.run --standalone`` and returns what rank 0 pickled, beside
the same cases run in this process.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

# gloo on the loopback interface: the ranks meet on this machine whatever its host name
# resolves to (a container's may not resolve at all)
LOOPBACK = {"GLOO_SOCKET_IFNAME": "lo"}


def launch(folder: Path, script: str, cases_name: str, cases: str) -> tuple[Any, dict]:
    """Rank 0's pickled output of ``script`` on 2 ranks (argv: the output file and
    ``folder``, where ``cases_name`` can be imported from), and ``cases()`` run here."""
    (folder / "run.py").write_text(script)
    (folder / f"{cases_name}.py").write_text(cases)
    out = folder / "out.pkl"
    env = {**os.environ, **LOOPBACK, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(folder / "run.py"), str(out), str(folder)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out, "rb") as f:
        ranked = pickle.load(f)
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(cases_name)
        one = {name: fn() for name, fn in module.cases().items()}
    finally:
        sys.path.remove(str(folder))
    return ranked, one

"""``--workers N``: one command on N local processes, started by PyTorch's own launcher.

The processes are ``torch.distributed`` ranks started by ``torch.distributed.run``'s
launcher API (:func:`torch.distributed.launcher.api.elastic_launch`, what ``torchrun
--standalone --nproc-per-node N`` calls), in this process: no launcher of our own. Rank 0
prints to the terminal (its progress bar, warnings, the files it wrote); the other ranks'
output goes to a temporary folder. A rank's error line goes to the launcher, not the
terminal. When any rank fails, the launcher ends every other rank and says, in one line on
stderr, which rank failed and why:

* a rank that raised: its own line (``interp: error (rank 1): ...``), that of the rank that
  failed first (a rank that only timed out waiting for it comes after);
* a rank killed by a signal (the out-of-memory killer's SIGKILL, say) is named with its
  signal: ``interp: error: rank 1 died (SIGKILL); the run stopped and wrote nothing``.

The exit status is the failing rank's (2 for bad input, 1 otherwise, 130 for Ctrl-C).
Outputs are written by rank 0 alone, atomically, after every rank's partials have met, so
a failed or interrupted run leaves the old files (:mod:`interp.outputs.files`).

Example:
    ``interp circuit --workers 2 --out circuit.json`` runs what ``torchrun --standalone
    --nproc-per-node 2 -m interp circuit --out circuit.json`` runs.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import uuid
from typing import Any


def launch(workers: int, argv: list[str]) -> int:
    """Run ``interp argv`` on ``workers`` local ranks; the exit status (module docstring).

    Args:
        workers: The number of processes (at least 2; one runs in this process).
        argv: The command, without ``--workers``.

    Returns:
        0, or the failing rank's exit status (1 for a signal; 130 for Ctrl-C).
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the processes share the machine's cores
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        # gloo meets on the loopback interface: one machine, whatever its host name
        # resolves to (a container's may not resolve at all)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    debug = bool(os.environ.get("INTERP_DEBUG"))
    if not debug:  # the launcher's own log lines and tracebacks: one line instead
        for name in [*logging.root.manager.loggerDict, "torch.distributed.elastic"]:
            if name.startswith("torch.distributed"):
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    with tempfile.TemporaryDirectory(prefix="interp-workers-") as logs:
        os.environ["INTERP_LAUNCHER"] = logs  # the ranks' error lines come here (_report)
        quiet = {r: Std.ALL for r in range(1, workers)}  # rank 0 keeps the terminal
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=workers, run_id=str(uuid.uuid4()),
            rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
            logs_specs=DefaultLogsSpecs(log_dir=logs, redirects=quiet), monitor_interval=0.1,
        )  # fmt: skip
        try:
            elastic_launch(config, sys.executable)("-m", "interp", *argv)
        except ChildFailedError as exc:
            return _report(exc.failures, logs)
        except KeyboardInterrupt:
            return _interrupted()
        except Exception as exc:  # noqa: BLE001 - SignalException and rendezvous errors
            if type(exc).__name__ == "SignalException":
                return _interrupted()
            if debug:
                raise
            print(f"interp: error: the workers could not start ({type(exc).__name__}: {exc})",
                  file=sys.stderr)  # fmt: skip
            return 1
    return 0


def _interrupted() -> int:
    print("interp: interrupted; earlier output (if any) is left as it was", file=sys.stderr)
    return 130


def _report(failures: dict[int, Any], logs: str) -> int:
    """One line for the rank whose failure ended the run (not the ranks the launcher ended,
    nor a rank that only waited for it); its exit status."""
    import signal

    ended = -int(signal.SIGTERM)
    own = {r: f for r, f in failures.items() if f.exitcode != ended} or failures
    said = {r: _said(logs, r) for r in own}

    def first(r: int) -> tuple[bool, int, int]:  # a rank that only waited comes last
        return ("waited for the other ranks" in said[r], own[r].timestamp, r)

    rank = min(own, key=first)
    failure = own[rank]
    if failure.exitcode < 0:
        print(f"interp: error: rank {rank} died ({failure.signal_name()}); the run stopped "
              "and wrote nothing", file=sys.stderr)  # fmt: skip
        return 130 if failure.exitcode == -int(signal.SIGINT) else 1
    print(said[rank] or f"interp: error: rank {rank} exited with status {failure.exitcode}; "
          "the run stopped and wrote nothing", file=sys.stderr)  # fmt: skip
    return int(failure.exitcode)


def _said(logs: str, rank: int) -> str:
    """The last error line rank ``rank`` left for the launcher ('' if none)."""
    path = os.path.join(logs, f"rank{rank}.err")
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        lines = [s.rstrip() for s in f if s.strip()]
    return lines[-1] if lines else ""

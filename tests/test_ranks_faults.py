"""Faults across ranks (issue 45, step 2), with real processes.

* ``--workers 2`` with one rank SIGKILLed mid-run: exit 1, one line naming the rank, the
  old output left, no process left behind;
* Ctrl-C (SIGINT) on the launcher: exit 130, one line, the old output left, no process;
* every rank refusing a bad input: one line, not one per rank; a mistyped option: one
  line before any process starts;
* ranks given different tokens, options or models: refused on every rank before any pass;
* a rank that never reaches a collective: the others stop after the group's timeout, with
  a message saying where they waited.
"""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from ranks_launch import LOOPBACK as GLOO_LOOPBACK

LOOPBACK = {**GLOO_LOOPBACK, "PYTHONWARNINGS": "ignore"}


def _ranks(mark: str) -> dict[int, int]:
    """``{pid: rank}`` of the live processes whose environment carries ``mark``."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
        except OSError:
            continue
        if env.get(b"FAULT_MARK") == mark.encode() and b"RANK" in env:
            found[int(pid)] = int(env[b"RANK"])
    return found


def _gone(mark: str, within: float = 10.0) -> bool:
    end = time.time() + within
    while time.time() < end:
        if not _ranks(mark):
            return True
        time.sleep(0.2)
    return False


def _start(tmp_path, mark):
    out = tmp_path / "c.json"
    out.write_text("old")
    env = {**os.environ, **LOOPBACK, "FAULT_MARK": mark}
    # 2,048 prompt pairs: seconds of work after the imports, so the fault lands mid-run
    cmd = [sys.executable, "-m", "interp", "circuit", "--workers", "2", "--n", "2048",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip
    end = time.time() + 120
    while time.time() < end and 1 not in _ranks(mark).values():
        time.sleep(0.1)
    assert 1 in _ranks(mark).values(), "the ranks did not start"
    time.sleep(1.0)  # mid-run: a rank's imports alone take longer
    return proc, out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_rank_ends_the_run_in_one_line_and_leaves_the_old_output(tmp_path):
    mark = uuid.uuid4().hex
    proc, out = _start(tmp_path, mark)
    for pid, rank in _ranks(mark).items():
        if rank == 1:
            os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert err.strip().splitlines() == [
        "interp: error: rank 1 died (SIGKILL); the run stopped and wrote nothing"
    ], err
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]  # no staging left
    assert _gone(mark), _ranks(mark)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_on_the_launcher_leaves_the_old_output_and_no_process(tmp_path):
    mark = uuid.uuid4().hex
    proc, out = _start(tmp_path, mark)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        "interp: interrupted; earlier output (if any) is left as it was"
    ], err
    assert out.read_text() == "old"
    assert _gone(mark), _ranks(mark)


def test_a_refusal_on_every_rank_is_one_line(tmp_path):
    env = {**os.environ, **LOOPBACK}
    cmd = [sys.executable, "-m", "interp", "circuit", "--workers", "2", "--model", "nosuch",
           "--out", str(tmp_path / "c.json")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model 'nosuch'" in lines[0], done.stderr
    assert not (tmp_path / "c.json").exists()


def test_a_mistyped_option_is_refused_before_any_process_starts():
    cmd = [sys.executable, "-m", "interp", "circuit", "--workers", "2", "--out", "x.json",
           "--no-such-option"]  # fmt: skip
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--no-such-option" in done.stderr
    assert time.time() - start < 20  # argparse in the launcher, not two ranks' imports


SCRIPT = textwrap.dedent(
    """
    import os, pickle, sys, time, warnings
    warnings.simplefilter("ignore")
    from datetime import timedelta
    import torch, torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))  # a slow rank is fine
    r = dist.get_rank()
    import interp.analysis as A
    from interp.core.errors import InterpError
    from interp.datasets import repeated_random_tokens
    from interp.models import load_model

    m = load_model("induction-2l")
    passes = []
    m.register_forward_pre_hook(lambda *a: passes.append(1))
    tokens = repeated_random_tokens(6, 8, d_vocab=64, seed=0).tokens
    own = repeated_random_tokens(6, 8, d_vocab=64, seed=r).tokens  # a shard of its own

    def said(fn):
        try:
            fn()
        except InterpError as exc:
            return str(exc)

    out = {
        "tokens": said(lambda: A.ablate_heads(m, own)),
        "options": said(lambda: A.head_scores(m, tokens, exclude_bos=bool(r))),
    }
    if r == 1:
        with torch.no_grad():
            next(m.parameters()).add_(1e-3)  # another checkpoint
    out["model"] = said(lambda: A.logit_lens(m, tokens))
    out["passes"] = len(passes)
    dist.barrier()  # both here; then a short timeout for the one meeting rank 1 misses
    from torch.distributed.distributed_c10d import _set_pg_timeout
    _set_pg_timeout(timedelta(seconds=2))
    if r == 1:
        time.sleep(4)  # never comes to the next analysis
    else:
        out["timeout"] = said(lambda: A.logit_lens(m, tokens))
        with open(sys.argv[1], "wb") as f:
            pickle.dump(out, f)
        # A gloo group whose collective timed out can abort in its C++ teardown at exit
        # (std::terminate, SIGABRT) while the peer's connection is still open: seen under
        # load. The message above is what this test reads; leave without that teardown.
        os._exit(0)
    """
)


@pytest.fixture(scope="module")
def disagreeing(tmp_path_factory):
    d = tmp_path_factory.mktemp("disagree")
    (d / "run.py").write_text(SCRIPT)
    env = {**os.environ, **LOOPBACK, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(d / "run.py"), str(d / "out.pkl")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=d)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(d / "out.pkl", "rb") as f:
        return pickle.load(f)


@pytest.mark.parametrize(
    ("case", "part"),
    [("tokens", "tokens and options"), ("options", "tokens and options"), ("model", "model")],
)
def test_ranks_given_different_work_are_refused_before_any_pass(disagreeing, case, part):
    said = disagreeing[case]
    assert said is not None and "the ranks were given different work" in said, said
    assert f"rank 1's {part} is not rank 0's" in said, said
    assert disagreeing["passes"] == 0  # refused before the first forward


def test_a_rank_that_never_comes_times_out_with_a_clear_message(disagreeing):
    said = disagreeing["timeout"]
    assert said is not None, "rank 0 did not stop"
    assert "rank 0 of 2 waited for the other ranks at logit_lens's agreement check" in said
    assert "INTERP_RANK_TIMEOUT" in said


def test_every_task_declares_what_the_ranks_must_hold_alike():
    """The agreement check hashes each task's ``inputs`` (its tokens and options): every
    ``Task(...)`` in the package gives them, or a rank given its own shard would pass."""
    import ast
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1] / "interp"
    missing, seen = [], 0
    for path in sorted(pkg.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name != "Task" or path.name == "runner.py":
                continue
            seen += 1
            if "inputs" not in {k.arg for k in node.keywords}:
                missing.append(f"{path.relative_to(pkg.parent)}:{node.lineno}")
    assert seen >= 14, seen
    assert not missing, missing

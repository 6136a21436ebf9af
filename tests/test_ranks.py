"""The runner's chunks on two processes (issue 45, step 1): real ``torchrun`` ranks, gloo.

Two ranks of one thread each, launched by PyTorch's own launcher, run each analysis inside
the process group, on the induction model and on a random GQA Llama: each rank runs its
share of the chunks and the partials meet in chunk order (:mod:`interp.engine.ranks`).
Every table equals the one-process table to 1e-6 of its scale (a mean of chunk means is
summed in another order: float32 rounding). An analysis that keeps state of its own across
chunks is refused inside the group, in one line.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from ranks_launch import LOOPBACK, launch

SCRIPT = textwrap.dedent(
    """
    import os, pickle, sys, warnings
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    sys.path.insert(0, sys.argv[2])
    from rank_cases import cases
    from interp.core.errors import InterpError
    import interp.analysis as A
    out = {name: fn() for name, fn in cases().items()}
    out["estimate"] = A.ablate_heads(cases.model, cases.tokens, estimate=True)
    from interp.engine.chunks import Footprint
    from interp.engine.runner import Task, run
    try:  # a task that keeps state of its own across chunks
        run(cases.model, (6, 8), Task("stateful", Footprint(0, 8), work=0.0,
            chunk=lambda c: {}, combine={}, parallel=False, inputs=None))
        out["refused"] = None
    except InterpError as exc:
        out["refused"] = str(exc)
    if dist.get_rank() == 0:
        with open(sys.argv[1], "wb") as f:
            pickle.dump(out, f)
    dist.destroy_process_group()
    """
)

CASES = textwrap.dedent(
    """
    import interp.analysis as A
    from interp.core.metrics import logit_diff_metric
    from interp.datasets import repeated_random_tokens
    from interp.models import load_model


    def cases():
        m = load_model("induction-2l")
        t = repeated_random_tokens(6, 8, d_vocab=64, seed=0).tokens
        cases.model, cases.tokens = m, t
        met = logit_diff_metric(5, 6)
        c = t.flip(1)
        return {
            "ablate_heads zero": lambda: A.ablate_heads(m, t),
            "ablate_heads mean": lambda: A.ablate_heads(m, t, ablation="mean"),
            "patch_heads": lambda: A.patch_heads(m, t, corrupted_tokens=c, metric=met),
            "attribute_edges": lambda: A.attribute_edges(m, t, corrupted_tokens=c, metric=met),
            "path_patch": lambda: A.path_patch(m, t, corrupted_tokens=c, metric=met),
            "qk_attribution": lambda: A.qk_attribution(m, t, layer=1, head=1),
            "direct_logit_attribution": lambda: A.direct_logit_attribution(m, t, answer=5),
            "logit_lens": lambda: A.logit_lens(m, t, at=[-1]),
            "head_scores": lambda: A.head_scores(m, t),
            "head_atlas": lambda: A.head_atlas(m, t),
            **llama_cases(),
        }


    def llama_cases():
        # a random GQA Llama (RMSNorm, grouped-query attention), every parameter moved a
        # little (seeded) so every term counts
        import torch
        from interp.models.hf import random_llama

        m = random_llama(2, vocab=30)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        t = repeated_random_tokens(6, 8, d_vocab=30, seed=2).tokens
        c = t.flip(1)
        met = logit_diff_metric(5, 6)
        return {
            "llama ablate_heads mean": lambda: A.ablate_heads(m, t, ablation="mean"),
            "llama patch_heads": lambda: A.patch_heads(m, t, corrupted_tokens=c, metric=met),
            "llama attribute_edges": lambda: A.attribute_edges(
                m, t, corrupted_tokens=c, metric=met),
            "llama qk_attribution": lambda: A.qk_attribution(m, t, layer=1, head=1),
            "llama direct_logit_attribution": lambda: A.direct_logit_attribution(
                m, t, answer=5),
            "llama logit_lens": lambda: A.logit_lens(m, t, at=[-1]),
        }
    """
)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """What rank 0 of a 2-process ``torchrun`` gloo group returned, and one process's."""
    return launch(tmp_path_factory.mktemp("ranks"), SCRIPT, "rank_cases", CASES)


def _numbers(df: pd.DataFrame) -> pd.DataFrame:
    return df.select_dtypes("number")


@pytest.mark.parametrize(
    "name",
    ["ablate_heads zero", "ablate_heads mean", "patch_heads", "attribute_edges", "path_patch",
     "qk_attribution", "direct_logit_attribution", "logit_lens", "head_scores", "head_atlas",
     "llama ablate_heads mean", "llama patch_heads", "llama attribute_edges",
     "llama qk_attribution", "llama direct_logit_attribution", "llama logit_lens"],
)  # fmt: skip
def test_two_ranks_give_the_one_process_table(two_ranks, name):
    ranked, one = two_ranks
    a, b = _numbers(ranked[name]), _numbers(one[name])
    assert list(a.columns) == list(b.columns) and a.shape == b.shape, name
    x, y = a.to_numpy(float), b.to_numpy(float)
    assert (np.isnan(x) == np.isnan(y)).all(), name
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    # a mean of chunk means, summed in another order: float32 rounding of the table's scale
    scale = max(1.0, float(np.abs(y).max(initial=0)))
    assert np.abs(x - y).max(initial=0) <= 1e-6 * scale, (name, np.abs(x - y).max())
    assert ranked[name].attrs["chunks"] >= 2  # each rank ran a chunk
    if "role" in ranked[name].columns:
        assert ranked[name]["role"].tolist() == one[name]["role"].tolist()


def test_the_estimate_gives_the_plan_of_each_rank(two_ranks):
    """6 prompts that fit one chunk: split so that each of the 2 ranks runs one chunk of 3
    prompts, at the one-chunk peak, and half the passes."""
    est = two_ranks[0]["estimate"]
    assert (est.ranks, est.chunks, est.rank_chunks, est.rank_prompts) == (2, 2, 1, 3)
    assert est.rank_forward_equivalents == round(est.forward_equivalents / 2, 3)
    assert "on 2 ranks, each at most 1 chunk of 3 prompts in all" in str(est)


def test_an_analysis_with_its_own_state_is_refused_in_the_group(two_ranks):
    ranked, _ = two_ranks
    assert "does not run data-parallel yet" in ranked["refused"]


def test_workers_run_a_command_and_rank_0_writes_the_one_file(tmp_path):
    """``interp circuit --workers 2``: two ranks started by PyTorch's launcher (what
    ``torchrun --nproc-per-node 2 -m interp circuit`` runs) find the one-process circuit
    (its scores to 1e-6 of their scale) and leave one file: no staging folder, no second
    copy; rank 0 alone prints. So do two "nodes": two launchers of one rank each."""
    import json

    env = {**os.environ, **LOOPBACK, "PYTHONWARNINGS": "ignore"}
    two, one = tmp_path / "two" / "c.json", tmp_path / "one" / "c.json"
    two.parent.mkdir()
    one.parent.mkdir()
    exe = [sys.executable, "-m", "interp", "circuit"]
    nodes = _two_nodes(tmp_path / "nodes" / "c.json", env)  # meanwhile, two "nodes"
    done = subprocess.run([*exe, "--workers", "2", "--out", str(two)], capture_output=True,
                          text=True, timeout=600, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(f"wrote {two}") == 1  # rank 0 alone prints
    from interp.cli import main  # the one-process file, in this process

    assert main(["circuit", "--out", str(one)]) == 0
    assert sorted(p.name for p in two.parent.iterdir()) == ["c.json"]
    for node in nodes:
        _, err = node.communicate(timeout=600)
        assert node.returncode == 0, err[-3000:]
    assert sorted(p.name for p in (tmp_path / "nodes").iterdir()) == ["c.json"]
    a = json.loads(one.read_text())
    for other in (two, tmp_path / "nodes" / "c.json"):
        b = json.loads(other.read_text())
        key = [(e["sender"], e["receiver"]) for e in a["edges"]]
        assert key == [(e["sender"], e["receiver"]) for e in b["edges"]]
        x = np.array([e["score"] for e in a["edges"]])
        y = np.array([e["score"] for e in b["edges"]])
        assert np.abs(x - y).max() <= 1e-6 * max(1.0, np.abs(x).max())
        assert a["info"]["n_edges"] == b["info"]["n_edges"]


def _two_nodes(out, env):
    """Two ``torchrun --nnodes 2 --nproc-per-node 1`` launchers meeting through a c10d
    rendezvous on 127.0.0.1: two "nodes" on this machine, each running one rank of
    ``interp circuit`` (started, not waited for)."""
    import socket
    import uuid

    out.parent.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
           "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
           "--rdzv-id", uuid.uuid4().hex, "-m", "interp", "circuit", "--out", str(out)]  # fmt: skip
    env = {**env, "OMP_NUM_THREADS": "1"}
    return [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env) for _ in range(2)]  # fmt: skip


def test_a_bad_worker_count_is_one_line(capsys, tmp_path):
    from interp.cli import main

    with pytest.raises(SystemExit) as e:
        main(["ablate", "--workers", "0", "--out", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        "interp: error: --workers must be a positive integer, got '0'"
    ]  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_group_that_cannot_be_joined_is_one_line(monkeypatch, capsys, tmp_path):
    """WORLD_SIZE without a rendezvous (no torchrun): one line naming the fix, exit 2."""
    from interp.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert main(["ablate", "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "launch with torchrun or --workers N" in err[0], err
    assert list(tmp_path.iterdir()) == []

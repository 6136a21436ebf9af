"""Two processes against one (issue 45): the runner's chunks on ``torch.distributed`` ranks.

On SmolLM2-135M with 64 prompts, side by side in one run, each case in fresh processes:

* ``eap``: EAP on every edge (``attribute_edges``, ``method="eap"``);
* ``patch``: ``patch_heads`` (denoising) of the 90 heads of layers 20-29 (every head
  takes about 8 minutes a run here);
* ``train``: dictionary training throughput in tokens per second (``train_dictionary`` at
  ``blocks.6.hook_resid_pre``, 1024 features, k 32, one epoch).

Each is timed as one process of ``--threads`` threads (2: the machine's cores) and as
``--threads`` processes of one thread each, launched by ``torch.distributed.run`` (gloo
on CPU); the time is the analysis call alone (the model loaded and warmed up on 2 prompts
first; the ranks meet at a barrier before and after). The ratio is one process's time
over the ranks'. The tables of both runs are compared, so a speed-up is never bought with
a wrong number.

    python benchmarks/ranks.py [--cases eap patch train] [--prompts 64] [--threads 2]

Timings on a shared 2-core machine are noisy: run it alone and read ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _case(name: str, prompts: int):
    """``(model, work(n) -> result)`` of one case."""

    import interp.analysis as A
    from interp.core.metrics import logit_diff_metric
    from interp.datasets import repeated_random_tokens
    from interp.dictionaries import train_dictionary
    from interp.models import load_model

    model = load_model("smollm2-135m")
    V = int(model.cfg.d_vocab)
    tokens = repeated_random_tokens(prompts, 12, d_vocab=min(V, 5000), seed=0).tokens
    corrupted = repeated_random_tokens(prompts, 12, d_vocab=min(V, 5000), seed=1).tokens
    metric = logit_diff_metric(int(tokens[0, -1]), int(tokens[1, -1]))

    def work(n: int):
        t, c = tokens[:n], corrupted[:n]
        if name == "eap":
            return A.attribute_edges(model, t, corrupted_tokens=c, metric=metric, method="eap")
        if name == "patch":
            heads = [(l, h) for l in range(20, 30) for h in range(model.cfg.n_heads)]
            return A.patch_heads(model, t, corrupted_tokens=c, metric=metric, heads=heads,
                                 direction="denoising")  # fmt: skip
        fit = train_dictionary(model, t, hook="blocks.6.hook_resid_pre", n_features=1024, k=32,
                               epochs=1, batch_size=256)  # fmt: skip
        return fit.dictionary

    return work, int(tokens.shape[1])


def worker(name: str, prompts: int, out: str) -> None:
    """Run one case in this process (a rank when launched by torchrun); rank 0 writes
    ``{seconds, numbers}`` to ``out``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    group = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if group:
        dist.init_process_group("gloo")
    work, pos = _case(name, prompts)
    work(2)  # once-per-model checks and caches
    if group:
        dist.barrier()
    t0 = time.perf_counter()
    result = work(prompts)
    if group:
        dist.barrier()
    seconds = time.perf_counter() - t0
    if hasattr(result, "W_dec"):
        numbers = result.W_dec.detach().double().numpy().ravel()[:4096]
    else:
        numbers = result.select_dtypes("number").to_numpy(float).ravel()
    if not group or dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "numbers": numbers.tolist(), "pos": pos}, f)
    if group:
        dist.destroy_process_group()


def _timed(name: str, prompts: int, threads: int, ranks: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "out.json")
        me = [str(Path(__file__).resolve()), "--worker", name, "--prompts", str(prompts), out]
        env = {**os.environ, "BENCH_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
               "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"}  # fmt: skip
        cmd = [sys.executable, *me] if ranks == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", *me]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name} on {ranks} process(es) failed:\n{done.stderr[-3000:]}")
        return json.loads(Path(out).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["eap", "patch", "train"])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", default=None)
    ap.add_argument("out", nargs="?")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.prompts, args.out)
        return
    n = args.threads
    print(f"SmolLM2-135M, {args.prompts} prompts; 1 process x {n} threads against {n} "
          "processes x 1 thread (gloo)")  # fmt: skip
    print(f"| case | 1 x {n} threads | {n} ranks x 1 thread | speed-up | largest difference |")
    print("|---|---|---|---|---|")
    for name in args.cases:
        one = _timed(name, args.prompts, n, 1)
        many = _timed(name, args.prompts, 1, n)
        x, y = np.array(one["numbers"]), np.array(many["numbers"])
        ok = x.shape == y.shape and np.array_equal(np.isnan(x), np.isnan(y))
        scale = max(1.0, float(np.nanmax(np.abs(x)))) if x.size else 1.0
        gap = float(np.nanmax(np.abs(x - y))) / scale if ok and x.size else float("nan")
        if name == "train":
            tok = args.prompts * one["pos"]
            a, b = f"{tok / one['seconds']:.0f} tok/s", f"{tok / many['seconds']:.0f} tok/s"
        else:
            a, b = f"{one['seconds']:.2f} s", f"{many['seconds']:.2f} s"
        print(f"| {name} | {a} | {b} | {one['seconds'] / many['seconds']:.2f}x | "
              f"{gap:.1e} of scale |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

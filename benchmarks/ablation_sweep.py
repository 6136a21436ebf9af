"""Single-head zero-ablation sweep: interp's batched engine vs the per-head run_with_hooks loop.

For the shipped induction model and a 12-layer GPT-2-style random model, in
one run: time of each, their ratio, the bound ``2L / (L + 1)`` for exact
single-head ablation by recomputing only downstream layers, the largest
difference between the two tables, and peak memory (max RSS of a fresh
process doing only that sweep, minus one that only loads the model).

    python benchmarks/ablation_sweep.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import torch

MODELS = ("induction-2l", "gpt2-12l")
REPEAT = 2


def build(name: str):
    from interp.datasets import repeated_random_tokens

    if name == "induction-2l":
        from interp.models import load_induction_model

        model = load_induction_model()
        data = repeated_random_tokens(32, 23, d_vocab=64, seed=0)
    else:
        from interp.models.hf import random_gpt2

        model = random_gpt2(12, d_model=256, n_heads=8, vocab=2000, n_ctx=256)
        data = repeated_random_tokens(8, 50, d_vocab=2000, seed=0)
    return model, data


def loop(model, tokens, metric):
    cfg = model.cfg
    out = []
    with torch.no_grad():
        for l in range(cfg.n_layers):
            for h in range(cfg.n_heads):

                def hook(z, hook, h=h):
                    z = z.clone()
                    z[:, :, h] = 0.0
                    return z

                logits = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{l}.attn.hook_z", hook)])
                out.append(float(metric(logits, tokens)))
    return out


def run_one(name: str, method: str) -> dict:
    import resource

    from interp.analysis.ablation import ablate_heads, loss_metric

    model, data = build(name)
    metric = loss_metric(data.loss_mask)

    def go():
        if method == "ours":
            return ablate_heads(model, data.tokens, metric=metric)["ablated"].tolist()
        return loop(model, data.tokens, metric)

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = float("inf")
    for _ in range(REPEAT):  # best of REPEAT; the first call includes one-time model checks
        t = time.perf_counter()
        values = go()
        seconds = min(seconds, time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": seconds,
        "values": values,
        "rss_mb": peak / 1024,
        "rss_delta_mb": (peak - base) / 1024,
        "n_layers": model.cfg.n_layers,
    }


def main() -> None:
    if len(sys.argv) == 3:  # child process: one measurement
        print(json.dumps(run_one(sys.argv[1], sys.argv[2])))
        return
    print(
        f"{'model':<14}{'ours s':>9}{'loop s':>9}{'ratio':>8}{'bound':>8}{'max |diff|':>12}"
        f"{'ours MB':>10}{'loop MB':>10}"
    )
    for name in MODELS:
        res = {}
        for method in ("ours", "loop"):
            proc = subprocess.run(
                [sys.executable, __file__, name, method], capture_output=True, text=True, check=True
            )
            res[method] = json.loads(proc.stdout.strip().splitlines()[-1])
        o, p = res["ours"], res["loop"]
        L = o["n_layers"]
        diff = max(abs(a - b) for a, b in zip(o["values"], p["values"]))
        print(
            f"{name:<14}{o['seconds']:>9.2f}{p['seconds']:>9.2f}"
            f"{p['seconds'] / o['seconds']:>7.2f}x{2 * L / (L + 1):>7.2f}x{diff:>12.2e}"
            f"{o['rss_delta_mb']:>10.1f}{p['rss_delta_mb']:>10.1f}"
        )
    print("MB: growth of max RSS during the sweep (fresh process per measurement).")


if __name__ == "__main__":
    main()

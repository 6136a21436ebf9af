"""Single-head zero-ablation sweep: interp's batched engine vs the per-head run_with_hooks loop.

For the shipped induction model and a 12-layer GPT-2-style random model, in
one run: time of each, their ratio, the bound for exact single-head
ablation by recomputing only downstream layers (``2L / (L + 1)`` with MLPs;
``H L^2 / (L + H L (L - 1) / 2)`` for attention-only models, whose last
layer's heads need only the unembedding: 2.0x for the 2 x 2 induction model), the largest
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
MIN_SECONDS = 2.0


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
    seconds, spent, runs = float("inf"), 0.0, 0
    # Best of at least REPEAT runs, and of as many as fit MIN_SECONDS: a sweep of the small
    # model takes milliseconds, and the first call includes one-time model checks.
    while runs < REPEAT or spent < MIN_SECONDS:
        t = time.perf_counter()
        values = go()
        took = time.perf_counter() - t
        seconds, spent, runs = min(seconds, took), spent + took, runs + 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": seconds,
        "values": values,
        "rss_mb": peak / 1024,
        "rss_delta_mb": (peak - base) / 1024,
        "n_layers": model.cfg.n_layers,
        "n_heads": model.cfg.n_heads,
        "attn_only": bool(getattr(model.cfg, "attn_only", False)),
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
        L, H = o["n_layers"], o["n_heads"]
        # Layer-units of work: the loop runs L layers per head; exact single-head ablation
        # needs one clean pass plus, per head, the layers after it. Attention-only models
        # resume right after the edited block (the last layer's heads cost only the
        # unembedding); a block with an MLP still reruns its MLP, giving 2L / (L + 1).
        bound = (H * L * L) / (L + H * L * (L - 1) / 2) if o["attn_only"] else 2 * L / (L + 1)
        diff = max(abs(a - b) for a, b in zip(o["values"], p["values"]))
        print(
            f"{name:<14}{o['seconds']:>9.3f}{p['seconds']:>9.3f}"
            f"{p['seconds'] / o['seconds']:>7.2f}x{bound:>7.2f}x{diff:>12.2e}"
            f"{o['rss_delta_mb']:>10.1f}{p['rss_delta_mb']:>10.1f}"
        )
    print("MB: growth of max RSS during the sweep (fresh process per measurement).")
    print(
        "bound: the most an exact single-head sweep can gain over the loop, in layer-units of "
        "work (attention-only: H L^2 / (L + H L (L - 1) / 2); with MLPs: 2L / (L + 1))."
    )


if __name__ == "__main__":
    main()

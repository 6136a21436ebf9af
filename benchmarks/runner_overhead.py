"""What an analysis costs beyond its passes: time over (counted forward-equivalents x one
plain forward), and the runner's own overhead per call (issue 44).

On the shipped induction model with 32 prompts of 25 tokens, side by side in one run: the
median time of one plain forward pass (``model(tokens)`` under ``torch.no_grad``), of
``ablate_heads`` (zero ablation of every head) and of ``logit_lens`` and ``head_scores``;
each analysis's ``forward_equivalents`` (its FLOPs over a plain pass's:
:mod:`interp.engine.cost`) and the ratio ``time / (forward_equivalents x plain)``, 1.0 for
an analysis that spends nothing but its passes. Then the runner alone: ``run`` of a task
whose chunk does nothing, its median time per call.

    python benchmarks/runner_overhead.py [--repeats 30]

Timings on a shared 2-core machine are noisy: read ratios within one run, alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import interp.analysis as A
from interp.datasets import repeated_random_tokens
from interp.engine.chunks import Footprint
from interp.engine.runner import Task, run
from interp.models import load_model


def median_ms(fn, repeats: int) -> float:
    fn()  # once-per-model checks, caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = load_model("induction-2l")
    tokens = repeated_random_tokens(32, 12, d_vocab=model.cfg.d_vocab, seed=0).tokens

    def plain() -> None:
        with torch.no_grad():
            model(tokens)

    base = median_ms(plain, args.repeats)
    print(f"induction-2l, {tokens.shape[0]} x {tokens.shape[1]} tokens, {args.repeats} repeats")
    print(f"plain forward: {base:.2f} ms")
    cases = {
        "ablate_heads": lambda: A.ablate_heads(model, tokens),
        "logit_lens": lambda: A.logit_lens(model, tokens, at=[-1]),
        "head_scores": lambda: A.head_scores(model, tokens),
    }
    for name, fn in cases.items():
        fe = float(fn().attrs["forward_equivalents"])
        ms = median_ms(fn, args.repeats)
        print(
            f"{name:14s} {ms:8.2f} ms  counted {fe:6.3f} forward-equivalents  "
            f"time / (counted x plain) = {ms / (fe * base):.2f}"
        )
    task = Task("empty", Footprint(0, 1), work=0.0, chunk=lambda c: {}, combine={})
    ms = median_ms(lambda: run(model, tuple(tokens.shape), task), args.repeats * 10)
    print(f"the runner alone (plan, one empty chunk, combine): {1e3 * ms:.0f} us per call")


if __name__ == "__main__":
    main()

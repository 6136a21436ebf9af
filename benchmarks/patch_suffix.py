"""Exact head patching with a shared prefix: ``resume-suffix`` against ``resume-blocks``.

SmolLM2-135M on the name-mover prompts (a prompt and its corrupted twin agree up to the
second subject): :func:`interp.analysis.patch_heads` of every head, denoising, timed in
alternating pairs on its own path (``resume-suffix``: later positions only, against the kept
keys and values of the shared ones) and with the shared prefix withheld (``resume-blocks``:
whole passes from each head's layer). Prints each pair's times, the ratio, the counted
forward-equivalents of each and the largest difference of the patched values relative to the
table's scale.

Usage:
    python benchmarks/patch_suffix.py [--prompts 12] [--pairs 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    """Time both paths in alternating pairs and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import torch

    import interp.analysis.components._pipeline as pipeline
    from interp.analysis import patch_heads
    from interp.core.metrics import logit_diff_metric
    from interp.datasets import name_mover_prompts
    from interp.models import load_model

    torch.set_num_threads(args.threads)
    model = load_model("smollm2-135m")
    prompts = name_mover_prompts(args.prompts, seed=0, tokenizer=model.tokenizer)
    metric = logit_diff_metric(prompts.io_ids, prompts.s_ids)
    shared = pipeline.shared_prefix

    def run(withheld: bool):
        pipeline.shared_prefix = (lambda a, b: 0) if withheld else shared
        start = time.perf_counter()
        df = patch_heads(model, prompts.clean, corrupted_tokens=prompts.corrupted,
                         metric=metric, direction="denoising")  # fmt: skip
        return time.perf_counter() - start, df

    first = shared(prompts.corrupted, prompts.clean)
    n = prompts.clean.shape[1]
    print(f"{args.prompts} prompts of {n} tokens, the first {first} shared; {args.threads} threads")
    for i in range(args.pairs):
        t_suffix, a = run(False)
        t_blocks, b = run(True)
        scale = max(1.0, float(b["patched"].abs().max()))
        gap = float((a["patched"] - b["patched"]).abs().max()) / scale
        print(
            f"pair {i}: {a.attrs['engine']} {t_suffix:.1f} s "
            f"({a.attrs['forward_equivalents']:.1f} fe), {b.attrs['engine']} {t_blocks:.1f} s "
            f"({b.attrs['forward_equivalents']:.1f} fe): {t_blocks / t_suffix:.2f}x, "
            f"largest difference {gap:.1e} of scale"
        )
    pipeline.shared_prefix = shared
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

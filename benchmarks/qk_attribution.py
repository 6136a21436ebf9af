"""QK attribution on SmolLM2: its cost in forward-pass equivalents, for an early and a late head.

Printed side by side in one run, on the name-mover prompts (12 prompts of 15
tokens): for L18H6 and L29H0, the last query against every key, by component,

* the wall time of ``qk_attribution`` over one plain forward pass of the same
  tokens (target at most 1.3), and the forward-equivalents it counts
  (``df.attrs["forward_equivalents"]``: the share of the model's blocks its
  stopped pass runs);
* where the time goes: the stopped forward pass that reads the head's inputs
  alone, and the rest (the pieces, their products and the check), each over
  one plain forward.

Each time is the best of ``--repeat`` rounds, the rounds interleaved so that a
busy machine slows every column alike; the same ratios in CPU time (this
process's, all threads) are printed beside them, which other processes on a
shared machine disturb less than wall time.

``--threads 1`` runs torch on one thread: on a machine shared with other jobs,
two threads that wait for each other at every operation measure the
scheduler more than the work.

    python benchmarks/qk_attribution.py [--device cpu|cuda] [--repeat 5] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import forward_time  # noqa: E402

HEADS = ((18, 6), (29, 0))


def main() -> None:
    from interp.analysis import qk_attribution
    from interp.analysis.heads.qk.inputs import head_inputs
    from interp.datasets import name_mover_prompts
    from interp.models import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model("smollm2-135m", device=args.device)
    tokens = name_mover_prompts(12, seed=0, tokenizer=model.tokenizer).clean.to(model.cfg.device)
    forward_time(model, tokens, repeat=1)  # warm up
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    counted: dict[tuple[int, int], float] = {}

    def clock(key: str, fn) -> None:
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        best[key] = min(best.get(key, float("inf")), time.perf_counter() - t)
        cpu[key] = min(cpu.get(key, float("inf")), time.process_time() - c)
        return out

    for _ in range(args.repeat):
        with torch.no_grad():
            clock("forward", lambda: model(tokens))
        for layer, head in HEADS:
            df = clock(
                f"attribution L{layer}H{head}",
                lambda l=layer, h=head: qk_attribution(model, tokens, layer=l, head=h),
            )
            counted[(layer, head)] = df.attrs["forward_equivalents"]
            with torch.no_grad():
                clock(f"pass L{layer}H{head}", lambda l=layer: head_inputs(model, tokens, None, l))
    fwd, fwd_cpu = best["forward"], cpu["forward"]
    print(
        f"one forward of {tuple(tokens.shape)} tokens: {fwd:.3f} s wall, {fwd_cpu:.3f} s CPU "
        f"(best of {args.repeat}, {torch.get_num_threads()} thread(s))"
    )
    for layer, head in HEADS:
        name = f"L{layer}H{head}"
        whole, stopped = best[f"attribution {name}"], best[f"pass {name}"]
        whole_cpu, stopped_cpu = cpu[f"attribution {name}"], cpu[f"pass {name}"]
        print(
            f"qk_attribution {name} (last query, every key, by component): {whole:.3f} s = "
            f"{whole / fwd:.2f} forward-equiv. wall (CPU {whole_cpu / fwd_cpu:.2f}; target <= "
            f"1.3), {counted[(layer, head)]:.3f} counted; its stopped pass {stopped / fwd:.2f} "
            f"(CPU {stopped_cpu / fwd_cpu:.2f}), the rest (pieces, products, check) "
            f"{(whole - stopped) / fwd:.2f} (CPU {(whole_cpu - stopped_cpu) / fwd_cpu:.2f})"
        )


if __name__ == "__main__":
    main()

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
busy machine slows every column alike.

    python benchmarks/qk_attribution.py [--device cpu|cuda] [--repeat 5]
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
    from interp.analysis.heads.qk_inputs import head_inputs
    from interp.datasets import name_mover_prompts
    from interp.models import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    model = load_model("smollm2-135m", device=args.device)
    tokens = name_mover_prompts(12, seed=0, tokenizer=model.tokenizer).clean.to(model.cfg.device)
    forward_time(model, tokens, repeat=1)  # warm up
    best: dict[str, float] = {}
    counted: dict[tuple[int, int], float] = {}

    def clock(key: str, fn) -> None:
        t = time.perf_counter()
        out = fn()
        best[key] = min(best.get(key, float("inf")), time.perf_counter() - t)
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
    fwd = best["forward"]
    print(f"one forward of {tuple(tokens.shape)} tokens: {fwd:.3f} s (best of {args.repeat})")
    for layer, head in HEADS:
        whole = best[f"attribution L{layer}H{head}"]
        stopped = best[f"pass L{layer}H{head}"]
        print(
            f"qk_attribution L{layer}H{head} (last query, every key, by component): "
            f"{whole:.3f} s = {whole / fwd:.2f} forward-equiv. wall (target <= 1.3), "
            f"{counted[(layer, head)]:.3f} counted; its stopped pass {stopped / fwd:.2f}, "
            f"the rest (pieces, products, check) {(whole - stopped) / fwd:.2f}"
        )


if __name__ == "__main__":
    main()

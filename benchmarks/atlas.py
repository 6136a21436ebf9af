"""The head atlas on SmolLM2 (270 heads): its cost against one plain forward of its probe.

Printed side by side in one run, on the atlas's default probe (8 sequences of
BOS + 50 random tokens twice, 101 tokens):

* one plain forward pass of the probe (no hooks), the unit;
* ``head_atlas`` on the same probe: its counted forward-equivalents
  (``attrs["forward_equivalents"]``: the passes it ran) and its wall time in
  forward-equivalents (its time over the forward's), which adds everything the
  passes' hooks compute (patterns, control patterns, rotary bands) and the
  weight products (OV eigenvalues, copy suppression, successorship, kernels).
  Target: at most 20 forward-equivalents of the probe plus weight products.

    python benchmarks/atlas.py [--device cpu|cuda] [--batch 8] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import forward_time, timed  # noqa: E402


def main() -> None:
    from interp.analysis import head_atlas, probe_tokens
    from interp.models import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    model = load_model("smollm2-135m", device=args.device)
    tokens = probe_tokens(model, n=args.batch, seed=0).to(model.cfg.device)
    head_atlas(model, tokens)  # warm-up: first-call checks and caches
    ratios = []
    for _ in range(args.repeat):  # forward, atlas, forward: the load of a shared machine moves
        before = forward_time(model, tokens, repeat=1)
        wall, df = timed(lambda: head_atlas(model, tokens))
        after = forward_time(model, tokens, repeat=1)
        fwd = (before + after) / 2
        ratios.append(wall / fwd)
        print(
            f"one forward of {tuple(tokens.shape)} tokens: {before:.2f} s before, {after:.2f} s "
            f"after; head_atlas: {wall:.2f} s = {wall / fwd:.1f} forward-equivalents of wall time"
        )
    n = model.cfg.n_layers * model.cfg.n_heads
    print(
        f"head_atlas, {n} heads: median {sorted(ratios)[len(ratios) // 2]:.1f} forward-equivalents "
        f"of wall time; counted passes {df.attrs['forward_equivalents']} forward-equivalents "
        f"(target <= 20 plus weight products); roles: "
        + ", ".join(f"{k} {v}" for k, v in df["role"].value_counts().items())
    )


if __name__ == "__main__":
    main()

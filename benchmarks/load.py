"""Cold start of a pretrained model: import, load, first and second forward (fresh process each).

The issue reported a 12 s first forward after ``load_model("smollm2-135m")``;
this prints where a cold start's time goes, each measured in a fresh Python
process, so the import and first-call costs are real.

    python benchmarks/load.py [--model smollm2-135m] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
from interp.models import load_model
t1 = time.perf_counter()
model = load_model(sys.argv[1], device=sys.argv[2])
t2 = time.perf_counter()
tokens = torch.randint(2, 1000, (4, 64), device=sys.argv[2])
with torch.no_grad():
    model(tokens)
    t3 = time.perf_counter()
    model(tokens)
    t4 = time.perf_counter()
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.3.attn.hook_z", lambda z, hook: z)])
    t5 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first forward": t3 - t2,
                  "second forward": t4 - t3, "first run_with_hooks": t5 - t4}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print(
        f"{args.model} on {args.device}, 4 x 64 tokens, seconds per stage (fresh process each run)"
    )
    for run in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, args.model, args.device],
            capture_output=True,
            text=True,
            check=True,
        )
        times = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"run {run}: " + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))


if __name__ == "__main__":
    main()

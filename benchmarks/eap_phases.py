"""Where EAP's time goes: one ``attribute_edges`` call timed by phase, beside a plain forward
and a plain forward + backward of the same model and tokens (parameters frozen, as in EAP).

The phases: the corrupted run that records every sender's output (with setup), the clean
forward and backward pass (``receiver_gradients``), the receivers' gradients carried through
their heads' weights and norms (``receiver_gradient_matrix``), the senders x receivers
product (``score_edges``) and the table. The first call on a model also runs the edge
engine's once-per-model exactness probe; the second call, timed here, does not.

    python benchmarks/eap_phases.py FOLDER [--batch 4] [--pos 64]

``FOLDER``: a model folder or name ``load_model`` reads (``scale/run.py --keep DIR`` keeps the
random-weight folders of the real shapes).
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_time  # noqa: E402


def main() -> None:
    import torch
    from scale.calls import _task

    import interp.analysis as A
    import interp.analysis.circuits.edge_attribution as E
    import interp.engine.edges.gradients as G
    from interp.models import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--pos", type=int, default=64)
    args = parser.parse_args()
    model = load_model(args.folder)
    task = _task(model, dict(batch=args.batch, pos=args.pos))
    times: dict[str, float] = collections.defaultdict(float)

    def timed(module: Any, name: str) -> None:
        f = getattr(module, name)

        @functools.wraps(f)
        def wrapper(*a, **k):
            t = time.perf_counter()
            out = f(*a, **k)
            sync()
            times[name] += time.perf_counter() - t
            return out

        setattr(module, name, wrapper)

    # where each phase is looked up when it runs: the gradients' module calls its own
    for name in ("receiver_gradients", "receiver_gradient_matrix", "score_edges"):
        timed(G, name)
    timed(E, "_table")
    sync = torch.cuda.synchronize if task["clean"].is_cuda else (lambda: None)
    clean, kw = task["clean"], dict(corrupted_tokens=task["corrupted"], metric=task["metric"])
    with torch.no_grad():
        model(clean)
        fwd = best_time(lambda: (model(clean), sync()), repeat=2)
    print(f"forward {fwd:.2f} s")
    A.attribute_edges(model, clean, **kw)  # first call: the once-per-model probe
    times.clear()
    t = time.perf_counter()
    df = A.attribute_edges(model, clean, **kw)
    sync()
    total = time.perf_counter() - t
    print(f"EAP (second call) {total:.2f} s = {total / fwd:.2f} x forward; {len(df):,} edges")
    for k, v in times.items():
        print(f"  {k:28s} {v:6.2f} s = {v / fwd:.2f}")
    rest = total - sum(times.values())
    print(f"  {'corrupted run and setup':28s} {rest:6.2f} s = {rest / fwd:.2f}")
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.enable_grad():
        for _ in range(2):  # the second is reported
            t = time.perf_counter()
            logits = model.run_with_hooks(
                clean, fwd_hooks=[("hook_embed", lambda x, hook: x.detach().requires_grad_())]
            )
            sync()
            t1 = time.perf_counter()
            task["metric"](logits, clean).backward()
            sync()
            t2 = time.perf_counter()
    print(f"plain forward with grad {(t1 - t) / fwd:.2f}, backward {(t2 - t1) / fwd:.2f} x forward")


if __name__ == "__main__":
    main()

"""Exact single-head zero-ablation sweeps: interp's engine vs the per-head run_with_hooks loop.

For each case, in one run and side by side: the time of ``ablate_heads`` and
of the plain TransformerLens loop (one ``run_with_hooks`` per head, which is
what the engine must equal), their ratio, the bound for an exact sweep that
recomputes only what an edit changes, the largest difference between the two
tables, and the engine path. Cases: the shipped 2 x 2 induction model, a
12-layer GPT-2-style random model, and SmolLM2-135M on 4 x 64 tokens (head
subsets from one layer, from three spread layers, and all 270 heads).

The loop is the plain way to get the same table: one clean run (the table's
``clean`` and ``effect`` need it) and one ``run_with_hooks`` per head. The
bound counts work in block-units: the loop runs ``(N + 1) L`` blocks for ``N``
heads; an exact sweep runs one clean pass (``L``), then for a head in layer
``l`` (0-based) the blocks after ``l`` on attention-only models (``L - 1 - l``;
2.0x for the shipped 2 x 2 model) or block ``l`` and those after it on
models with MLPs (``L - l``; about ``2L / (L + 1)`` = 1.94x for a full SmolLM2
sweep, more for late layers). Work the bound leaves out: packing several
edits into one pass (a CPU amortises a pass's fixed cost over more tokens) and
skipping the unembedding of rows the metric never reads, so a sweep can beat it.

    python benchmarks/ablation_sweep.py [--device cpu|cuda] [--quick]

Timings on a shared 2-core machine are noisy: read ratios within one run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def loop(model, tokens, heads, metric):
    """The plain way to get the same table: a clean run, then one run_with_hooks per head."""
    out = []
    with torch.no_grad():
        out.append(float(metric(model(tokens), tokens)))  # clean, for the effect column
        for l, h in heads:

            def hook(z, hook, h=h):
                z = z.clone()
                z[:, :, h] = 0.0
                return z

            logits = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{l}.attn.hook_z", hook)])
            out.append(float(metric(logits, tokens)))
    return out[1:]


def bound(model, heads) -> float:
    """(N + 1) L block-runs for the loop, against L + sum of what each edit reruns."""
    L = model.cfg.n_layers
    attn_only = getattr(model.cfg, "attn_only", False)
    rerun = sum((L - 1 - l) if attn_only else (L - l) for l, _ in heads)
    return (len(heads) + 1) * L / (L + rerun)


def timed(fn, min_seconds: float):
    """Best wall time over at least one call and as many as fit ``min_seconds``."""
    best, spent, value = float("inf"), 0.0, None
    while spent < min_seconds or value is None:
        t = time.perf_counter()
        value = fn()
        took = time.perf_counter() - t
        best, spent = min(best, took), spent + took
    return best, value


def case(name, model, tokens, heads, metric, min_seconds):
    from interp.analysis.components.ablation import ablate_heads

    labels = [f"L{l}H{h}" for l, h in heads]
    ablate_heads(model, tokens[:1, :8], metric=lambda lg, t: lg.float().mean(), heads=labels[:1])
    ours_t, df = timed(
        lambda: ablate_heads(model, tokens, metric=metric, heads=labels), min_seconds
    )
    loop_t, ref = timed(lambda: loop(model, tokens, sorted(heads), metric), min_seconds)
    diff = float(np.abs(df["ablated"].to_numpy() - np.array(ref)).max())
    print(
        f"{name:<34}{len(heads):>6}{ours_t:>9.2f}{loop_t:>9.2f}{loop_t / ours_t:>7.2f}x"
        f"{bound(model, heads):>7.2f}x{diff:>11.1e}  {df.attrs['engine']}",
        flush=True,
    )


def main() -> None:
    from interp.core.metrics import loss_metric
    from interp.datasets import repeated_random_tokens
    from interp.models import load_model
    from interp.models.hf import random_gpt2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="skip the full SmolLM2 sweep")
    args = parser.parse_args()
    print(
        f"{'case':<34}{'heads':>6}{'ours s':>9}{'loop s':>9}{'ratio':>8}{'bound':>8}"
        f"{'max |diff|':>11}  path"
    )
    ind = load_model("induction-2l", device=args.device)
    data = repeated_random_tokens(32, 23, d_vocab=64, seed=0)
    case(
        "induction-2l, 32 x 47 tokens",
        ind,
        data.tokens.to(args.device),
        [(l, h) for l in range(2) for h in range(2)],
        loss_metric(data.loss_mask),
        2.0,
    )
    gpt = random_gpt2(12, d_model=256, n_heads=8, vocab=2000, n_ctx=256).to(args.device)
    data = repeated_random_tokens(8, 50, d_vocab=2000, seed=0)
    case(
        "gpt2-style 12L x 8H, 8 x 101",
        gpt,
        data.tokens.to(args.device),
        [(l, h) for l in range(12) for h in range(8)],
        loss_metric(data.loss_mask),
        2.0,
    )
    smol = load_model("smollm2-135m", device=args.device)
    data = repeated_random_tokens(4, 31, d_vocab=int(smol.cfg.d_vocab), bos=1, seed=0)
    tokens, metric = data.tokens.to(args.device), loss_metric(data.loss_mask)
    subsets = {
        "smollm2, layer 0 (4 x 63)": [(0, h) for h in range(9)],
        "smollm2, layer 29 (4 x 63)": [(29, h) for h in range(9)],
        "smollm2, layers 0, 10, 20 (4 x 63)": [(l, h) for l in (0, 10, 20) for h in range(9)],
        "smollm2, layers 0, 15, 29 (4 x 63)": [(l, h) for l in (0, 15, 29) for h in range(9)],
    }
    if not args.quick:
        subsets["smollm2, all 270 heads (4 x 63)"] = [(l, h) for l in range(30) for h in range(9)]
    for name, heads in subsets.items():
        case(name, smol, tokens, heads, metric, 0.0)
    print("ratio = loop / ours; bound = (N + 1) L / (L + blocks rerun), see the module docstring.")


if __name__ == "__main__":
    main()

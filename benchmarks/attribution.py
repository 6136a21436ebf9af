"""Attribution patching on SmolLM2: cost in forward passes, and agreement with the exact sweep.

Two tasks, all 270 heads: zero-ablation on the induction probe (BOS + 31
random word tokens, twice; loss on the repeated half), and patching on the
name-mover task (clean into corrupted, logit difference IO - S). For each
estimator, printed in one run: its time in forward-pass equivalents (its
wall time over one plain forward of the same tokens), the exact sweep's time,
Spearman correlation of estimate and exact over all heads, and how many of
the exact top 10 (by |effect|) the estimate's top 10 and top 30 contain.
Estimators: the plain first-order estimate; with AtP*'s QK fix
(``correction="qk"``); and the two-stage ``verify=30`` (the estimate for every
head, then the exact value of its top 30, ranked on the exact values).

    python benchmarks/attribution.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

VERIFY = 30  # exact values for the estimate's top 30: the two-stage way to an exact top 10


def forward_time(model, tokens) -> float:
    with torch.no_grad():
        model(tokens)
        t = time.perf_counter()
        for _ in range(3):
            model(tokens)
    return (time.perf_counter() - t) / 3


def report(task, estimators, exact, exact_t, fwd):
    from interp.analysis.components.attribution import estimate_agreement

    print(
        f"{task:<28}{'exact sweep':<26}{exact_t / fwd:>8.1f}{exact_t:>10.1f}{1.0:>10.3f}"
        f"{10:>7}/10{10:>7}/10",
        flush=True,
    )
    for name, (seconds, est) in estimators.items():
        rho, t10, t30 = estimate_agreement(exact, est)["value"].tolist()
        t10, t30 = int(t10), int(t30)
        print(
            f"{task:<28}{name:<26}{seconds / fwd:>8.1f}{exact_t:>10.1f}{rho:>10.3f}{t10:>7}/10"
            f"{t30:>7}/10",
            flush=True,
        )


def main() -> None:
    from interp.analysis.components.ablation import ablate_heads
    from interp.analysis.components.attribution import attribute_heads
    from interp.analysis.components.patching import patch_heads
    from interp.analysis.senses.words import ordinary_word_ids
    from interp.core.metrics import logit_diff_metric, loss_metric
    from interp.datasets import name_mover_prompts, repeated_random_tokens
    from interp.models import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    model = load_model("smollm2-135m", device=args.device)
    print(
        f"{'task':<28}{'estimator':<26}{'fwd-eq':>8}{'exact s':>10}{'Spearman':>10}"
        f"{'top10':>10}{'top30':>10}"
    )

    data = repeated_random_tokens(
        4, 31, d_vocab=int(model.cfg.d_vocab), bos=1, seed=0, token_ids=ordinary_word_ids(model)
    )
    tokens, metric = data.tokens.to(args.device), loss_metric(data.loss_mask)
    fwd = forward_time(model, tokens)
    t = time.perf_counter()
    exact = ablate_heads(model, tokens, metric=metric).set_index("label")["effect"]
    exact_t = time.perf_counter() - t
    estimators = {}
    for correction in ("none", "qk"):
        t = time.perf_counter()
        df = attribute_heads(model, tokens, metric=metric, ablation="zero", correction=correction)
        estimators[f"zero, correction={correction}"] = (
            time.perf_counter() - t,
            df.set_index("label")["estimate"],
        )
    t = time.perf_counter()
    df = attribute_heads(model, tokens, metric=metric, ablation="zero", verify=VERIFY)
    ranked = df.set_index("label")
    estimators[f"zero, verify={VERIFY}"] = (
        time.perf_counter() - t,
        ranked["exact"].fillna(ranked["estimate"]),  # exact where verified, else the estimate
    )
    report("induction probe (zero)", estimators, exact, exact_t, fwd)

    p = name_mover_prompts(12, seed=0, tokenizer=model.tokenizer)
    clean, corrupted = p.clean.to(args.device), p.corrupted.to(args.device)
    ld = logit_diff_metric(p.io_ids, p.s_ids)
    fwd = forward_time(model, corrupted)
    t = time.perf_counter()
    exact = patch_heads(
        model, clean, corrupted_tokens=corrupted, metric=ld, direction="denoising"
    ).set_index("label")["effect"]
    exact_t = time.perf_counter() - t
    estimators = {}
    for correction in ("none", "qk"):
        t = time.perf_counter()
        df = attribute_heads(
            model,
            clean,
            ablation="patch",
            direction="denoising",
            corrupted_tokens=corrupted,
            metric=ld,
            correction=correction,
        )
        estimators[f"patch, correction={correction}"] = (
            time.perf_counter() - t,
            df.set_index("label")["estimate"],
        )
    t = time.perf_counter()
    df = attribute_heads(
        model, clean, ablation="patch", direction="denoising", corrupted_tokens=corrupted,
        metric=ld, verify=VERIFY,
    )  # fmt: skip
    ranked = df.set_index("label")
    estimators[f"patch, verify={VERIFY}"] = (
        time.perf_counter() - t,
        ranked["exact"].fillna(ranked["estimate"]),  # exact where verified, else the estimate
    )
    report("name movers (patch)", estimators, exact, exact_t, fwd)
    print("fwd-eq: the estimate's wall time over one plain forward of the same tokens (the exact")
    print("sweep is 'exact s' / one forward);")
    print(
        "top10 / top30: how many of the exact top 10 (by |effect|) the estimate's top 10 / 30 hold."
    )


if __name__ == "__main__":
    main()

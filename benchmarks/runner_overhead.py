"""What an analysis costs beyond its passes: time over (counted forward-equivalents x one
plain forward), and the runner's own overhead per call (issue 44).

On the shipped induction model with 32 prompts of 25 tokens: one plain forward pass
(``model(tokens)`` under ``torch.no_grad``) and each analysis, timed in alternation (plain,
then every case, ``--repeats`` rounds, after a warm-up round), so that load from elsewhere
falls on all of them alike. Per case: its median time, its ``forward_equivalents`` (its
FLOPs over a plain pass's: :mod:`interp.engine.cost`) and the ratio ``time /
(forward_equivalents x plain)``, 1.0 for an analysis that spends nothing but its passes.
The cases: ``ablate_heads`` (zero ablation of every head; again with ``progress=True``, its
bar written to nowhere), ``logit_lens`` and ``head_scores``. Then the runner alone: ``run``
of a task whose chunk does nothing, its median time per call in ms. Then the sweeps (issue
47): ``ablate_heads``, ``patch_heads`` and ``path_patch`` of every head (a logit difference
at the last position, the corrupted prompts' second half from other random tokens).

``--gpt2`` also times the sweeps on a small random GPT-2-shaped bridge
(:func:`interp.models.hf.random_gpt2`: 2 layers, d_model 128, 4 heads, an MLP, vocabulary
512) with the same 32 x 25 tokens; ``--smollm2`` on SmolLM2-135M, the heads of layers 0, 15
and 29 (27 of 270), in ``repeats // 20`` rounds (a round takes minutes).

    python benchmarks/runner_overhead.py [--repeats 50] [--threads N] [--cpu-time] [--gpt2]
        [--smollm2]

Timings on a shared 2-core machine are noisy: read ratios within one run, alone.
``--cpu-time`` times by this process's CPU time instead of the wall clock: with
``--threads 1`` it is what the analysis itself spent, whatever else runs beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import interp.analysis as A
from interp.datasets import repeated_random_tokens
from interp.engine.chunks import Footprint
from interp.engine.runner import Task, run
from interp.models import load_model

sys.path.insert(0, str(Path(__file__).parent))
from _util import alternating, clock_of, clock_options  # noqa: E402

CLOCK = time.perf_counter  # --cpu-time: time.process_time


def report(model, tokens, cases: dict[str, Callable], repeats: int) -> None:
    """Time ``cases`` against one plain forward of ``tokens`` and print each ratio."""

    def plain() -> None:
        with torch.no_grad():
            model(tokens)

    counted = {k: float(fn().attrs["forward_equivalents"]) for k, fn in cases.items()}
    ms = alternating({"plain": plain, **cases}, repeats, CLOCK)
    base = ms.pop("plain")
    print(f"plain forward: {base:.2f} ms")
    for name, t in ms.items():
        fe = counted[name]
        print(
            f"{name:24s} {t:8.2f} ms  counted {fe:6.3f} forward-equivalents  "
            f"time / (counted x plain) = {t / (fe * base):.3f}  beyond its passes "
            f"{t - fe * base:+.2f} ms"
        )


def quiet(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with its stderr (a progress bar) written to nowhere."""

    def call() -> object:
        with contextlib.redirect_stderr(io.StringIO()):
            return fn()

    return call


def sweep_cases(model, title: str, repeats: int, heads: list[str] | None = None) -> None:
    """``ablate_heads``, ``patch_heads`` and ``path_patch`` (``heads``, or every head, as
    the edits and the senders) on 32 x 25 repeated tokens: the patches' corrupted prompts
    take their second half from other random tokens, scored by a logit difference at the
    last position."""
    from interp.core.metrics import logit_diff_metric

    vocab = int(model.cfg.d_vocab)
    data = repeated_random_tokens(32, 12, d_vocab=vocab, seed=0).tokens
    other = repeated_random_tokens(32, 12, d_vocab=vocab, seed=1).tokens
    corrupted = data.clone()
    corrupted[:, 13:] = other[:, 13:]
    patch = dict(corrupted_tokens=corrupted, metric=logit_diff_metric(data[:, -1], other[:, -1]))
    print(f"\n{title}, {tuple(data.shape)} tokens")
    cases = {
        "ablate_heads": lambda: A.ablate_heads(model, data, heads=heads),
        "patch_heads": lambda: A.patch_heads(model, data, heads=heads, **patch),
        "path_patch": lambda: A.path_patch(model, data, senders=heads, **patch),
    }
    report(model, data, cases, repeats)
    for name, fn in cases.items():
        print(f"{name}: engine {fn().attrs.get('engine', '-')}")


def gpt2_cases(repeats: int) -> None:
    """The sweeps on a random GPT-2-shaped bridge, every head."""
    from interp.models.hf import random_gpt2

    model = random_gpt2(2, d_model=128, n_heads=4, vocab=512, n_ctx=64, seed=0)
    sweep_cases(model, "random GPT-2 bridge (2 layers, d_model 128, 4 heads)", repeats)


def smollm2_cases(repeats: int) -> None:
    """The sweeps of the heads of layers 0, 15 and 29 (27 of 270) on SmolLM2-135M."""
    model = load_model("smollm2-135m")
    heads = [f"L{l}H{h}" for l in (0, 15, 29) for h in range(model.cfg.n_heads)]
    sweep_cases(model, f"SmolLM2-135M bridge, {len(heads)} heads of layers 0, 15, 29",
                repeats, heads)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    clock_options(ap)
    ap.add_argument("--gpt2", action="store_true", help="also a random GPT-2-shaped bridge")
    ap.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M (minutes)")
    args = ap.parse_args()
    global CLOCK
    CLOCK = clock_of(args)
    torch.manual_seed(0)
    model = load_model("induction-2l")
    tokens = repeated_random_tokens(32, 12, d_vocab=model.cfg.d_vocab, seed=0).tokens
    print(
        f"induction-2l, {tokens.shape[0]} x {tokens.shape[1]} tokens, {args.repeats} "
        f"alternating rounds, {torch.get_num_threads()} threads, "
        f"{'CPU time' if args.cpu_time else 'wall clock'}"
    )
    cases = {
        "ablate_heads": lambda: A.ablate_heads(model, tokens),
        "ablate_heads progress": quiet(lambda: A.ablate_heads(model, tokens, progress=True)),
        "logit_lens": lambda: A.logit_lens(model, tokens, at=[-1]),
        "head_scores": lambda: A.head_scores(model, tokens),
    }
    report(model, tokens, cases, args.repeats)
    task = Task("empty", Footprint(0, 1), work=0.0, chunk=lambda c: {}, combine={})
    ms = alternating(
        {"runner": lambda: run(model, tuple(tokens.shape), task)}, args.repeats * 10, CLOCK
    )
    print(f"the runner alone (plan, one empty chunk, combine): {ms['runner']:.3f} ms per call")
    sweep_cases(model, "induction-2l, the sweeps", args.repeats)
    if args.gpt2:
        gpt2_cases(args.repeats)
    if args.smollm2:
        smollm2_cases(max(1, args.repeats // 20))


if __name__ == "__main__":
    main()

"""Training a dictionary on SmolLM2-135M: throughput, peak memory and the dictionary's figures.

Trains a TopK dictionary (:func:`interp.dictionaries.train_dictionary`) at
``blocks.18.hook_resid_pre`` of SmolLM2-135M on the offline corpus (the Python standard
library's source, :func:`interp.datasets.python_text.python_text`), then scores it on the
held-out files (:func:`interp.dictionaries.dictionary_report`), and writes the folder (sae-lens
layout) under the cache (``interp.core.paths.cache_dir()/dictionaries/...``, not the
repository: about 19 MB at 4,096 features).

Measured, each in one run on this machine:

* the activation pass alone: tokens per second of the forward cut at the hook;
* training: positions per second over the whole of ``train_dictionary`` (activation passes,
  optimiser steps; its built-in report is given one sequence, so it costs nothing here);
* peak memory: the resident set's growth over the loaded model during training, sampled
  every 2 ms, and the process's peak resident set;
* the held-out report (variance explained, L0, dead share, spliced losses), timed apart.

Other processes share the CPU cores; the script prints the load average before and after
so a reader can tell whether it ran alone.

Usage:
    python benchmarks/dictionary_training.py [--sequences 4800] [--features 4096] [--k 32]
        [--seq-len 128] [--eval-sequences 64] [--memory 4GiB] [--json out.json] [--out folder]

The defaults rebuild the dictionary the docs describe. Training is deterministic by seed for
a given chunking: the chunks (planned under ``--memory``, default a quarter of the free
memory) decide which positions are shuffled together, so rebuilding it bit for bit needs a
``--memory`` that plans as many chunks (``metadata.training.chunks`` in its ``cfg.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import peak_growth  # noqa: E402

from interp.cli.args import memory_arg  # noqa: E402

HOOK = "blocks.18.hook_resid_pre"


def main(argv: list[str] | None = None) -> int:
    """Train, score, save; print the figures (and write ``--json``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--hook", default=HOOK)
    p.add_argument("--sequences", type=int, default=4800)
    p.add_argument("--eval-sequences", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--features", type=int, default=4096)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory", type=memory_arg, help="memory budget, e.g. 4GiB (default: a "
                   "quarter of the free memory)")  # fmt: skip
    p.add_argument("--out", help="the dictionary's folder (default: under the cache)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)

    import torch

    from interp.core.paths import cache_dir
    from interp.datasets.python_text import python_text
    from interp.dictionaries import dictionary_report, train_dictionary
    from interp.dictionaries.activations import hook_activations
    from interp.models import load_model

    torch.manual_seed(args.seed)
    load_before = os.getloadavg()
    t = time.perf_counter()
    model = load_model(args.model)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    train = python_text(model, n_sequences=args.sequences, seq_len=args.seq_len)
    test = python_text(model, n_sequences=args.eval_sequences, seq_len=args.seq_len, split="test")
    corpus_s = time.perf_counter() - t

    probe = train.tokens[:8]
    hook_activations(model, probe, args.hook)  # warm-up (the first pass is slow)
    t = time.perf_counter()
    for _ in range(2):
        hook_activations(model, probe, args.hook)
    act_rate = 2 * probe.numel() / (time.perf_counter() - t)

    box: dict = {}

    def fit() -> None:
        t0 = time.perf_counter()
        box["fit"] = train_dictionary(
            model, train.tokens, hook=args.hook, n_features=args.features, k=args.k,
            seed=args.seed, epochs=args.epochs, batch_size=args.batch_size, skip_columns=1,
            eval_tokens=train.tokens[:1], memory_budget=args.memory, progress=True,
        )  # fmt: skip
        box["s"] = time.perf_counter() - t0

    growth = peak_growth(fit)
    fit_, train_s = box["fit"], box["s"]
    t = time.perf_counter()
    report = dictionary_report(model, test.tokens, fit_.dictionary, skip_columns=1)
    report_s = time.perf_counter() - t
    load_after = os.getloadavg()

    D = fit_.dictionary
    corpus = train.attrs()
    corpus["eval"] = {k: v for k, v in test.attrs().items() if k != "files"}
    D.metadata.update(report=report.as_dict(), corpus=corpus)
    D.metadata["command"] = shlex.join(
        ["python", "benchmarks/dictionary_training.py", *sys.argv[1:]]
    )
    safe = args.hook.replace(".", "-")
    out = (
        Path(args.out)
        if args.out
        else cache_dir() / "dictionaries" / f"{args.model}-{safe}-{args.features}"
    )
    D.save(out)
    positions = fit_.training["positions_seen"]
    figures = dict(
        model=args.model, hook=args.hook, n_features=args.features, k=args.k,
        corpus=train.name, corpus_files=len(train.files), train_tokens=train.n_tokens,
        positions_trained=positions, eval_tokens=test.n_tokens, eval_files=len(test.files),
        steps=fit_.training["steps"], chunks=fit_.training["chunks"], memory_budget=args.memory,
        fraction_variance_explained=report.fraction_variance_explained, l0=report.l0,
        dead_fraction=report.dead_fraction, clean_loss=report.clean_loss,
        loss_with_error=report.loss_with_error, loss_without_error=report.loss_without_error,
        train_seconds=train_s, train_positions_per_s=positions / train_s,
        activation_tokens_per_s=act_rate, report_seconds=report_s, load_seconds=load_s,
        corpus_seconds=corpus_s, peak_growth_bytes=growth,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        loadavg_before=load_before, loadavg_after=load_after, torch_threads=torch.get_num_threads(),
        folder=str(out),
    )  # fmt: skip
    for key, value in figures.items():
        print(f"{key:>28}: {value:,.4f}" if isinstance(value, float) else f"{key:>28}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``interp train dictionary``: a TopK dictionary at a hook, trained on an offline corpus.

The corpus is the Python standard library's source (``--corpus python``, held-out files
for the report) or the induction model's own training distribution (``--corpus
repeated``: random segments repeated after random prefixes). The folder written is in the
sae-lens layout; its ``cfg.json`` metadata records the command, the corpus (files, token
count) and the training figures.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from interp.cli.args import add_model, check_model_args, count_arg, load, memory_arg
from interp.core.protocol import HookedModel


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def add_dictionary_options(p: argparse.ArgumentParser) -> None:
    """The options of ``interp train dictionary`` (``--model``, ``--hook``, ``--features``...)."""
    g = p.add_argument_group("dictionary")
    add_model(g)
    g.add_argument("--hook", help="hook the dictionary reads, e.g. blocks.1.hook_resid_pre")
    g.add_argument("--features", type=count_arg(1), help="number of features (d_sae)")
    g.add_argument("--k", type=count_arg(1), help="features active per position (TopK)")
    g.add_argument("--corpus", choices=("python", "repeated"), default="python",
                   help="python: the standard library's source; repeated: the induction "
                   "model's training distribution")  # fmt: skip
    g.add_argument("--sequences", type=count_arg(1), default=512, help="training sequences")
    g.add_argument("--eval-sequences", type=count_arg(1), default=64,
                   help="held-out sequences the report is computed on")  # fmt: skip
    g.add_argument("--seq-len", type=count_arg(2), help="tokens per sequence (default: "
                   "128, or the model's context if shorter)")  # fmt: skip
    g.add_argument("--epochs", type=count_arg(1), default=1)
    g.add_argument("--batch-size", type=count_arg(1), default=1024, help="positions per step")
    g.add_argument("--lr", type=_positive_float, help="Adam learning rate (default: Gao et al.)")
    g.add_argument("--skip-columns", type=count_arg(0), default=None,
                   help="leading columns not trained on (default: 1 on python text, the BOS "
                   "column; 0 on repeated tokens)")  # fmt: skip
    g.add_argument("--memory", type=memory_arg, help="memory budget, e.g. 4GiB")


def corpus_tokens(
    model: HookedModel, args: argparse.Namespace, seq_len: int
) -> tuple[Any, Any, dict]:
    """Training and held-out tokens of ``--corpus``, and what the report records of them."""
    if args.corpus == "python":
        from interp.datasets.python_text import python_text

        train = python_text(model, n_sequences=args.sequences, seq_len=seq_len)
        test = python_text(model, n_sequences=args.eval_sequences, seq_len=seq_len, split="test")
        info = train.attrs()
        info["eval"] = {k: v for k, v in test.attrs().items() if k != "files"}
        return train.tokens, test.tokens, info
    from interp.datasets import TRAIN_LENGTHS, training_sequences

    _check_repeated_seq_len(model, args, seq_len)

    def draw(n: int, seed: int) -> Any:
        return training_sequences(n, d_vocab=int(model.cfg.d_vocab), seq_len=seq_len, seed=seed)

    train, test = draw(args.sequences, args.seed + 1), draw(args.eval_sequences, args.seed + 2)
    info = dict(name="repeated-random-tokens", segment_lengths=list(TRAIN_LENGTHS),
                n_tokens=int(train.numel()), eval_tokens=int(test.numel()),
                seeds=[args.seed + 1, args.seed + 2])  # fmt: skip
    return train, test, info


def _check_repeated_seq_len(model: HookedModel, args: argparse.Namespace, seq_len: int) -> None:
    """Refuse a ``--seq-len`` that ``--corpus repeated`` cannot fill, naming the option."""
    from interp.core.errors import InterpError
    from interp.datasets import TRAIN_LENGTHS, repeated_seq_lens

    d_vocab, n_ctx = int(model.cfg.d_vocab), getattr(model.cfg, "n_ctx", None)
    lo, hi = repeated_seq_lens(d_vocab)
    hi = min(hi, n_ctx or hi)
    given = f"--seq-len {seq_len}" if args.seq_len else f"the default --seq-len ({seq_len})"
    why = (
        f"its segments are up to {max(TRAIN_LENGTHS)} tokens, shown twice after BOS, and a "
        f"sequence's tokens are distinct in this model's {d_vocab}-token vocabulary"
    )
    if lo > hi:
        raise InterpError(
            f"--corpus repeated cannot fill any sequence for this model ({why}; its context is "
            f"{n_ctx}): use --corpus python"
        )
    if not lo <= seq_len <= hi:
        raise InterpError(
            f"--corpus repeated cannot fill {given} ({why}): pass --seq-len {lo}..{hi}, or use "
            "--corpus python"
        )


def run_train_dictionary(args: argparse.Namespace) -> int:
    """Check the options, train, write the folder, print the figures."""
    from interp.core.errors import InterpError
    from interp.outputs.files import check_output_dir

    missing = [
        o
        for o, v in (
            ("--out", args.out),
            ("--hook", args.hook),
            ("--features", args.features),
            ("--k", args.k),
        )
        if v is None
    ]
    if missing:
        raise InterpError(f"interp train dictionary needs {', '.join(missing)}")
    if args.k > args.features:
        raise InterpError(f"--k {args.k} is more than --features {args.features}")
    out = check_output_dir(args.out, "--out")
    check_model_args(args)
    from interp.dictionaries import train_dictionary

    model = load(args)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    seq_len = args.seq_len or min(128, n_ctx or 128)
    skip = args.skip_columns if args.skip_columns is not None else int(args.corpus == "python")
    tokens, eval_tokens, corpus = corpus_tokens(model, args, seq_len)
    fit = train_dictionary(
        model, tokens, hook=args.hook, n_features=args.features, k=args.k, seed=args.seed,
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, skip_columns=skip,
        eval_tokens=eval_tokens, memory_budget=args.memory, progress=not args.quiet,
    )  # fmt: skip
    D = fit.dictionary
    D.metadata["corpus"] = corpus
    D.metadata["command"] = shlex.join(["interp", *sys.argv[1:]]) if sys.argv else ""
    D.save(out)
    r = fit.report
    print(
        f"trained {fit.training['steps']} steps on {fit.training['positions_seen']:,} positions "
        f"of {corpus['name']} ({corpus['n_tokens']:,} tokens)"
    )
    print(
        f"held out: variance explained {r.fraction_variance_explained:.4f}, L0 {r.l0:.2f}, "
        f"dead {r.dead_fraction:.1%}"
    )
    if r.clean_loss is not None:
        print(
            f"loss: clean {r.clean_loss:.4f}, spliced with error {r.loss_with_error:.4f}, "
            f"without error {r.loss_without_error:.4f}"
        )
    print(f"wrote {out}")
    return 0

"""``interp ablate`` and ``interp patch``: head sweeps from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from interp.errors import InterpError


def add_parsers(sub: Any) -> None:
    ab = sub.add_parser("ablate", help="ablate every head (or some) and export the table")
    ab.add_argument(
        "--model",
        default="induction-2l",
        help="induction-2l, a checkpoint directory, or a local Hugging Face directory",
    )
    ab.add_argument("--method", default="zero", help="zero | mean | resample")
    ab.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    ab.add_argument("--heads", help="comma-separated labels, e.g. L1H4,L0H7 (default: all)")
    ab.add_argument("--metric", default="loss", help="loss | logit-diff")
    ab.add_argument("--logit-diff", help="CORRECT,INCORRECT token ids for --metric logit-diff")
    src = ab.add_mutually_exclusive_group()
    src.add_argument("--tokens", help="file of token ids: .npy, or .txt with one sequence a line")
    src.add_argument("--prompt", help="text (ids separated by spaces for models without tokenizer)")
    src.add_argument("--repeated", type=int, help="N random tokens repeated twice (default)")
    ab.add_argument("--batch", type=int, default=16, help="sequences for --repeated")
    ab.add_argument("--seed", type=int, default=0)
    ab.add_argument("--top", type=int, default=10, help="heads to print, by |delta|")
    ab.set_defaults(func=run_ablate)
    pa = sub.add_parser("patch", help="per-head activation patching, clean into corrupted")
    pa.add_argument("--model", default="induction-2l")
    pa.add_argument("--clean", required=True, help="clean prompt")
    pa.add_argument("--corrupted", required=True, help="corrupted prompt (same length)")
    pa.add_argument("--metric", default="logit-diff", help="logit-diff | loss")
    pa.add_argument("--logit-diff", help="CORRECT,INCORRECT token ids")
    pa.add_argument("--positions", help="comma-separated positions to patch (default: all)")
    pa.add_argument("--heads", help="comma-separated labels (default: all)")
    pa.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    pa.add_argument("--top", type=int, default=10)
    pa.set_defaults(func=run_patch)


def _metric(args, positions=None):
    from interp.analysis.ablation import logit_diff_metric, loss_metric

    if args.metric == "loss":
        return loss_metric(positions)
    if args.metric == "logit-diff":
        if not args.logit_diff:
            raise InterpError("--metric logit-diff needs --logit-diff CORRECT,INCORRECT token ids")
        try:
            a, b = (int(x) for x in args.logit_diff.split(","))
        except ValueError:
            raise InterpError(
                f"--logit-diff must be two integer ids, got {args.logit_diff!r}"
            ) from None
        return logit_diff_metric(a, b)
    raise InterpError(f"unknown metric {args.metric!r}; choose loss or logit-diff")


def _encode(model: Any, text: str) -> torch.Tensor:
    tok = getattr(model, "tokenizer", None)
    if tok is not None and hasattr(model, "to_tokens"):
        return model.to_tokens(text)
    try:
        return torch.tensor([[int(x) for x in text.split()]])
    except ValueError:
        raise InterpError(
            "this model has no tokenizer: give the prompt as token ids separated by spaces"
        ) from None


def _tokens_from_file(path: str) -> torch.Tensor:
    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise InterpError(f"--tokens file {path!r} not found")
    if p.suffix == ".npy":
        arr = np.load(p)
    else:
        rows = [line.split() for line in p.read_text().splitlines() if line.strip()]
        if len({len(r) for r in rows}) > 1:
            raise InterpError(f"sequences in {path!r} have different lengths; pad or split them")
        try:
            arr = np.array([[int(x) for x in r] for r in rows])
        except ValueError:
            raise InterpError(f"{path!r} must hold integer token ids") from None
    return torch.as_tensor(arr).long()


def _print_top(df, column: str, top: int) -> None:
    show = df.reindex(df[column].abs().sort_values(ascending=False).index).head(top)
    print(show.to_string(index=False, float_format=lambda v: f"{v:.4f}"))


def run_ablate(args: argparse.Namespace) -> int:
    from interp._export import check_export_path, export
    from interp.analysis.ablation import METHODS, ablate_heads
    from interp.analysis.induction import probe_tokens
    from interp.datasets import repeated_random_tokens
    from interp.models.resolve import resolve_model

    out = check_export_path(args.out)  # before any heavy work
    if args.method not in METHODS:
        raise InterpError(f"unknown method {args.method!r}; choose one of {', '.join(METHODS)}")
    if args.metric not in ("loss", "logit-diff"):
        raise InterpError(f"unknown metric {args.metric!r}; choose loss or logit-diff")
    model = resolve_model(args.model)
    positions = None
    if args.tokens:
        tokens = _tokens_from_file(args.tokens)
    elif args.prompt:
        tokens = _encode(model, args.prompt)
    else:
        if args.repeated is None:
            tokens = probe_tokens(model, n=args.batch, seed=args.seed)
        else:
            bos_tok = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
            tokens = repeated_random_tokens(
                args.batch,
                args.repeated,
                d_vocab=int(model.cfg.d_vocab),
                bos=0 if bos_tok is None else int(bos_tok),
                seed=args.seed,
            ).tokens
        half = (tokens.shape[1] - 1) // 2
        positions = torch.zeros_like(tokens, dtype=torch.bool)
        positions[:, half + 1 : -1] = True  # predicting the repeated half's predictable tokens
    heads = args.heads.split(",") if args.heads else None
    df = ablate_heads(
        model,
        tokens,
        method=args.method,
        metric=_metric(args, positions),
        heads=heads,
        positions=positions,
        seed=args.seed,
        progress=True,
    )
    _print_top(df, "delta", args.top)
    export(df, out)
    print(f"wrote {out}")
    return 0


def run_patch(args: argparse.Namespace) -> int:
    from interp._export import check_export_path, export
    from interp.analysis.ablation import patch_heads
    from interp.models.resolve import resolve_model

    out = check_export_path(args.out)
    if args.metric not in ("loss", "logit-diff"):
        raise InterpError(f"unknown metric {args.metric!r}; choose loss or logit-diff")
    model = resolve_model(args.model)
    clean, corrupted = _encode(model, args.clean), _encode(model, args.corrupted)
    if clean.shape != corrupted.shape:
        raise InterpError(
            f"clean and corrupted prompts tokenize to {clean.shape[1]} and "
            f"{corrupted.shape[1]} tokens; they must have the same length"
        )
    positions = [int(x) for x in args.positions.split(",")] if args.positions else None
    heads = args.heads.split(",") if args.heads else None
    df = patch_heads(
        model,
        clean,
        corrupted,
        metric=_metric(args),
        heads=heads,
        positions=positions,
        progress=True,
    )
    _print_top(df, "normalized", args.top)
    export(df, out)
    print(f"wrote {out}")
    return 0

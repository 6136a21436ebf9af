"""``interp ablate``, ``interp attribute``, ``interp patch``, ``interp scores``: per-head tables.

Each command checks its arguments (output path, heads, positions, metric
ids, seeds) before loading a model, loads it with
:func:`interp.models.load_model`, says how many passes it will run, and
exports the table with :func:`interp.export`. Inputs come from one of
``--tokens FILE`` (.npy integer array, or .txt with one sequence of ids per
line), ``--prompt TEXT`` or ``--repeated N`` (BOS + N random ordinary tokens,
twice); by default the model's standard repeated probe.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from interp.errors import InterpError


def _add_inputs(p: argparse.ArgumentParser) -> None:
    from interp.cli import count_arg, seed_arg

    p.add_argument(
        "--model",
        default="induction-2l",
        help="alias (induction-2l, smollm2-135m, minilm-l6), checkpoint or Hugging Face folder",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--tokens", help="file of token ids: .npy, or .txt with one sequence a line")
    src.add_argument("--prompt", help="text (ids separated by spaces for models without tokenizer)")
    src.add_argument("--repeated", type=count_arg(2), help="N random tokens, repeated twice")
    p.add_argument("--batch", type=count_arg(1), default=16, help="sequences for the probes")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the probe and random draws")


def _add_metric(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--metric", default=default, choices=("loss", "logit-diff"))
    p.add_argument(
        "--logit-diff",
        help="CORRECT,INCORRECT token ids (or single-token words) for --metric logit-diff",
    )
    p.add_argument("--positions", help="comma-separated positions where the edit applies")


def add_parsers(sub: Any) -> None:
    from interp.cli import count_arg

    ab = sub.add_parser("ablate", help="ablate every head (or some) and export the table")
    _add_inputs(ab)
    ab.add_argument("--method", default="zero", choices=("zero", "mean", "resample"))
    ab.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    ab.add_argument("--heads", help="comma-separated labels, e.g. L1H4,L0H7 (default: all)")
    _add_metric(ab, "loss")
    ab.add_argument("--top", type=count_arg(0), default=10, help="heads to print, by |delta|")
    ab.add_argument(
        "--estimate",
        action="store_true",
        help="first-order estimate for every head (interp attribute) instead of the exact sweep",
    )
    ab.add_argument("--verify", type=count_arg(0), default=0, help="with --estimate: exact top K")
    ab.set_defaults(func=run_ablate)

    at = sub.add_parser(
        "attribute",
        help="attribution patching: estimate every head's effect from one backward pass",
    )
    _add_inputs(at)
    at.add_argument("--method", default="zero", choices=("zero", "mean", "patch"))
    at.add_argument("--corrupted", help="corrupted prompt for --method patch (--prompt is clean)")
    at.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    at.add_argument("--heads", help="comma-separated labels (default: all)")
    _add_metric(at, "loss")
    at.add_argument("--verify", type=count_arg(0), default=0, help="exact values for the top K")
    at.add_argument(
        "--correction",
        default="none",
        choices=("none", "qk"),
        help="qk: AtP*'s fix for effects through later heads' queries and keys (slower)",
    )
    at.add_argument("--top", type=count_arg(0), default=10, help="heads to print, by |estimate|")
    at.set_defaults(func=run_attribute)

    pa = sub.add_parser("patch", help="per-head activation patching, clean into corrupted")
    pa.add_argument("--model", default="induction-2l", help="model alias or folder")
    pa.add_argument("--clean", required=True, help="clean prompt")
    pa.add_argument("--corrupted", required=True, help="corrupted prompt (same length)")
    _add_metric(pa, "logit-diff")
    pa.add_argument("--heads", help="comma-separated labels (default: all)")
    pa.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    pa.add_argument("--top", type=count_arg(0), default=10, help="heads to print, by |normalized|")
    pa.set_defaults(func=run_patch)

    sc = sub.add_parser("scores", help="induction / previous-token / duplicate-token head scores")
    _add_inputs(sc)
    sc.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    sc.add_argument(
        "--convention",
        default="interp",
        choices=("interp", "transformer_lens", "arena"),
        help="how a stripe becomes a score (README: Definitions)",
    )
    sc.add_argument("--exclude-bos", choices=("yes", "no"), help="default: the convention's")
    sc.set_defaults(func=run_scores)


# ------------------------------------------------------------------ checks, no torch
def _heads(text: str | None) -> list[str] | None:
    if text is None:
        return None
    labels = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in labels):
        raise InterpError(
            f"--heads {text!r} holds an empty label; give labels like L1H4,L0H7 or drop the option"
        )
    return labels


def _positions(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        out = [int(t) for t in text.split(",")]
    except ValueError:
        raise InterpError(
            f"--positions must be comma-separated integers (negative from the end), got {text!r}"
        ) from None
    return out


def _pair(text: str) -> tuple[str, str]:
    """``CORRECT,INCORRECT``: ids, or tokens kept as typed (" Mary" is not "Mary")."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise InterpError(f"--logit-diff must be CORRECT,INCORRECT, got {text!r}")
    same = [int(p) for p in parts] if all(p.strip().isdigit() for p in parts) else parts
    if same[0] == same[1]:
        raise InterpError(
            f"--logit-diff {text!r} names the same token twice; the difference would always be 0"
        )
    return parts[0], parts[1]


def _check_metric_args(args: argparse.Namespace) -> None:
    if args.metric == "logit-diff":
        if not args.logit_diff:
            raise InterpError("--metric logit-diff needs --logit-diff CORRECT,INCORRECT")
        _pair(args.logit_diff)
    elif args.logit_diff:
        raise InterpError(
            "--logit-diff is used only with --metric logit-diff; add it or drop --logit-diff"
        )


def _check_prompt(text: str | None, what: str) -> None:
    if text is not None and not text.strip():
        raise InterpError(
            f"empty {what}: give some text (or token ids for models without a tokenizer)"
        )


# ------------------------------------------------------------------ inputs, with torch
def _token_id(model: Any, text: str) -> int:
    if text.strip().lstrip("-").isdigit():
        return int(text)
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise InterpError(f"{text!r} is not a token id, and this model has no tokenizer")
    ids = tok.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise InterpError(
            f"{text!r} is {len(ids)} tokens for this tokenizer; give one token (or its id)"
        )
    return int(ids[0])


def _metric(model: Any, args: argparse.Namespace, loss_mask: Any) -> Any:
    from interp.analysis.metrics import logit_diff_metric, loss_metric

    if args.metric == "loss":
        return loss_metric(loss_mask)
    a, b = _pair(args.logit_diff)
    return logit_diff_metric(_token_id(model, a), _token_id(model, b))


def _encode(model: Any, text: str) -> Any:
    import torch

    _check_prompt(text, "prompt")
    if getattr(model, "tokenizer", None) is not None and hasattr(model, "to_tokens"):
        return model.to_tokens(text)
    try:
        return torch.tensor([[int(x) for x in text.split()]])
    except ValueError:
        raise InterpError(
            "this model has no tokenizer: give the prompt as token ids separated by spaces"
        ) from None


def tokens_from_file(path: str) -> Any:
    """``[batch, pos]`` ids from a .npy integer array or a .txt file of id lines.

    Raises:
        InterpError: for a missing file, float / bool / object arrays, a wrong
            rank, non-integer text, or lines of different lengths.
    """
    import numpy as np
    import torch

    p = Path(path)
    if not p.is_file():
        raise InterpError(f"--tokens file {path!r} not found")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except ValueError as exc:
            if "allow_pickle" in str(exc) or "object" in str(exc).lower():
                raise InterpError(
                    f"{path!r} holds Python objects, not token ids; save an integer array "
                    "(np.save(path, ids.astype(np.int64)))"
                ) from None
            raise InterpError(f"cannot read {path!r} as a .npy array: {exc}") from None
        if arr.dtype.kind == "b":
            raise InterpError(f"{path!r} holds booleans, not token ids")
        if arr.dtype.kind not in "iu":
            raise InterpError(
                f"{path!r} holds {arr.dtype} values, not integer token ids; convert them "
                "explicitly (ids would otherwise be silently truncated)"
            )
        if arr.ndim not in (1, 2):
            raise InterpError(
                f"{path!r} has shape {arr.shape}; token ids are [batch, pos] or [pos]"
            )
        return torch.as_tensor(arr.astype(np.int64)).reshape(-1, arr.shape[-1])
    rows = [line.split() for line in p.read_text().splitlines() if line.strip()]
    if not rows:
        raise InterpError(f"{path!r} holds no token ids")
    if len({len(r) for r in rows}) > 1:
        raise InterpError(f"sequences in {path!r} have different lengths; pad or split them")
    try:
        return torch.tensor([[int(x) for x in r] for r in rows])
    except ValueError:
        raise InterpError(f"{path!r} must hold integer token ids separated by spaces") from None


def _file_tokens(args: argparse.Namespace) -> Any:
    """``--tokens`` read and checked before any model loads (``None`` without it)."""
    return tokens_from_file(args.tokens) if args.tokens else None


def _inputs(model: Any, args: argparse.Namespace, given: Any) -> tuple[Any, Any]:
    """``(tokens, loss_mask)``: ``given`` (``--tokens``) or the prompt or random probes;
    the repeated probes' mask selects the repeated half."""
    from interp.analysis.induction import probe_tokens
    from interp.analysis.words import ordinary_word_ids
    from interp.datasets import repeated_random_tokens
    from interp.protocol import bos_token_id

    if given is not None:
        return given, None
    if args.prompt is not None:
        return _encode(model, args.prompt), None
    if args.repeated is None:
        tokens = probe_tokens(model, n=args.batch, seed=args.seed)
        half = (tokens.shape[1] - 1) // 2
    else:
        ids = ordinary_word_ids(model) if getattr(model, "tokenizer", None) is not None else None
        data = repeated_random_tokens(
            args.batch,
            args.repeated,
            d_vocab=int(model.cfg.d_vocab),
            bos=bos_token_id(model),
            seed=args.seed,
            token_ids=ids,
        )
        tokens, half = data.tokens, args.repeated
    mask = tokens.new_zeros(tokens.shape, dtype=bool)
    mask[:, half + 1 : -1] = True  # predicting the repeated half's predictable tokens
    return tokens, mask


def _print_top(df: Any, column: str, top: int) -> None:
    if top:
        show = df.reindex(df[column].abs().sort_values(ascending=False).index).head(top)
        print(show.to_string(index=False, float_format=lambda v: f"{v:.4f}"))


def _announce(model: Any, tokens: Any, heads: Any, what: str) -> None:
    from interp.analysis.ablation import sweep_plan

    plan = sweep_plan(model, tokens, heads=heads)
    print(
        f"{what}: {plan['edits']} heads on {tokens.shape[0]} x {tokens.shape[1]} tokens, "
        f"{plan['passes']} forward passes ({plan['path']} path)"
        + (f"; {plan['note']}" if plan["note"] and plan["path"] == "loop" else "")
    )


def run_ablate(args: argparse.Namespace) -> int:
    from interp.tables import check_export_path

    out = check_export_path(args.out)  # before any heavy work
    heads, positions = _heads(args.heads), _positions(args.positions)
    _check_metric_args(args)
    _check_prompt(args.prompt, "prompt")
    if args.verify and not args.estimate:
        raise InterpError("--verify goes with --estimate (the exact sweep is exact already)")
    if args.estimate and args.method == "resample":
        raise InterpError("--estimate supports --method zero or mean")
    given = _file_tokens(args)
    if args.estimate:
        return _attribute(args, out, heads, positions, given)
    from interp import export
    from interp.analysis.ablation import ablate_heads
    from interp.models.loader import load_model

    model = load_model(args.model)
    tokens, mask = _inputs(model, args, given)
    metric = _metric(model, args, mask)
    _announce(model, tokens, heads, f"{args.method} ablation")
    df = ablate_heads(
        model,
        tokens,
        method=args.method,
        metric=metric,
        heads=heads,
        positions=positions,
        seed=args.seed,
        progress=True,
    )
    _print_top(df, "delta", args.top)
    export(df, out)
    print(f"wrote {out}")
    return 0


def _attribute(args: argparse.Namespace, out: Path, heads: Any, positions: Any, given: Any) -> int:
    from interp import export
    from interp.analysis.attribution import attribute_heads
    from interp.analysis.patching import check_token_pair
    from interp.models.loader import load_model

    model = load_model(args.model)
    corrupted = None
    if args.method == "patch":  # run_attribute checked the options
        tokens, mask = _encode(model, args.prompt), None
        corrupted = _encode(model, args.corrupted)
        check_token_pair(model, tokens, corrupted)
    else:
        tokens, mask = _inputs(model, args, given)
    metric = _metric(model, args, mask)
    then = f", then the exact value of the top {args.verify}" if args.verify else ""
    passes = 3 if corrupted is not None else 2
    print(
        f"attribution ({args.method}): every head from {passes} passes (forward + backward){then}"
    )
    df = attribute_heads(
        model,
        tokens,
        metric=metric,
        method=args.method,
        corrupted_tokens=corrupted,
        heads=heads,
        positions=positions,
        verify=args.verify,
        seed=args.seed,
        progress=True,
        correction=getattr(args, "correction", "none"),  # interp ablate --estimate has none
    )
    _print_top(df, "estimate", args.top)
    export(df, out)
    print(f"wrote {out} (column source says which rows are estimates and which exact)")
    return 0


def run_attribute(args: argparse.Namespace) -> int:
    from interp.tables import check_export_path

    out = check_export_path(args.out)
    heads, positions = _heads(args.heads), _positions(args.positions)
    _check_metric_args(args)
    _check_prompt(args.prompt, "prompt")
    _check_prompt(args.corrupted, "corrupted prompt")
    if args.method != "patch" and args.corrupted:
        raise InterpError("--corrupted is for --method patch")
    if args.method == "patch":
        if args.prompt is None or not args.corrupted:
            raise InterpError("--method patch needs --prompt (clean) and --corrupted")
        if args.metric != "logit-diff":
            raise InterpError("--method patch needs --metric logit-diff --logit-diff A,B")
    return _attribute(args, out, heads, positions, _file_tokens(args))


def run_patch(args: argparse.Namespace) -> int:
    from interp.tables import check_export_path

    out = check_export_path(args.out)
    heads, positions = _heads(args.heads), _positions(args.positions)
    _check_metric_args(args)
    _check_prompt(args.clean, "clean prompt")
    _check_prompt(args.corrupted, "corrupted prompt")
    from interp import export
    from interp.analysis.patching import check_token_pair, patch_heads
    from interp.models.loader import load_model

    model = load_model(args.model)
    clean, corrupted = _encode(model, args.clean), _encode(model, args.corrupted)
    check_token_pair(model, clean, corrupted)  # before the plan's probe pass
    _announce(model, corrupted, heads, "patching")
    df = patch_heads(
        model,
        clean,
        corrupted_tokens=corrupted,
        metric=_metric(model, args, None),
        heads=heads,
        positions=positions,
        progress=True,
    )
    _print_top(df, "normalized", args.top)
    export(df, out)
    print(f"wrote {out}")
    return 0


def run_scores(args: argparse.Namespace) -> int:
    from interp.tables import check_export_path

    out = check_export_path(args.out)
    _check_prompt(args.prompt, "prompt")
    given = _file_tokens(args)
    from interp import export
    from interp.analysis.induction import head_scores
    from interp.models.loader import load_model

    model = load_model(args.model)
    tokens, _ = _inputs(model, args, given)
    exclude = None if args.exclude_bos is None else args.exclude_bos == "yes"
    df = head_scores(model, tokens, convention=args.convention, exclude_bos=exclude)
    for stripe in ("induction", "previous_token", "duplicate_token"):
        best = df.loc[df[stripe].idxmax()]
        print(f"best {stripe} head: {best['label']} ({best[stripe]:.3f}, {args.convention})")
    export(df, out)
    print(f"wrote {out}")
    return 0

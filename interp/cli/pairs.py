"""Clean and corrupted prompt pairs with their metric: what ``interp patch``, ``circuit`` and
``paths`` take.

``--clean`` and ``--corrupted`` are given in pairs, once per pair: several pairs are one
batch (every prompt of one token count, each corrupted twin as long as its clean prompt).
The metric is ``--metric logit-diff`` (``--logit-diff ANSWER,WRONG`` once for every pair,
or once per pair) or ``--metric loss``. Everything is checked before the weights load:
:func:`check_pairs` needs nothing, :func:`pair_task` needs only the tokenizer.

Example:
    >>> import argparse
    >>> args = argparse.Namespace(clean=["0 5 6"], corrupted=["0 7 6"], metric="loss",
    ...                           logit_diff=None)
    >>> clean, corrupted, metric = pair_task(args, None)
    >>> clean.tolist(), corrupted.tolist(), metric.name
    ([[0, 5, 6]], [[0, 7, 6]], 'loss')
"""

from __future__ import annotations

import argparse
from typing import Any

from interp.cli.args import LOGIT_DIFF_PARTS, TOKEN_RULE, check_prompt, pair_arg
from interp.cli.inputs import answer_ids, encode
from interp.core.errors import InterpError


def add_pairs(p: argparse.ArgumentParser, *, required: bool) -> None:
    """``--clean`` and ``--corrupted`` (repeatable, in pairs), ``--metric`` and ``--logit-diff``
    (once, or once per pair).

    Args:
        p: the command's parser.
        required: whether the command needs pairs; without, no pair means its default task.
    """
    default = "" if required else "; default: the model's circuit task"
    p.add_argument(
        "--clean",
        action="append",
        required=required,
        help=f"clean prompt (repeat, in pairs with --corrupted, for a batch{default})",
    )
    p.add_argument("--corrupted", action="append", required=required,
                   help="its corrupted twin (same token count)")  # fmt: skip
    given = "" if required else "with --clean; "
    p.add_argument("--metric", choices=("logit-diff", "loss"), help=f"{given}default logit-diff")
    p.add_argument(
        "--logit-diff",
        action="append",
        help="ANSWER,WRONG for --metric logit-diff, once for every pair or once per pair; "
        f"each part: {TOKEN_RULE}",
    )


def check_pairs(args: argparse.Namespace) -> None:
    """The pairs and their metric, as given: as many ``--clean`` as ``--corrupted`` prompts,
    none empty, and ``--logit-diff`` once or once per pair (only with ``--metric logit-diff``).

    Args:
        args: the parsed options of :func:`add_pairs`.

    Raises:
        InterpError: for any of those, or ``--metric`` / ``--logit-diff`` without pairs.
    """
    clean, corrupted = args.clean or [], args.corrupted or []
    if not clean and not corrupted:
        if args.metric is not None or args.logit_diff:
            raise InterpError(
                "--metric and --logit-diff go with --clean/--corrupted prompts; the default "
                "task brings its own metric"
            )
        return
    if len(clean) != len(corrupted):
        raise InterpError(
            f"{len(clean)} --clean and {len(corrupted)} --corrupted prompts: give them in pairs"
        )
    for c, k in zip(clean, corrupted):
        check_prompt(c, "clean prompt")
        check_prompt(k, "corrupted prompt")
    metric = args.metric or "logit-diff"
    pairs = args.logit_diff or []
    if metric == "loss" and pairs:
        raise InterpError("--logit-diff is used only with --metric logit-diff; drop it")
    if metric == "logit-diff":
        if not pairs:
            raise InterpError("--metric logit-diff needs --logit-diff ANSWER,WRONG")
        if len(pairs) not in (1, len(clean)):
            raise InterpError(
                f"{len(pairs)} --logit-diff pairs for {len(clean)} prompts: give one for all, "
                "or one per prompt"
            )
        for p in pairs:
            pair_arg(p)


def describe_pairs(args: argparse.Namespace) -> str:
    """The pairs as typed, for a table's ``inputs``.

    Args:
        args: the parsed options of :func:`add_pairs`, with pairs.

    Returns:
        ``--clean 'A' --corrupted 'B'`` for each pair, in order.
    """
    return " ".join(
        f"--clean {c!r} --corrupted {k!r}" for c, k in zip(args.clean, args.corrupted, strict=True)
    )


def _twins(source: Any, clean: list[str], corrupted: list[str]) -> tuple[Any, Any]:
    """``[batch, pos]`` clean and corrupted ids, each pair and the batch of one length."""
    import torch

    rows = []
    for i, (c, k) in enumerate(zip(clean, corrupted, strict=True)):
        a, b = encode(source, c, "clean prompt"), encode(source, k, "corrupted prompt")
        if a.shape[1] != b.shape[1]:
            which = f" {i + 1}" if len(clean) > 1 else ""
            raise InterpError(
                f"the clean prompt{which} is {a.shape[1]} tokens and its corrupted twin "
                f"{b.shape[1]}: they must have the same length (each corrupted twin needs its "
                "clean prompt's token count, so that positions correspond; reword one of them)"
            )
        rows.append((a, b))
    lengths = sorted({int(a.shape[1]) for a, _ in rows})
    if len(lengths) > 1:
        raise InterpError(
            f"the prompt pairs are {lengths} tokens long: every prompt of a batch needs the "
            "same number of tokens (reword them, or run them one at a time)"
        )
    return torch.cat([a for a, _ in rows]), torch.cat([b for _, b in rows])


def pair_task(args: argparse.Namespace, source: Any) -> tuple[Any, Any, Any]:
    """Clean and corrupted ``[batch, pos]`` ids and the metric of checked pairs.

    Args:
        args: the parsed options of :func:`add_pairs`, checked by :func:`check_pairs`.
        source: the tokenizer before the weights load (None for a model without one),
            the model after.

    Returns:
        ``(clean, corrupted, metric)``: the metric is one answer pair for every prompt,
        one per prompt, or the loss.

    Raises:
        InterpError: for a prompt that does not encode, a corrupted twin of another length,
            pairs of different lengths, or an answer that is not one token.
    """
    import torch

    from interp.core.metrics import logit_diff_metric, loss_metric

    clean, corrupted = _twins(source, args.clean, args.corrupted)
    if (args.metric or "logit-diff") == "loss":
        return clean, corrupted, loss_metric(None)
    tok = getattr(source, "tokenizer", None) if hasattr(source, "cfg") else source
    ids = [answer_ids(tok, *pair_arg(p), LOGIT_DIFF_PARTS) for p in args.logit_diff]
    if len(ids) == 1:
        return clean, corrupted, logit_diff_metric(*ids[0])
    answers, wrongs = torch.tensor([a for a, _ in ids]), torch.tensor([w for _, w in ids])
    return clean, corrupted, logit_diff_metric(answers, wrongs)

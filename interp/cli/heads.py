"""``interp ablate``, ``interp attribute``, ``interp patch``, ``interp scores``: per-head tables.

Each command checks its arguments (output path, heads, positions, metric
ids, seeds) before loading a model; what needs only the tokenizer (does each
prompt encode? is each ``--logit-diff`` word one token? do ``--positions`` fit
the prompt? are a clean prompt and its corrupted twin of one length?) is
checked with the tokenizer alone, before the weights load. It then loads the
model with :func:`interp.models.load_model`, says how many passes it will run,
and exports the table with :func:`interp.export` once everything is computed
(its CSV sidecar beside it, all or nothing: :func:`interp.cli.outputs.write_outputs`).
Inputs come from one of ``--tokens FILE`` (.npy integer array, or .txt with
one sequence of ids per line), ``--prompt TEXT`` or ``--repeated N`` (BOS + N
random ordinary tokens, twice); by default the model's standard repeated probe.
``interp patch`` takes ``--clean`` and ``--corrupted`` in pairs, as often as there
are pairs (one batch), as ``interp circuit`` does (:mod:`interp.cli.pairs`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.cli.args import (
    LOGIT_DIFF_PARTS,
    TOKEN_RULE,
    add_cost,
    add_model,
    announce,
    check_model_args,
    check_prompt,
    count_arg,
    heads_arg,
    is_token_id,
    load,
    pair_arg,
    positions_arg,
)
from interp.cli.inputs import (
    add_inputs,
    answer_ids,
    check_inputs,
    check_positions_fit,
    check_same_length,
    encode,
    inputs,
    tokenizer_of,
)
from interp.cli.outputs import check_out, export_to, print_top, write_outputs
from interp.cli.pairs import add_pairs, check_pairs, describe_pairs, pair_task
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd


def _add_metric(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--metric", default=default, choices=("loss", "logit-diff"))
    p.add_argument(
        "--logit-diff",
        help=f"ANSWER,WRONG for --metric logit-diff; each part: {TOKEN_RULE}",
    )
    p.add_argument("--positions", help="comma-separated positions where the edit applies")


def _add_direction(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--direction",
        default="noising",
        choices=("noising", "denoising"),
        help="noising (default): the corrupted run's activations into the clean run; "
        "denoising: the clean run's into the corrupted run",
    )


def add_parsers(sub: Any) -> None:
    """Add ``ablate``, ``attribute``, ``patch`` and ``scores`` to ``sub``."""
    ab = sub.add_parser("ablate", help="ablate every head (or some) and export the table")
    add_inputs(ab)
    ab.add_argument("--ablation", default="zero", choices=("zero", "mean", "resample"))
    ab.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    ab.add_argument("--heads", help="comma-separated labels, e.g. L1H4,L0H7 (default: all)")
    _add_metric(ab, "loss")
    ab.add_argument("--top", type=count_arg(0), default=10, help="heads to print, by |effect|")
    ab.add_argument(
        "--first-order",
        action="store_true",
        help="first-order estimate for every head (interp attribute) instead of the exact sweep",
    )
    ab.add_argument(
        "--verify", type=count_arg(0), default=0, help="with --first-order: exact top K"
    )
    add_cost(ab)
    ab.set_defaults(func=run_ablate)

    at = sub.add_parser(
        "attribute",
        help="attribution patching: estimate every head's effect from one backward pass",
    )
    add_inputs(at)
    at.add_argument("--ablation", default="zero", choices=("zero", "mean", "resample", "patch"))
    at.add_argument("--corrupted", help="corrupted prompt for --ablation patch (--prompt is clean)")
    _add_direction(at)
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
    add_cost(at)
    at.set_defaults(func=run_attribute)

    pa = sub.add_parser(
        "patch", help="activation patching between two prompts: per head, or any component grid"
    )
    add_model(pa)
    _add_direction(pa)
    add_pairs(pa, required=True)
    pa.add_argument("--positions", help="comma-separated positions where the edit applies")
    pa.add_argument("--heads", help="comma-separated labels (default: all)")
    pa.add_argument(
        "--component",
        choices=("resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern"),
        help="patch this activation's grid instead of each head's output",
    )
    pa.add_argument(
        "--by",
        choices=("layer", "layer_position", "head", "head_position"),
        help="the grid's cells (with --component; default layer_position or head)",
    )
    pa.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    pa.add_argument("--top", type=count_arg(0), default=10, help="heads to print, by |normalized|")
    add_cost(pa)
    pa.set_defaults(func=run_patch)

    sc = sub.add_parser("scores", help="induction / previous-token / duplicate-token head scores")
    add_inputs(sc)
    sc.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    sc.add_argument(
        "--convention",
        default="interp",
        choices=("interp", "transformer_lens", "arena"),
        help="how a stripe becomes a score (docs/heads.md: stripe scores)",
    )
    sc.add_argument("--exclude-bos", choices=("yes", "no"), help="default: the convention's")
    sc.set_defaults(func=run_scores)


# ------------------------------------------------------------------ checks, no weights
def _check_metric_args(args: argparse.Namespace) -> None:
    if args.metric == "logit-diff":
        if not args.logit_diff:
            raise InterpError("--metric logit-diff needs --logit-diff ANSWER,WRONG")
        pair_arg(args.logit_diff)
    elif args.logit_diff:
        raise InterpError(
            "--logit-diff is used only with --metric logit-diff; add it or drop --logit-diff"
        )


def _tokenizer_checks(
    args: argparse.Namespace,
    prompts: list[tuple[str, str]],
    positions: Any,
    *,
    twins: bool = False,
) -> Any:
    """What needs only the tokenizer, before the weights load: every prompt (``(text, what)``)
    encodes, each ``--logit-diff`` word is one token (and the two differ), ``--positions``
    fit every prompt, and with ``twins`` the clean and corrupted prompts have one length.
    Returns the answer ids (or None)."""
    words = pair_arg(args.logit_diff) if args.metric == "logit-diff" else ()
    if not prompts and all(is_token_id(w) for w in words):
        return answer_ids(None, *words, LOGIT_DIFF_PARTS) if words else None
    tok = tokenizer_of(args.model)
    ids = answer_ids(tok, *words, LOGIT_DIFF_PARTS) if words else None
    encoded = [encode(tok, text, what) for text, what in prompts]
    for e in encoded:
        check_positions_fit(positions, e.shape[1])
    if twins:
        check_same_length(*encoded)
    return ids


# ------------------------------------------------------------------ with the model
def _metric(model: HookedModel, args: argparse.Namespace, loss_mask: Any) -> Any:
    from interp.core.metrics import logit_diff_metric, loss_metric

    if args.metric == "loss":
        return loss_metric(loss_mask)
    a, b = pair_arg(args.logit_diff)
    tok = getattr(model, "tokenizer", None)
    return logit_diff_metric(*answer_ids(tok, a, b, LOGIT_DIFF_PARTS))


def _announce(model: HookedModel, tokens: Any, heads: Any, what: str) -> None:
    from interp.analysis.components.ablation import head_sweep_outline

    outline = head_sweep_outline(model, tokens, heads=heads)
    print(
        f"{what}: {outline['edits']} heads on {tokens.shape[0]} x {tokens.shape[1]} tokens, "
        f"{outline['passes']} forward passes ({outline['path']} path)"
        + (f"; {outline['note']}" if outline["note"] and outline["path"] == "loop" else "")
    )


def _describe(df: pd.DataFrame, args: argparse.Namespace) -> Any:
    """Record where the table's inputs came from (exported with it)."""
    source = (
        f"--tokens {args.tokens}"
        if getattr(args, "tokens", None)
        else f"--prompt {args.prompt!r}"
        if getattr(args, "prompt", None) is not None
        else f"--repeated {args.repeated}"
        if getattr(args, "repeated", None)
        else "the model's repeated-token probe"
    )
    df.attrs.setdefault("model", args.model)
    df.attrs.setdefault("inputs", source)
    return df


def run_ablate(args: argparse.Namespace) -> int:
    out = check_out(args.out)  # before any heavy work
    heads, positions = heads_arg(args.heads), positions_arg(args.positions)
    _check_metric_args(args)
    if args.verify and not args.first_order:
        raise InterpError("--verify goes with --first-order (the exact sweep is exact already)")
    given = check_inputs(args)
    check_model_args(args, heads=heads)
    prompts = [(args.prompt, "prompt")] if args.prompt is not None else []
    _tokenizer_checks(args, prompts, positions)
    if given is not None:
        check_positions_fit(positions, given.shape[1], "--tokens sequences")
    if args.first_order:
        return _attribute(args, out, heads, positions, given)
    from interp.analysis.components.ablation import ablate_heads

    model = load(args)
    tokens, mask = inputs(model, args, given)
    metric = _metric(model, args, mask)
    options = dict(ablation=args.ablation, metric=metric, heads=heads, positions=positions,
                   seed=args.seed, memory_budget=args.memory)  # fmt: skip
    announce(ablate_heads(model, tokens, **options, estimate=True))
    if args.estimate:
        return 0
    _announce(model, tokens, heads, f"{args.ablation} ablation")
    df = ablate_heads(model, tokens, **options, progress=True)
    print_top(df, "effect", args.top)
    write_outputs({out: export_to(_describe(df, args))})
    print(f"wrote {out}")
    return 0


def _attribute(args: argparse.Namespace, out: Path, heads: Any, positions: Any, given: Any) -> int:
    from interp.analysis.components.attribution import attribute_heads
    from interp.core.checks import check_token_pair

    model = load(args)
    corrupted = None
    if args.ablation == "patch":  # run_attribute checked the options
        tokens, mask = encode(model, args.prompt), None
        corrupted = encode(model, args.corrupted)
        check_token_pair(model, tokens, corrupted)
    else:
        tokens, mask = inputs(model, args, given)
    metric = _metric(model, args, mask)
    options = dict(
        metric=metric,
        ablation=args.ablation,
        corrupted_tokens=corrupted,
        direction=getattr(args, "direction", "noising"),  # interp ablate --first-order: none
        heads=heads,
        positions=positions,
        verify=args.verify,
        seed=args.seed,
        correction=getattr(args, "correction", "none"),  # interp ablate --first-order: none
        memory_budget=args.memory,
    )
    announce(attribute_heads(model, tokens, **options, estimate=True))
    if args.estimate:
        return 0
    then = f", then the exact value of the top {args.verify}" if args.verify else ""
    passes = 3 if corrupted is not None else 2
    print(
        f"attribution ({args.ablation}): every head from {passes} passes (forward + backward){then}"
    )
    df = attribute_heads(model, tokens, **options, progress=True)
    print_top(df, "estimate", args.top)
    write_outputs({out: export_to(_describe(df, args))})
    print(f"wrote {out} (estimates and exact values are in separate columns)")
    return 0


def run_attribute(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    heads, positions = heads_arg(args.heads), positions_arg(args.positions)
    _check_metric_args(args)
    check_prompt(args.corrupted, "corrupted prompt")
    if args.ablation != "patch" and args.corrupted:
        raise InterpError("--corrupted is for --ablation patch")
    if args.ablation != "patch" and args.direction != "noising":
        raise InterpError("--direction denoising is for --ablation patch (two prompts)")
    if args.ablation == "patch":
        if args.prompt is None or not args.corrupted:
            raise InterpError("--ablation patch needs --prompt (clean) and --corrupted")
        if args.metric != "logit-diff":
            raise InterpError("--ablation patch needs --metric logit-diff --logit-diff A,B")
    given = check_inputs(args)
    check_model_args(args, heads=heads)
    texts = [(args.prompt, "prompt"), (args.corrupted, "corrupted prompt")]
    prompts = [(t, what) for t, what in texts if t is not None]
    _tokenizer_checks(args, prompts, positions, twins=args.ablation == "patch")
    if given is not None:
        check_positions_fit(positions, given.shape[1], "--tokens sequences")
    return _attribute(args, out, heads, positions, given)


def run_patch(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    heads, positions = heads_arg(args.heads), positions_arg(args.positions)
    check_pairs(args)
    if args.by is not None and args.component is None:
        raise InterpError("--by goes with --component (e.g. --component resid_pre --by layer)")
    if args.component is not None and heads is not None:
        raise InterpError("--heads is for per-head patching; drop it with --component")
    _check_component_by(args.component, args.by)
    check_model_args(args, heads=heads)
    clean, _, _ = pair_task(args, tokenizer_of(args.model))  # the tokenizer alone
    check_positions_fit(positions, clean.shape[1])
    from interp.analysis.components.patching import patch_heads
    from interp.core.checks import check_token_pair

    model = load(args)
    clean, corrupted, metric = pair_task(args, model)
    check_token_pair(model, clean, corrupted)  # before the plan's probe pass
    if args.component is not None:
        return _patch_grid(args, model, clean, corrupted, metric, positions, out)
    base = clean if args.direction == "noising" else corrupted
    options = dict(corrupted_tokens=corrupted, direction=args.direction, heads=heads,
                   metric=metric, positions=positions, memory_budget=args.memory)  # fmt: skip
    announce(patch_heads(model, clean, **options, estimate=True))
    if args.estimate:
        return 0
    _announce(model, base, heads, f"patching ({args.direction})")
    df = patch_heads(model, clean, **options, progress=True)
    return _write_patching(df, args, out)


def run_scores(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    given = check_inputs(args)
    check_model_args(args)
    if args.prompt is not None:  # it encodes (ids for models without a tokenizer)
        encode(tokenizer_of(args.model), args.prompt)
    from interp.analysis.heads.scores import head_scores

    model = load(args)
    tokens, _ = inputs(model, args, given)
    exclude = None if args.exclude_bos is None else args.exclude_bos == "yes"
    df = head_scores(model, tokens, convention=args.convention, exclude_bos=exclude)
    for stripe in ("induction", "previous_token", "duplicate_token"):
        best = df.loc[df[stripe].idxmax()]
        print(f"best {stripe} head: {best['label']} ({best[stripe]:.3f}, {args.convention})")
    write_outputs({out: export_to(_describe(df, args))})
    print(f"wrote {out}")
    return 0


def _write_patching(df: pd.DataFrame, args: argparse.Namespace, out: Path) -> int:
    """Print a patching table's top rows, record its model and prompts, write it."""
    print_top(df, "normalized", args.top)
    df.attrs.setdefault("model", args.model)
    df.attrs.setdefault("inputs", describe_pairs(args))
    write_outputs({out: export_to(df)})
    print(f"wrote {out}")
    return 0


def _check_component_by(component: str | None, by: str | None) -> None:
    """``--by`` fits ``--component`` (a layer's vector, or a head's), before any model loads."""
    if component is None or by is None:
        return
    from interp.analysis.components.component_patching import HEAD_COMPONENTS, LAYER_COMPONENTS

    if component in LAYER_COMPONENTS and by.startswith("head"):
        raise InterpError(
            f"--component {component} is one vector per layer and position; use --by layer or "
            "layer_position (per head are z, q, k, v, pattern)"
        )
    if component in HEAD_COMPONENTS and by.startswith("layer"):
        raise InterpError(
            f"--component {component} is per head; use --by head or head_position (or "
            "--component attn_out for a whole layer's attention)"
        )


def _patch_grid(args: argparse.Namespace, model: HookedModel, clean: Any, corrupted: Any,
                metric: Any, positions: Any, out: Path) -> int:  # fmt: skip
    from interp.analysis.components.component_patching import LAYER_COMPONENTS, patch_components

    by = args.by or ("layer_position" if args.component in LAYER_COMPONENTS else "head")
    options = dict(corrupted_tokens=corrupted, direction=args.direction, by=by,
                   component=args.component, metric=metric, positions=positions,
                   memory_budget=args.memory)  # fmt: skip
    announce(patch_components(model, clean, **options, estimate=True))
    if args.estimate:
        return 0
    print(f"patching {args.component} by {by} on {clean.shape[1]} tokens ({args.direction})")
    df = patch_components(model, clean, **options, progress=True)
    return _write_patching(df, args, out)

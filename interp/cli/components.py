"""``interp dla``, ``interp lens``, ``interp attention``: what components write, what the model
believes after each block, and where heads look, on a prompt of your own.

Every option is checked before any work (``--figure`` of ``interp dla`` needs
``--by head``), and everything that needs only the tokenizer (the prompt
encodes, each answer is one token, positions fit the prompt) before the
weights load; bad input is one line on stderr and exit 2, and nothing is
written. A table and its figure are written together once both are computed
(:func:`interp.cli.outputs.write_outputs`): all new, or all as they were.
``dla`` and ``lens`` print their cost before they run; ``--memory`` is the budget
their prompts run in chunks under, and ``--estimate`` prints the cost and stops.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.cli.args import (
    TOKEN_RULE,
    add_cost,
    add_model,
    announce,
    check_model_args,
    check_prompt,
    count_arg,
    heads_arg,
    load,
    positions_arg,
)
from interp.cli.inputs import answer_ids, check_positions_fit, encode, tokenizer_of
from interp.cli.outputs import (
    check_distinct,
    check_out,
    check_svg,
    export_to,
    print_top,
    text_to,
    write_outputs,
)
from interp.core.errors import InterpError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd


def add_parsers(sub: Any) -> None:
    """Add ``dla``, ``lens`` and ``attention`` to ``sub``."""
    dla = sub.add_parser("dla", help="direct logit attribution: each component's share of a logit")
    add_model(dla)
    dla.add_argument("--prompt", required=True, help="text (ids for models without a tokenizer)")
    dla.add_argument("--answer", required=True, help=f"the answer token: {TOKEN_RULE}")
    dla.add_argument(
        "--wrong", help=f"the wrong token (attribute logit[answer] - logit[wrong]): {TOKEN_RULE}"
    )
    dla.add_argument(
        "--by", default="head", choices=("head", "layer", "component"), help="what a row is"
    )
    dla.add_argument("--at", help="comma-separated positions whose logits are read (default: last)")
    dla.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    dla.add_argument("--figure", help="also write the layer x head heatmap (.svg; --by head)")
    dla.add_argument("--top", type=count_arg(0), default=10, help="rows to print, by |value|")
    add_cost(dla)
    dla.set_defaults(func=run_dla)

    lens = sub.add_parser("lens", help="the logit lens: top predictions after every block")
    add_model(lens)
    lens.add_argument("--prompt", required=True, help="text (ids for models without a tokenizer)")
    lens.add_argument("--at", help="comma-separated positions read (default: all)")
    lens.add_argument("--k", type=count_arg(1), default=5, help="top tokens per cell")
    lens.add_argument(
        "--target",
        help=f"the token to follow (default: each position's next token): {TOKEN_RULE}",
    )
    lens.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    lens.add_argument("--figure", help="also write the stage x position grid (.svg)")
    add_cost(lens)
    lens.set_defaults(func=run_lens)

    att = sub.add_parser("attention", help="a self-contained page of attention views of a prompt")
    add_model(att)
    att.add_argument("--prompt", required=True, help="text (ids for models without a tokenizer)")
    att.add_argument(
        "--heads", help="labels, e.g. L18H6,L17H3 (default: the 5 best induction heads, or all)"
    )
    att.add_argument(
        "--answer", help=f"also show the direct logit attribution of this token: {TOKEN_RULE}"
    )
    att.add_argument("--wrong", help=f"... as logit[answer] - logit[wrong]: {TOKEN_RULE}")
    att.add_argument("--out", required=True, help="the page (.html)")
    att.set_defaults(func=run_attention)


def _prechecked(args: argparse.Namespace, positions: Any) -> tuple[Any, Any]:
    """Prompt, answers (``--answer``/``--wrong``, or ``--target``) and positions checked with
    the tokenizer alone (no weights). Returns the answer ids (None where not given)."""
    check_prompt(args.prompt, "prompt")
    check_model_args(args)
    tok = tokenizer_of(args.model)
    if hasattr(args, "answer"):
        answers = answer_ids(tok, args.answer, args.wrong, ("--answer", "--wrong"))
    else:
        answers = answer_ids(tok, args.target, None, ("--target", ""))
    check_positions_fit(positions, encode(tok, args.prompt).shape[1], option="--at")
    return answers


def run_dla(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    figure = check_svg(args.figure)
    if figure is not None and args.by != "head":
        raise InterpError(
            f"--figure draws the layer x head heatmap, which needs --by head (not --by {args.by}); "
            "use --by head, or drop --figure"
        )
    check_distinct({"--out": out, "--figure": figure})
    positions = positions_arg(args.at, "--at")
    answer, wrong = _prechecked(args, positions)
    from interp.analysis.components.dla import direct_logit_attribution, head_grid

    model = load(args)
    tokens = encode(model, args.prompt)
    options = dict(answer=answer, wrong=wrong, at=-1 if positions is None else positions,
                   by=args.by, memory_budget=args.memory)  # fmt: skip
    announce(direct_logit_attribution(model, tokens, **options, estimate=True))
    if args.estimate:
        return 0
    df = direct_logit_attribution(model, tokens, **options, progress=True)
    df.attrs.update(inputs=f"--prompt {args.prompt!r}", answer=args.answer, wrong=args.wrong)
    quantity = df.attrs["metric"]
    print(f"{quantity}: {df.attrs['total']:.4f} (the model's own; rows sum to it)")
    print_top(df, "value", args.top)
    writers = {out: export_to(df)}
    if figure is not None:  # drawn before anything is written
        from interp.outputs.figures import dla_heatmap

        grid, mlp = head_grid(df)
        writers[figure] = text_to(dla_heatmap(grid, mlp, caption=_dla_caption(df, args)).svg())
    write_outputs(writers)
    if figure is not None:
        print(f"wrote {figure}")
    print(f"wrote {out}")
    return 0


def _dla_caption(df: pd.DataFrame, args: argparse.Namespace) -> str:
    top = df.reindex(df["value"].abs().sort_values(ascending=False).index).head(3)
    named = ", ".join(f"{r.label} {r.value:+.2f}" for r in top.itertuples())
    return (
        f"Direct logit attribution of {df.attrs['metric']} on {args.prompt!r}: what each head "
        f"(and each layer's MLP, right) writes straight into it, the final norm's scale frozen. "
        f"Largest: {named}; total {df.attrs['total']:.2f}. Direct only: heads that act through "
        "later heads are not shown here."
    )


def run_lens(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    figure = check_svg(args.figure)
    check_distinct({"--out": out, "--figure": figure})
    positions = positions_arg(args.at, "--at")
    target, _ = _prechecked(args, positions)
    from interp.analysis.components.lens import logit_lens

    model = load(args)
    tokens = encode(model, args.prompt)
    options = dict(at=positions, k=args.k, target=target, memory_budget=args.memory)
    announce(logit_lens(model, tokens, **options, estimate=True))
    if args.estimate:
        return 0
    df = logit_lens(model, tokens, **options, progress=True)
    df.attrs.update(inputs=f"--prompt {args.prompt!r}")
    last = df[df["stage"] == df["stage"].max()]
    for r in last.itertuples():
        print(
            f"position {r.position} {r.token!r}: the model predicts {r.top1!r} ({r.p1:.2f})"
            + (f"; target {r.target!r} rank {r.target_rank}" if r.target else "")
        )
    writers = {out: export_to(df)}
    if figure is not None:  # drawn before anything is written
        from interp.experiments.common import lens_figure

        writers[figure] = text_to(lens_figure(df).svg())
    write_outputs(writers)
    if figure is not None:
        print(f"wrote {figure}")
    print(f"wrote {out}")
    return 0


def run_attention(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() != ".html":
        raise InterpError(f"--out {args.out!r} must end in .html (a self-contained page)")
    from interp.outputs.files import check_output_file

    check_output_file(out, "--out")
    heads = heads_arg(args.heads)
    if args.wrong is not None and args.answer is None:
        raise InterpError("--wrong goes with --answer")
    check_model_args(args, heads=heads)
    answer, wrong = _prechecked(args, None)
    from interp.analysis.heads.patterns import attention_patterns
    from interp.analysis.heads.scores import head_scores
    from interp.core.head_checks import parse_heads
    from interp.core.protocol import is_causal
    from interp.outputs.render import Report

    model = load(args)
    tokens = encode(model, args.prompt)
    cfg = model.cfg
    if heads is None:
        if cfg.n_layers * cfg.n_heads <= 16:
            chosen = [f"L{l}H{h}" for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
            why = "all heads"
        else:
            scores = head_scores(model, stripes=("induction",))
            chosen = scores.nlargest(5, "induction")["label"].tolist()
            why = "the five heads with the highest induction score on the repeated-token probe"
    else:
        chosen = [f"L{l}H{h}" for l, h in parse_heads(model, heads)]
        why = "the heads asked for"
    pats = attention_patterns(model, tokens, heads=chosen)[0].cpu()  # [head, q, k]
    strs = (
        [str(s) for s in model.to_str_tokens(tokens[0])]
        if hasattr(model, "to_str_tokens")
        else [str(int(t)) for t in tokens[0]]
    )
    r = Report(f"Attention of {args.model} on a prompt")
    r.text(f"Prompt: {args.prompt!r} ({tokens.shape[1]} tokens). Heads: {why}.")
    r.cautions(
        [
            "A pattern says where a head looks, not what it writes: the values and W_O decide "
            "that (the direct logit attribution below, when asked, shows what reaches the logits).",
            "One prompt is an anecdote; check a role on many inputs and with interventions.",
        ]
    )
    r.heading("Attention patterns")
    r.attention(strs, pats, head_names=chosen, causal=is_causal(model))
    if answer is not None:
        from interp.analysis.components.dla import direct_logit_attribution, head_grid
        from interp.outputs.figures import dla_heatmap

        df = direct_logit_attribution(model, tokens, answer=answer, wrong=wrong)
        grid, mlp = head_grid(df)
        r.heading("Direct logit attribution")
        r.figure(dla_heatmap(grid, mlp, caption=_dla_caption(df, args)), "dla")
    write_outputs({out: r.write})
    print(f"wrote {out} ({len(chosen)} heads)")
    return 0

"""``interp generate``: what the model writes with heads removed or a direction added, beside what
it writes clean.

``interp generate --prompt TEXT [--ablate L18H6,L17H3] [--steer HOOK:VECTOR_FILE:SCALE]
--out T [--page P.html]`` continues the prompt twice with the same draws, clean and edited
(:func:`interp.analysis.generation.compare_generations`), and writes the two continuations
side by side, each token's log-probability under both models; ``--page`` writes a
self-contained page that marks where they first differ. Options are checked before any
model loads (the steering files are read and must hold finite numbers), the prompt and the
stop token with the tokenizer alone, then the heads, hooks and vector widths against the
model before any forward pass; the cost is printed first (``--estimate`` stops there).
This module keeps its own option types (the steering spec, the sampling numbers).
"""

from __future__ import annotations

import argparse
import math
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
    seed_arg,
)
from interp.cli.inputs import encode, token_id, tokenizer_of
from interp.cli.model_checks import (
    check_generates,
    check_heads_fit,
    check_steering_fits,
    model_spec_of,
)
from interp.cli.outputs import check_distinct, check_out, export_to, write_outputs
from interp.core.errors import InterpError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

STEER_FORM = "HOOK:VECTOR_FILE:SCALE, e.g. blocks.3.hook_resid_pre:v.npy:4"


def _number(what: str, *, low: float, high: float | None = None, open_low: bool = False) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        bad = not math.isfinite(value) or value < low or (open_low and value == low)
        if bad or (high is not None and value > high):
            span = f"({low:g}, {high:g}]" if open_low else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"{what} must be {span}, got {text!r}")
        return value

    return parse


def add_parsers(sub: Any) -> None:
    """Add ``generate`` to ``sub``."""
    g = sub.add_parser(
        "generate", help="continue a prompt clean and with heads ablated or a vector added"
    )
    add_model(g)
    g.add_argument("--prompt", required=True, help="text (ids for models without a tokenizer)")
    g.add_argument("--ablate", help="heads to remove, e.g. L18H6,L17H3")
    g.add_argument(
        "--ablation",
        default="zero",
        choices=("zero", "mean", "resample"),
        help="what replaces the heads' outputs: zero (default), their mean over the prompt, "
        "or a seeded draw from it",
    )
    g.add_argument(
        "--steer", action="append", default=[], help=f"add SCALE x a vector at a hook: {STEER_FORM}"
    )
    g.add_argument(
        "--positions",
        default="all",
        choices=("prompt", "new", "all"),
        help="where the edits apply: the prompt's tokens, the new ones, or both (default)",
    )
    g.add_argument("--max-new-tokens", type=count_arg(1), default=20, help="tokens to add")
    g.add_argument(
        "--temperature",
        type=_number("--temperature", low=0.0),
        default=0.0,
        help="0 (default) is greedy; above 0 samples by --seed",
    )
    g.add_argument("--top-k", type=count_arg(1), help="sample from the K most likely tokens")
    g.add_argument(
        "--top-p",
        help="sample from the smallest set of tokens whose probability reaches P, in (0, 1]",
    )
    g.add_argument("--seed", type=seed_arg, default=0, help="the sampling and resampling draws")
    g.add_argument("--stop", help=f"a token that ends the continuation: {TOKEN_RULE}")
    g.add_argument("--out", required=True, help="table path: .csv .parquet .md .html .json")
    g.add_argument("--page", help="also write a page marking the first difference (.html)")
    add_cost(g)
    g.set_defaults(func=run_generate)


def steer_arg(text: str) -> tuple[str, Path, float]:
    """``HOOK:VECTOR_FILE:SCALE`` (the hook is checked against the model once it loads).

    Raises:
        InterpError: for another form, a missing file, or a scale that is not a finite number.
    """
    parts = text.split(":", 1)
    if len(parts) != 2 or ":" not in parts[1] or not parts[0].strip():
        raise InterpError(f"--steer {text!r} is not {STEER_FORM}")
    hook, rest = parts[0].strip(), parts[1]
    file, scale = rest.rsplit(":", 1)
    try:
        value = float(scale)
    except ValueError:
        raise InterpError(f"--steer {text!r}: the scale {scale!r} is not a number") from None
    if not math.isfinite(value):
        raise InterpError(f"--steer {text!r}: the scale must be finite")
    path = Path(file)
    if not path.is_file():
        raise InterpError(f"--steer {text!r}: no vector file {file!r}")
    return hook, path, value


def read_vector(path: Path) -> Any:
    """A steering vector from ``.npy``, ``.pt`` (a tensor) or ``.txt`` (numbers).

    Raises:
        InterpError: for another suffix, an unreadable file, or anything but finite numbers.
    """
    import numpy as np
    import torch

    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            data = np.load(path, allow_pickle=False)
        elif suffix == ".pt":
            data = torch.load(path, map_location="cpu", weights_only=True)
        elif suffix == ".txt":
            data = np.loadtxt(path, dtype=np.float64, ndmin=1)
        else:
            raise InterpError(f"steering vector {str(path)!r}: use a .npy, .pt or .txt file")
    except InterpError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy and torch each raise their own
        raise InterpError(f"cannot read the steering vector {str(path)!r}: {exc}") from None
    from interp.analysis.generation.interventions import steering_vector

    return steering_vector(data)


def run_generate(args: argparse.Namespace) -> int:
    out = check_out(args.out)
    page = None
    if args.page is not None:
        page = Path(args.page)
        if page.suffix.lower() != ".html":
            raise InterpError(f"--page {args.page!r} must end in .html (a self-contained page)")
        from interp.outputs.files import check_output_file

        check_output_file(page, "--page")
    check_distinct({"--out": out, "--page": page})
    check_prompt(args.prompt, "prompt")
    heads = heads_arg(args.ablate) if args.ablate is not None else None
    if heads is None and not args.steer:
        raise InterpError("nothing to compare: give --ablate HEADS and/or --steer " + STEER_FORM)
    if args.ablation != "zero" and heads is None:
        raise InterpError("--ablation goes with --ablate")
    if args.top_p is not None:
        try:
            args.top_p = _number("--top-p", low=0.0, high=1.0, open_low=True)(args.top_p)
        except argparse.ArgumentTypeError as exc:
            raise InterpError(str(exc)) from None
    steers = [steer_arg(s) for s in args.steer]
    vectors = [read_vector(path) for _, path, _ in steers]
    if args.temperature == 0 and (args.top_k is not None or args.top_p is not None):
        raise InterpError("--top-k and --top-p shape sampling: give --temperature above 0")
    check_model_args(args)
    tok = tokenizer_of(args.model)
    prompt_ids = encode(tok, args.prompt)  # the prompt encodes
    stop = token_id(tok, args.stop, "--stop") if args.stop is not None else None
    # what the config alone can refuse, before seconds and gigabytes of weights
    spec = model_spec_of(args.model)
    check_generates(spec, int(prompt_ids.shape[-1]), args.max_new_tokens)
    check_heads_fit(spec, heads, "--ablate")
    for (hook, _, _), vec in zip(steers, vectors):
        check_steering_fits(spec, hook, tuple(vec.shape))
    if spec is not None and stop is not None and spec.d_vocab and stop >= spec.d_vocab:
        raise InterpError(
            f"--stop {args.stop!r}: id {stop} is past {spec.name}'s {spec.d_vocab} tokens"
        )
    from interp.analysis.generation import HeadAblation, Steering, compare_generations

    model = load(args)
    tokens = encode(model, args.prompt)
    edits: list[Any] = []
    if heads is not None:
        edits.append(
            HeadAblation(
                heads=heads, ablation=args.ablation, positions=args.positions, seed=args.seed
            )
        )
    for (hook, _, scale), vec in zip(steers, vectors):
        edits.append(Steering(hook, vec, scale=scale, positions=args.positions))
    options = dict(
        interventions=edits, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, stop=stop, memory_budget=args.memory,
    )  # fmt: skip
    announce(compare_generations(model, tokens, **options, estimate=True))
    if args.estimate:
        return 0
    df = compare_generations(model, tokens, **options, progress=True)
    df.attrs.update(inputs=f"--prompt {args.prompt!r}")
    _print(df)
    writers = {out: export_to(df)}
    if page is not None:
        writers[page] = continuation_page(df, args.prompt, str(args.model)).write
    write_outputs(writers)
    for path in (page, out):
        if path is not None:
            print(f"wrote {path}")
    return 0


def _print(df: pd.DataFrame) -> None:
    first = df.attrs["first_difference"][0]
    clean, edited = "".join(df["clean"]), "".join(df["edited"])
    mean = {k: float(df[f"{k}_logprob"].mean()) for k in ("clean", "edited")}
    print(f"clean:  {clean!r} (mean log p {mean['clean']:.3f})")
    print(f"edited: {edited!r} (mean log p {mean['edited']:.3f})")
    print(f"edits: {'; '.join(df.attrs['interventions'])}")
    if first is None:
        print("the continuations never differ")
        return
    r = df[df["step"] == first].iloc[0]
    print(
        f"first difference at new token {first}: clean {r['clean']!r} (log p "
        f"{r['clean_logprob']:.3f}; {r['clean_logprob_edited']:.3f} once edited), edited "
        f"{r['edited']!r} (log p {r['edited_logprob']:.3f}; {r['edited_logprob_clean']:.3f} clean)"
    )


def continuation_page(df: pd.DataFrame, prompt: str, model_name: str) -> Any:
    """The page of ``interp generate``: the two continuations side by side, the first
    difference marked, then the whole table."""
    from interp.outputs.render import Report

    r = Report(f"What {model_name} writes, clean and edited")
    edits = "; ".join(df.attrs["interventions"])
    r.text(f"Edits: {edits}. Next tokens: {df.attrs['sampling']}.")
    r.cautions(
        [
            "One continuation is an anecdote: the same edit on other prompts may change nothing.",
            "After the first difference the two runs continue different texts; later rows "
            "compare tokens of different contexts.",
        ]
    )
    for b, rows in df.groupby("prompt", sort=True):
        cols = {"clean": list(rows["clean"]), "edited": list(rows["edited"])}
        lps = {"clean": list(rows["clean_logprob"]), "edited": list(rows["edited_logprob"])}
        r.continuations(prompt, cols, logprobs=lps, first=df.attrs["first_difference"][int(b)])
    r.heading("Every token, under both models")
    r.table(df.drop(columns=["first_difference"]))
    return r

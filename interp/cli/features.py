"""``interp features``: a dictionary's features on one self-contained page.

``interp features --dictionary FOLDER --out page.html`` loads the dictionary (a sae-lens
folder or a Gemma Scope npz; ``--hook`` names the hook of an npz), the model it was
trained on (its ``cfg.json`` metadata, or ``--model``), reads every feature over held-out
text of the offline corpus (:func:`interp.dictionaries.read_features`: top contexts,
densities, logit effects) and writes the page (:mod:`interp.outputs.pages.features`), and
with ``--table`` the features' table. With ``--head L1H1``, the head's top (query feature,
key feature) pairs where it attends most, over the same text, go above the cards, with
their features' cards (:func:`interp.analysis.heads.qk.pairs.head_feature_pairs`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from interp.cli.args import add_cost, add_model, announce, check_model_args, count_arg, load
from interp.core.errors import InterpError


def add_parsers(sub: Any) -> None:
    """Add ``features`` to ``sub``."""
    p = sub.add_parser("features", help="a dictionary's features: contexts, density, logits")
    p.add_argument("--dictionary", required=True, help="a sae-lens folder or a params.npz")
    p.add_argument("--hook", help="the hook of a Gemma Scope npz (a folder names its own)")
    add_model(p, default=None)
    p.add_argument("--out", required=True, help="the page (.html)")
    p.add_argument("--table", help="also write the features' table: .csv .parquet .md .json")
    p.add_argument("--sequences", type=count_arg(1), default=64,
                   help="held-out sequences of the standard library (default 64)")  # fmt: skip
    p.add_argument("--seq-len", type=count_arg(2), help="tokens per sequence (default: 128, "
                   "or the model's context if shorter)")  # fmt: skip
    p.add_argument("--top", type=count_arg(1), default=10, help="contexts per feature")
    p.add_argument("--show", type=count_arg(1), default=50,
                   help="features on the page: the densest (default 50)")  # fmt: skip
    p.add_argument("--features", help="the features on the page instead, e.g. 3,17,40")
    p.add_argument("--head", help="a head, e.g. L18H6: its top (query feature, key feature) "
                   "pairs where it attends most, above the cards")  # fmt: skip
    add_cost(p)
    p.set_defaults(func=run_features)


def _feature_ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise InterpError(f"--features {text!r} must be feature ids, e.g. 3,17,40") from None
    if not ids:
        raise InterpError("--features is empty: name feature ids, e.g. 3,17,40")
    return ids


def _head(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    import re

    m = re.fullmatch(r"L(\d+)H(\d+)", text.strip())
    if m is None:
        raise InterpError(f"--head {text!r} must name a head as L<layer>H<head>, e.g. L18H6")
    return int(m[1]), int(m[2])


def _check_head(head: tuple[int, int], spec: Any, hook: str) -> None:
    """``--head`` within the model and after the dictionary's hook, from its config alone."""
    import re

    layer, h = head
    if not (0 <= layer < spec.n_layers and 0 <= h < spec.n_heads):
        raise InterpError(
            f"--head L{layer}H{h} is not in {spec.name}: it has layers 0..{spec.n_layers - 1} "
            f"and heads 0..{spec.n_heads - 1}"
        )
    m = re.match(r"blocks\.(\d+)\.", hook)
    if m is not None and int(m[1]) > layer:
        raise InterpError(
            f"the dictionary reads {hook}, after --head L{layer}H{h}'s input: its features "
            f"cannot say why that head attends; pick a head in layer {m[1]} or later"
        )


def run_features(args: argparse.Namespace) -> int:
    """Check the options, read the features, write the page (and table)."""
    from interp.cli.outputs import check_distinct, check_out
    from interp.outputs.files import check_output_file

    out = Path(args.out)
    if out.suffix.lower() != ".html":
        raise InterpError(f"--out {args.out!r} must end in .html (a self-contained page)")
    check_output_file(out, "--out")
    table = check_out(args.table) if args.table is not None else None
    check_distinct({"--out": out, "--table": table})
    shown = _feature_ids(args.features)
    head = _head(args.head)
    from interp.dictionaries import load_dictionary

    D = load_dictionary(args.dictionary, hook_name=args.hook)
    if args.model is None:
        args.model = D.metadata.get("model_name")
        if not args.model:
            raise InterpError(
                f"{args.dictionary} does not say which model it was trained on: pass --model"
            )
    check_model_args(args)
    from interp.cli.model_checks import check_dictionary_fits, model_spec_of

    spec = model_spec_of(args.model)
    check_dictionary_fits(spec, D.hook_name, D.d_in)
    if head is not None and spec is not None:
        _check_head(head, spec, D.hook_name)
    if spec is not None and spec.n_ctx and args.seq_len is not None and args.seq_len > spec.n_ctx:
        raise InterpError(  # before: clamped silently
            f"--seq-len {args.seq_len} is past {spec.name}'s context of {spec.n_ctx} tokens; "
            f"pass at most --seq-len {spec.n_ctx} (the default takes the context when shorter)"
        )
    if shown is not None:
        bad = [f for f in shown if not 0 <= f < D.d_sae]
        if bad:
            raise InterpError(
                f"--features {bad[0]} is not a feature: this dictionary has 0..{D.d_sae - 1}"
            )
    from interp.core.protocol import model_name
    from interp.datasets.python_text import python_text
    from interp.dictionaries import read_features
    from interp.outputs.pages.features import feature_page

    model = load(args)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    if args.seq_len is not None and n_ctx and args.seq_len > n_ctx:  # a hub model's, known now
        raise InterpError(f"--seq-len {args.seq_len} is past the model's context of {n_ctx}")
    seq_len = args.seq_len or min(128, n_ctx or 128)
    corpus = python_text(model, n_sequences=args.sequences, seq_len=seq_len, split="test")
    options = dict(dictionary=D, top=args.top, skip_columns=1, memory_budget=args.memory)
    announce(read_features(model, corpus.tokens, **options, estimate=True))
    if args.estimate:
        return 0
    reading = read_features(model, corpus.tokens, **options, progress=True)
    f = reading.features
    if shown is None:
        order = f.sort_values(["density", "feature"], ascending=[False, True])["feature"]
        shown = [int(x) for x in order.head(args.show)]
    sections = []
    if head is not None:
        from interp.analysis.heads.qk.pairs import head_feature_pairs, pair_title
        from interp.outputs.pages.features import pair_section

        pairs = head_feature_pairs(model, corpus.tokens, layer=head[0], head=head[1],
                                   dictionary=D, memory_budget=args.memory)  # fmt: skip
        sections.append(pair_section(pairs, query=reading, key=reading, title=pair_title(pairs)))
        paired = list(
            dict.fromkeys(int(x) for x in pairs[["query_feature", "key_feature"]].values.ravel())
        )
        shown = paired + [x for x in shown if x not in paired]
        print(pair_title(pairs))
    title = f"Features of the dictionary at {D.hook_name} ({model_name(model)})"
    feature_page(reading, features=shown, title=title, sections=sections).write(out)
    if table is not None:
        from interp.outputs.tables import export

        export(f, table)
    dead = int((f["n_active"] == 0).sum())
    print(
        f"read {len(f):,} features over {f.attrs['n_positions']:,} positions of "
        f"{corpus.name} (held-out files): {dead:,} never active, median density "
        f"{float(f['density'].median()):.3%}"
    )
    print(f"wrote {out}" + (f" and {table}" if table is not None else ""))
    return 0

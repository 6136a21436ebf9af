"""``interp atlas``: every head of a model on one self-contained page, and its table.

``interp atlas [--model M] --out atlas.html [--table T] [--seed N] [--batch N]
[--heads L18H6,...] [--memory 16GiB] [--estimate]`` runs
:func:`interp.analysis.head_atlas` on the model's standard probe (in chunks under
``--memory``; ``--estimate`` prints the cost and stops) and writes a page
(circuitsvis bundle inlined once: it renders offline) with:

* a layer x head grid, each cell coloured by the head's role (hover: its
  numbers); a cell with a detail section links to it;
* the whole table;
* a detail section for each chosen head: its attention on the first probe
  sequence (circuitsvis), its positional kernel (SVG), its top QK and OV
  token pairs over the sampled tokens (ids where the model has no tokenizer).

Details go to every head of a model with at most :data:`ALL_HEADS` heads,
else to the :data:`PER_ROLE` strongest heads of each role (``--heads`` names
others), so a 270-head model's page stays a few MB. Every option is checked
before the model loads; the page and the table are written together, all or
nothing.
"""

from __future__ import annotations

import argparse
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.cli.args import (
    add_cost,
    add_model,
    announce,
    check_model_args,
    count_arg,
    heads_arg,
    load,
    seed_arg,
)
from interp.cli.outputs import check_distinct, check_out, export_to, write_outputs
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, is_causal

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

SHORT = {  # what a grid cell says
    "previous-token": "prev",
    "induction": "ind",
    "duplicate-token": "dup",
    "successor": "succ",
    "copy-suppression": "supp",
    "copying": "copy",
    "positional sink": "sinkP",
    "content sink": "sinkC",
    "none": "",
}
ALL_HEADS = 16
PER_ROLE = 3
COLOURS = {
    "previous-token": "#1f77b4",
    "induction": "#d62728",
    "duplicate-token": "#9467bd",
    "successor": "#e377c2",
    "copy-suppression": "#8c564b",
    "copying": "#2ca02c",
    "positional sink": "#ff7f0e",
    "content sink": "#ffbb78",
    "none": "#eeeeee",
}


def add_parsers(sub: Any) -> None:
    """Add ``atlas`` to ``sub``."""
    p = sub.add_parser("atlas", help="every head's scores and role on one self-contained page")
    add_model(p)
    p.add_argument("--out", required=True, help="the page (.html)")
    p.add_argument("--table", help="also write the table: .csv .parquet .md .html .json")
    p.add_argument("--seed", type=seed_arg, default=0, help="the probe's and control's seed")
    p.add_argument("--batch", type=count_arg(1), default=8, help="probe sequences (default 8)")
    p.add_argument("--heads", help="heads to detail, e.g. L18H6,L17H3 (default: see --help)")
    add_cost(p)
    p.set_defaults(func=run_atlas)


def run_atlas(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() != ".html":
        raise InterpError(f"--out {args.out!r} must end in .html (a self-contained page)")
    from interp.outputs.files import check_output_file

    check_output_file(out, "--out")
    table = check_out(args.table) if args.table is not None else None
    check_distinct({"--out": out, "--table": table})
    heads = heads_arg(args.heads)
    check_model_args(args, heads=heads)
    from interp.analysis.heads.atlas.table import measure_atlas
    from interp.analysis.heads.scores import probe_tokens
    from interp.core.head_checks import parse_heads

    model = load(args)
    chosen = None if heads is None else parse_heads(model, heads)
    tokens = probe_tokens(model, n=args.batch, seed=args.seed)
    options = dict(seed=args.seed, memory_budget=args.memory)
    announce(measure_atlas(model, tokens, **options, estimate=True))
    if args.estimate:
        return 0
    cfg = model.cfg
    print(
        f"atlas: {cfg.n_layers * cfg.n_heads} heads on {tokens.shape[0]} x {tokens.shape[1]} "
        "tokens: 2 forward passes, then weight products"
    )
    atlas = measure_atlas(model, tokens, **options, keep_patterns=True, progress=True)
    df = atlas.table
    df.attrs.setdefault("inputs", f"probe_tokens(n={args.batch}, seed={args.seed})")
    detail = chosen if chosen is not None else default_details(df)
    page = atlas_page(model, atlas, detail, name=args.model)
    writers = {out: page.write}
    if table is not None:
        writers[table] = export_to(df)
    write_outputs(writers)
    for role, n in df["role"].value_counts().items():
        print(f"  {role}: {n}")
    if table is not None:
        print(f"wrote {table}")
    print(f"wrote {out} ({len(detail)} heads in detail)")
    return 0


def default_details(df: pd.DataFrame) -> list[tuple[int, int]]:
    """Every head of a small model, else the :data:`PER_ROLE` strongest of each role (by how
    far the role's score stands above its threshold)."""
    from interp.analysis.heads.atlas.roles import ROLES

    if len(df) <= ALL_HEADS:
        return list(zip(df["layer"].tolist(), df["head"].tolist(), strict=True))
    thresholds = df.attrs["thresholds"]
    picked: list[tuple[int, int]] = []
    for role, col in ROLES.items():
        if col not in thresholds:
            continue
        mine = df[df["role"].str.endswith(role)]
        margin = (mine[col] - thresholds[col]) / max(1e-12, 1 - thresholds[col])
        for i in margin.sort_values(ascending=False).index[:PER_ROLE]:
            picked.append((int(df.at[i, "layer"]), int(df.at[i, "head"])))
    return sorted(dict.fromkeys(picked))


def _token_text(model: HookedModel, ids: list[int]) -> list[str]:
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return [str(i) for i in ids]
    return [repr(tok.decode([i])) for i in ids]


def atlas_page(model: HookedModel, atlas: Any, detail: list[tuple[int, int]], *, name: str) -> Any:
    """The page (an :class:`interp.outputs.render.Report`) of ``atlas``, ``detail`` in full."""
    from interp.analysis.heads.ov_scores import OVCircuits, top_token_pairs
    from interp.outputs.figures import lines
    from interp.outputs.render import Report

    df = atlas.table
    a = df.attrs
    r = Report(f"Head atlas of {name}")
    r.text(
        f"Probe: {a['probe'][0]} sequences of {a['probe'][1]} tokens (BOS, random tokens, the "
        f"same again; seed {a['seed']}). Cost: {a['forward_equivalents']} forward-equivalents of "
        f"the probe (its passes, the control's scores, the weight products). Control: "
        f"{a['control']}."
    )
    r.raw(_counts(df))
    r.text(
        "A head has a role when its score beats every control head and reaches the role's "
        "effect-size floor (docs/heads.md: the atlas): "
        + "; ".join(
            f"{k} >= {e['floor']:g} and > {e['control_max']:.3f} ({e['why']}; the "
            f"{e['binds']} binds)"
            for k, e in a["effect_sizes"].items()
        )
        + "."
    )
    r.cautions(
        [
            "A role is a score above chance, not a mechanism: check it with ablations and "
            "the circuits (interp ablate, interp paths).",
            "Positional kernels and token pairs are the direct path (the embeddings through "
            "ln1): deeper heads read much more than that.",
            *a.get("notes", []),
        ]
    )
    r.heading("Every head by role")
    r.raw(_grid(df, {f"L{l}H{h}" for l, h in detail}))
    r.raw(_legend())
    r.heading("Details")
    strs = _token_text(model, atlas.tokens[0].tolist())
    circuits = OVCircuits(model)
    for layer, head in detail:
        row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
        label = row["label"]
        r.raw(f'<section class="atlas-head" id="{label}">')
        r.heading(f"{label}: {row['role']}", level=3)
        r.text(_numbers(row))
        pattern = atlas.first_patterns[layer][head].numpy().round(3)
        r.attention(strs, pattern, head_names=[label], causal=is_causal(model))
        kernel = atlas.kernels[layer, head]
        r.figure(
            lines(
                list(range(len(kernel))),
                {"kernel": kernel.tolist()},
                xlabel="offset (positions the key is behind the query)",
                ylabel="mean score",
                caption=f"{label}'s positional kernel: its mean pre-softmax score at each offset, "
                "query and key tokens drawn independently from the probe's (direct path).",
            ),
            f"{label}-kernel",
        )
        peak = int(row["kernel_peak"]) if row["kernel_peak"] == row["kernel_peak"] else 0
        rotary = str(getattr(model.cfg, "positional_embedding_type", "")) == "rotary"
        pairs = top_token_pairs(
            model,
            layer=layer,
            head=head,
            ids=atlas.sample,
            offset=peak if rotary else None,
            circuits=circuits,
        )
        for circuit, what in (("QK", "query -> key"), ("OV", "source -> output logit")):
            part = pairs[pairs["circuit"] == circuit]
            if part.empty:  # no OV rows where the logits mean nothing
                continue
            shown = part.assign(
                first=_token_text(model, part["first"].tolist()),
                second=_token_text(model, part["second"].tolist()),
            ).rename(columns={"first": what.split(" -> ")[0], "second": what.split(" -> ")[1]})
            at = f" at offset {peak}" if circuit == "QK" and rotary else ""
            n = len(atlas.sample)
            caption = f"Top {circuit} pairs{at} ({what}), over {n} sampled tokens"
            r.table(shown.drop(columns="circuit"), caption=caption)
        r.raw("</section>")
    r.heading("The table")
    r.table(df.drop(columns=["roles"]), caption="Every head (docs/heads.md: the atlas)")
    return r


def _numbers(row: Any) -> str:
    keys = ("previous_token", "induction", "duplicate_token", "sink", "sink_swapped",
            "entropy", "distance", "copying", "copying_top1", "copy_suppression",
            "successor")  # fmt: skip
    parts = [f"{k} {row[k]:.3f}" for k in keys if row[k] == row[k]]
    if row["rotary_band"] is not None:
        parts.append(f"rotary band {row['rotary_band']} ({row['band_share']:.2f} of |score|)")
    parts.append(f"kernel peak at offset {int(row['kernel_peak'])}")
    return f"Roles: {row['roles'] or 'none'}. " + "; ".join(parts) + "."


def _grid(df: pd.DataFrame, detailed: set[str]) -> str:
    """A layer x head table, each cell coloured by role; detailed heads link to their section."""
    n_heads = int(df["head"].max()) + 1
    head_row = "".join(f"<th>H{h}</th>" for h in range(n_heads))
    rows = [f"<tr><th></th>{head_row}</tr>"]
    for layer, part in df.groupby("layer", sort=True):
        cells = []
        for row in part.sort_values("head").itertuples():
            colour = COLOURS.get(row.role, "#cccccc")
            tip = html.escape(f"{row.label}: {row.roles or 'none'}", quote=True)
            text = html.escape(_short(row.role))
            if row.label in detailed:
                text = f'<a href="#{row.label}">{text}</a>'
            cells.append(
                f'<td class="atlas-cell" data-label="{row.label}" '
                f'data-role="{html.escape(row.role)}" title="{tip}" '
                f'style="background:{colour}">{text}</td>'
            )
        rows.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    style = (
        "<style>table.atlas-grid td{min-width:2.2em;text-align:center;font-size:0.75em}"
        "table.atlas-grid a{color:inherit;font-weight:bold}"
        "section.atlas-head:target{outline:3px solid #d62728}</style>"
    )
    return f'{style}<table class="atlas-grid">{"".join(rows)}</table>'


def _counts(df: pd.DataFrame) -> str:
    """The page header's count of heads per role: by ``role`` (each head once) and by
    ``roles`` (every role a head holds)."""
    from interp.analysis.heads.atlas.roles import role_counts

    counts = role_counts(df)
    cells = "".join(
        f'<tr data-role="{html.escape(role)}"><td>{html.escape(role)}</td><td>{n}</td>'
        f"<td>{counts['roles'].get(role, '')}</td></tr>"
        for role, n in counts["role"].items()
    )
    return (
        f'<table class="atlas-counts"><caption>Heads per role, of {len(df)}: first role '
        "(<code>role</code>) and every role held (<code>roles</code>)</caption>"
        f"<tr><th>role</th><th>heads (role)</th><th>heads (roles)</th></tr>{cells}</table>"
    )


def _short(role: str) -> str:
    return SHORT.get(role, role)


def _legend() -> str:
    items = "".join(
        f'<span style="background:{c};padding:2px 6px;margin-right:4px">{html.escape(role)} '
        f"({html.escape(_short(role)) or '-'})</span>"
        for role, c in COLOURS.items()
    )
    return f'<p class="atlas-legend">{items}</p>'

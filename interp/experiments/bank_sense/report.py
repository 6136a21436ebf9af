"""The bank-sense lab's figures, HTML report and summary lines.

They lay out the findings of :mod:`.analysis` and compute nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.experiments.bank_sense import toy_heads as th
from interp.experiments.bank_sense.analysis import SGD_STEPS, TITLE, BankSenseFindings
from interp.outputs.figures import grouped_bars, trace_2d
from interp.outputs.render import Report

CAUTIONS = [
    "The toy axes (finance, water, structure, generic) are hand-chosen for legibility; real "
    "embeddings have no labelled finance coordinate.",
    "A heatmap or a bar of attention weights shows mixing weights, not an explanation of "
    "what is contributed: the values and the output projection decide that.",
    "The trained classifier's routing is one observed solution on four examples, with no "
    "held-out test; a uniform mixture would also separate them.",
]


def figures(f: BankSenseFindings) -> dict[str, Any]:
    """Attention bars (identity head and trained classifier) and the 2-D SGD trace."""
    ident = {s: [float(x) for x in r["A"][-1]] for s, r in f.identity.items()}
    trained = {s: [float(x) for x in A[-1]] for s, A in f.classifier_patterns.items()}
    return {
        "attention_identity": grouped_bars(
            ["the", "river / money", "bank"],
            ident,
            xlabel="source token (position)",
            ylabel="bank's attention weight",
            caption="Bank's attention row under identity projections. The weights are the same "
            "in both sentences; what bank receives differs because the vectors mixed differ. "
            "Weights alone do not say what is contributed.",
        ),
        "attention_trained": grouped_bars(
            ["the", "river / money", "bank"],
            trained,
            xlabel="source token (position)",
            ylabel="bank's attention weight",
            caption=f"Bank's attention row in the trained eight-dimensional classifier (seed "
            f"{f.seed}): it routes to the clue word. One observed solution, not one the "
            "four-example task forces.",
        ),
        "sgd_trace": trace_2d(
            {s: p for s, p in f.sgd_paths.items()},
            xlabel="mixture coordinate 0",
            ylabel="mixture coordinate 1",
            caption=f"Bank's two-coordinate mixture for each sentence over {SGD_STEPS} SGD steps "
            "of the article's widget (o start, x end): training pushes the two sentences' "
            "mixtures apart. The coordinates have no assigned meaning.",
        ),
    }


def report(f: BankSenseFindings, plots: dict[str, Any] | None = None) -> Report:
    """The lab's HTML report (:class:`interp.outputs.render.Report`)."""
    plots = figures(f) if plots is None else plots  # the writer passes the ones it saves
    t = f.tables
    report = Report(TITLE)
    report.text(
        "Every number below is computed by interp from the article's toy vectors; the "
        "attention patterns are read from TransformerLens hooks on the toy head and checked "
        "against the article's numpy head."
    )
    report.cautions(CAUTIONS)
    report.heading("a. One forward pass with identity projections")
    for s, r in f.identity.items():
        report.attention(r["tokens"], r["A"], head_names=[s], causal=False)
    report.figure(plots["attention_identity"], "attention_identity")
    report.table(t["bank_weights"], "bank's scores and weights")
    report.table(t["identity_forward"], "vectors at bank")

    report.heading("b. Score scale, softmax and similarity")
    for name in ("score_scale", "softmax", "similarity", "scaled_dot", "dot_product_spread"):
        report.table(t[name], name.replace("_", " "))

    report.heading("c. Eiffel tower: change the match, then the content")
    report.table(t["eiffel"], "tower's weights and mixture")
    report.table(t["eiffel_queries"], "queries under the swap matrix")

    report.heading("c'. The scores split into query-side and key-side pieces")
    for line in split_lines(f):
        report.text(line)
    split = t["score_split"]
    report.table(
        split[split["value"].abs() > 0].reset_index(drop=True),
        "each (query coordinate, key coordinate) piece of the scores (pieces that are 0 left out)",
    )
    report.table(t["score_split_sides"], "each side's pieces, beside the whole score")

    report.heading("d. Three matching directions for bank's query (fixed keys)")
    for name in [*(f"matching_{p}" for p in th.PRESETS), "matching_zero_query"]:
        report.table(t[name], name.replace("_", " "))

    report.heading("e. What the query map ignores: the null space of M")
    report.table(t["null_space"], "M = [[1,0,1],[0,1,1]]")

    report.heading("f. Two-coordinate SGD walkthrough")
    report.text("Embedding gradients for 'the river bank': money is absent and gets exactly 0.")
    report.table(t["sgd_gradients_embedding"])
    report.figure(plots["sgd_trace"], "sgd_trace")
    report.table(t["sgd_training"], "20 SGD steps alternating the examples", "{:.4f}")

    report.heading("g. The trained eight-dimensional OneHeadSense")
    for s, A in f.classifier_patterns.items():
        report.attention(s.split(), A, head_names=[s], causal=False)
    report.figure(plots["attention_trained"], "attention_trained")
    report.table(t["sense_classifier"], "predictions and bank's attention (rounded)")
    report.table(t["parameter_groups"], "parameters")

    report.heading("h. Attention learns the data, not the world (biased labels)")
    report.text(
        f"Seed-{f.seed} run on our stack; the article's table is a reference, not a target. "
        "Small weights, values and the classifier all matter."
    )
    report.table(t["biased_dataset"], float_format="{:.2f}")

    report.heading("i. Causal masking")
    demo = f.causal_demo
    report.attention(
        demo["tokens"],
        np.stack([demo["bidirectional"], demo["causal"], demo["zero_mask"]]),
        head_names=["bidirectional", "causal (-inf)", "wrong mask (0)"],
        causal=False,
    )
    report.table(t["causal"], "bank's row, bidirectional vs causal")
    cat = f.tired_cat
    report.attention(
        cat["tokens"],
        np.stack([cat["bidirectional"], cat["causal"]]),
        head_names=["bidirectional (illustrative)", "causal"],
        causal=False,
    )
    return report


def split_lines(f: BankSenseFindings) -> list[str]:
    """The score splits in words, from the lab's tables."""
    split = f.tables["score_split"]
    lines = []
    for sentence, g in split.groupby("sentence", sort=False):
        word = g["query_word"].iloc[0]
        per = g.groupby("source", sort=False)
        parts = []
        for source, h in per:
            live = h[h["value"].abs() > 1e-9]
            pieces = " + ".join(
                f"{r.query_coordinate} x {r.key_coordinate} {r.value:.4g}"
                for r in live.itertuples()
            )
            parts.append(f"{source} {h['value'].sum():.4g} = {pieces or '0'}")
        lines.append(
            f"'{sentence}', {word}'s row: unscaled dot products "
            f"{[round(v, 2) for v in per['unscaled'].sum()]}, scores "
            f"{[round(v, 4) for v in per['value'].sum()]}; by (query coordinate x key "
            f"coordinate): " + "; ".join(parts) + "."
        )
    return lines


def summary(f: BankSenseFindings) -> list[str]:
    """Lines for the terminal."""
    r = f.identity["the river bank"]
    eiffel = f.tables["eiffel"].set_index("variant")
    swap = eiffel.loc["swap query", ["w[the]", "w[Eiffel]", "w[tower]"]].to_numpy(dtype=float)
    sense = f.sense_classifier
    return [
        f"river bank: weights {np.round(r['weights'], 2).tolist()}, "
        f"mixture {np.round(r['mixture'], 2).tolist()}",
        f"Eiffel swap query: weights {np.round(swap, 4).tolist()}",
        split_lines(f)[0],
        f"null direction n = {np.round(f.null_space['n'], 6).tolist()}, "
        f"Me = M(e+n) = {f.null_space['Me'].tolist()}",
        f"OneHeadSense (seed {f.seed}): predictions {sense['prediction'].tolist()[:2]}, "
        f"bank attention {sense['bank_attention'].tolist()[:2]}",
    ]

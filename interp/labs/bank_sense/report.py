"""The bank-sense lab's HTML report: it lays out findings, and computes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.labs import toy_heads as th
from interp.render import Report

CAUTIONS = [
    "The toy axes (finance, water, structure, generic) are hand-chosen for legibility; real "
    "embeddings have no labelled finance coordinate.",
    "A heatmap or a bar of attention weights shows mixing weights, not an explanation of "
    "what is contributed: the values and the output projection decide that.",
    "The trained classifier's routing is one observed solution on four examples, with no "
    "held-out test; a uniform mixture would also separate them.",
]


def build(f: Any, plots: dict[str, Any]) -> Report:
    """The report of :class:`interp.labs.bank_sense.BankSenseFindings` ``f``."""
    t = f.tables
    report = Report("Bank sense: how one attention head mixes information")
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

"""The induction lab's HTML report: it lays out findings, and computes nothing."""

from __future__ import annotations

from typing import Any

from interp.render import Report
from interp.tables import styled_html

CAUTIONS = [
    "Numbers are on held-out sequences whose segment lengths were never used in training; "
    "they describe this model on this data.",
    "An attention score says where a head looks, not what it writes. The ablations test "
    "whether a head matters; a head can look like an induction head and contribute nothing.",
    "Head scores use the interp convention (mean stripe mass over the rows that have a "
    "stripe, BOS excluded). The conventions table shows the same heads under TransformerLens's "
    "detect_head and ARENA's fixed diagonals, which give different numbers for the same pattern.",
    "Composition scores and circuits come from the weights alone, with LayerNorm folded in "
    "(the raw-weight positional circuit is shown beside it); they say which paths exist, not "
    "which paths the model uses.",
]


def build(f: Any, plots: dict[str, Any]) -> Report:
    """The report of :class:`interp.labs.induction.InductionFindings` ``f``."""
    report = Report("Induction heads in a two-layer attention-only model")
    report.text(f"Model {f.model_name}: {f.n_layers} layers x {f.n_heads} heads. Seed {f.seed}.")
    report.cautions(CAUTIONS)
    report.heading("Summary")
    summary = f.summary_table()
    summary["value"] = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in summary["value"]]
    report.table(summary)

    report.heading("The induction bump: loss per position")
    report.figure(plots["loss_by_position"], "loss_by_position")

    report.heading("The logit lens: where the answer appears")
    report.figure(plots["logit_lens"], "logit_lens")
    report.table(f.lens)

    report.heading("Head scores (layer x head)")
    for stripe in ("previous_token", "induction", "duplicate_token"):
        report.figure(plots[f"scores_{stripe}"], f"scores_{stripe}")
    report.table(f.scores)
    report.table(
        f.conventions.pivot_table(
            index=["role", "label", "stripe"], columns="convention", values="score"
        ).reset_index(),
        caption="the key heads on the classic probe (BOS, L tokens, the same L tokens) in each "
        "score convention",
    )

    report.heading("Attention patterns on one held-out sequence")
    names = [f"L{l}H{h}" for l in range(f.n_layers) for h in range(f.n_heads)]
    report.attention(f.example_tokens, f.example_patterns, head_names=names, causal=True)
    key = [f.prev_label, f.induction_label]
    report.text(f"Key heads: previous-token {key[0]}, induction {key[1]}.")
    report.attention(
        f.example_tokens, f.example_patterns[[names.index(k) for k in key]], head_names=key
    )

    report.heading("K-composition (earlier OV into later keys)")
    report.figure(plots["k_composition"], "k_composition")
    report.text(
        f"K-composition circuit {f.prev_label} -> {f.induction_label}: fraction of query "
        f"tokens whose best key is the one preceded by the same token = "
        f"{f.kcomp_diagonal_fraction:.3f}."
    )
    report.table(
        f.positional,
        caption="mean attention the positional QK circuit alone puts on the previous position, "
        "with LayerNorm folded in (what the head reads) and on the raw W_pos",
    )
    report.heading("OV copying scores")
    report.table(f.copying)
    report.heading("Ablations (zero, at hook_z)")
    report.raw(styled_html(f.ablation))
    report.raw(styled_html(f.group_ablation))
    return report

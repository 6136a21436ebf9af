"""The induction lab's figures, HTML report and summary lines.

They lay out the findings of :mod:`.analysis` and compute nothing.
"""

from __future__ import annotations

from typing import Any

from interp.experiments.induction.analysis import TITLE, InductionFindings
from interp.experiments.induction.continuation import summary_row
from interp.experiments.induction.features import feature_sentence
from interp.outputs.figures import heatmap, lines
from interp.outputs.render import Report
from interp.outputs.tables import styled_html

STRIPE_NAMES = {
    "previous_token": "previous-token",
    "induction": "induction",
    "duplicate_token": "duplicate-token",
}

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


def figures(f: InductionFindings) -> dict[str, Any]:
    """The lab's figures by name (:class:`interp.outputs.figures.Plot`)."""
    curves = f.loss_by_position
    rep = curves[curves["half"] == "repeated"]["position"]
    series = {c: curves[c].tolist() for c in curves.columns if c not in ("position", "half")}
    out = {
        "loss_by_position": lines(
            curves["position"].tolist(),
            series,
            xlabel="position in the sequence (predicting the next token)",
            ylabel="mean next-token loss (nats)",
            shade=(float(rep.min()) - 0.5, float(rep.max()) + 0.5),
            shade_label="second copy (predictable)",
            caption=f"Loss at each position on {f.probe_size} sequences of BOS, a segment of "
            "random tokens, the segment again, then random filler: clean, and with each key head "
            "zero-ablated. The drop on the second copy is the induction bump; ablating either "
            "head removes it. (With the segment right after BOS, the second copy's first two "
            "predictions are missed.) It shows what the "
            "loss depends on, not how the heads compute it.",
        )
    }
    for stripe, nice in STRIPE_NAMES.items():
        pivot = f.scores.pivot(index="layer", columns="head", values=stripe)
        out[f"scores_{stripe}"] = heatmap(
            pivot.to_numpy(),
            row_labels=list(pivot.index),
            col_labels=list(pivot.columns),
            xlabel="head",
            ylabel="layer",
            colorbar=f"{nice} score",
            vmin=0,
            vmax=1,
            caption=f"{nice.capitalize()} score of every head (interp convention, held-out "
            "sequences). A high score says where a head looks; the ablations say whether it "
            "matters.",
        )
    kc = f.composition.pivot(index="src_label", columns="label", values="score")
    out["k_composition"] = heatmap(
        kc.to_numpy(),
        row_labels=list(kc.index),
        col_labels=list(kc.columns),
        xlabel="later head (keys)",
        ylabel="earlier head (OV output)",
        colorbar="K-composition score",
        vmin=0.0,
        caption=f"K-composition: how much an earlier head's output is read by a later head's keys, "
        f"from the weights alone (random baseline {f.composition['baseline'].iloc[0]:.3f}). "
        "Weights "
        "say which paths exist, not which the model uses on data.",
    )
    out["logit_lens"] = lens_lines(f)
    return out


def lens_lines(f: InductionFindings) -> Any:
    """The lens figure: the next token's probability after each stage, per half; the caption
    states the repeated half's numbers."""
    lens = f.lens
    names = lens[lens["half"] == "repeated"]["stage_name"].tolist()
    series = {
        half: lens[lens["half"] == half]["next_token_p"].tolist()
        for half in ("repeated", "first half")
    }
    rep = series["repeated"]
    steps = ", ".join(f"{p:.2f} after {n}" for n, p in zip(names, rep))
    jump = max(range(1, len(rep)), key=lambda i: rep[i] - rep[i - 1])
    return lines(
        list(range(len(names))),
        series,
        xlabel="stage (0 = embeddings, l + 1 = after block l)",
        ylabel="probability of the next token",
        markers=True,
        caption=f"The logit lens on {f.data.tokens.shape[0]} held-out sequences: the next "
        f"token's probability read after each block (final norm recomputed per stage). On the "
        f"repeated half it is {steps}: the answer appears at stage {jump} ({names[jump]}, the "
        f"block of {f.induction_label if jump == f.induction_head[0] + 1 else 'no key head'}). "
        "The first half stays near chance. Readable is not used: the ablations test that.",
    )


def report(f: InductionFindings, plots: dict[str, Any] | None = None) -> Report:
    """The lab's HTML report (:class:`interp.outputs.render.Report`)."""
    plots = figures(f) if plots is None else plots  # the writer passes the ones it saves
    report = Report(TITLE)
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
    report.heading(f"Why {f.induction_label} attends: its score split by QK attribution")
    for line in why_lines(f):
        report.text(line)
    report.table(
        f.why.pairs,
        caption="the (query piece, key piece) pairs with the largest mean "
        "share of the score on the induction target, every held-out prompt",
    )
    report.table(f.why.sides, caption="each side's writers, summed over the other side")
    report.table(
        f.why.interventions,
        caption="each side's top writers removed from the head's "
        "query or key input alone (norms recomputed), beside the attribution",
    )
    report.heading(f"Why {f.induction_label} attends, in features")
    report.text(feature_sentence(f.features, f.induction_label, f.prev_label))
    report.table(
        f.features.per_prompt.head(20),
        caption="the first 20 held-out prompts: the query token A, the score on the "
        "induction target, its top (query piece, key piece) pair and what that key feature "
        "reads (its own top previous token)",
    )
    report.table(
        f.features.removals,
        caption="the top key feature removed from the key input alone (norms recomputed), "
        "beside its attribution",
    )
    report.heading(f"What the model writes without {f.induction_label}")
    quantity, value, _ = summary_row(f.continued, f.induction_label)
    report.text(
        f"Each of {f.continued['sequence'].nunique()} held-out sequences cut after three tokens "
        f"of its second copy and continued greedily (generate, key/value cache): {quantity} = "
        f"{value} (a token survives when every token before it is right too)."
    )
    report.table(
        f.continued.groupby(["run", "segment_len"])[["survived", "correct", "repeat_tokens"]]
        .mean()
        .reset_index(),
        caption="mean tokens of the repeat per segment length",
    )
    report.heading("OV copying scores")
    report.table(f.copying)
    report.heading("Ablations (zero, at hook_z)")
    report.raw(styled_html(f.ablation))
    report.raw(styled_html(f.group_ablation))
    return report


def why_lines(f: InductionFindings) -> list[str]:
    """What the QK attribution says about why the induction head attends, from its numbers."""
    w, head = f.why, f.induction_label
    per, top = w.per_prompt, w.pairs.iloc[0]
    n = len(per)
    pair = f"(query: {top['query_component']}, key: {top['key_component']})"
    lines = [
        f"On each of the {n} held-out prompts, {head}'s query at the last position of the second "
        f"copy whose next token is predictable, against its induction target (the token after "
        f"the query token's first occurrence): score {per['score'].mean():.2f} on average "
        f"(min {per['score'].min():.2f}). The rows of each prompt sum to its score exactly "
        f"(largest gap {per.attrs['score_gap']:.1e} of the largest score).",
        f"The pair {pair} carries it: {top['value']:.2f} of the mean score, "
        f"{top['share']:.0%}; it is the largest pair in {top['top_in'] * n:.0f} of {n} prompts "
        f"(median share per prompt {per['top_share'].median():.0%}). "
        + (
            f"That is K-composition: the token's own embedding asks, and what the "
            f"previous-token head {f.prev_label} wrote at the target answers."
            if (top["query_component"], top["key_component"]) in {("embed", f.prev_label)}
            else f"That is not the K-composition pair (embed, {f.prev_label})."
        ),
    ]
    for r in w.interventions.itertuples():
        lines.append(
            f"Removing {r.component} from {head}'s {r.side} input changes the score by "
            f"{r.measured:+.2f} (attribution {r.attribution:+.2f}: {r.verdict}) and moves "
            f"{r.attention_moved:.0%} of the attention."
        )
    return lines


def summary(f: InductionFindings) -> list[str]:
    """Lines for the terminal."""
    abl = f.ablation.set_index("label")["effect"]
    return [
        f"previous-token head {f.prev_label} "
        f"(score {f.score_of(f.prev_head, 'previous_token'):.3f}), "
        f"induction head {f.induction_label} "
        f"(score {f.score_of(f.induction_head, 'induction'):.3f})",
        f"loss: first half {f.losses['first_half']:.3f} nats, repeated half "
        f"{f.losses['repeated']:.3f} nats",
        "ablation effect on the loss (nats): " + ", ".join(f"{k} {v:+.3f}" for k, v in abl.items()),
        "logit lens, repeated half, P(next token) by stage: "
        + ", ".join(
            f"{r.stage_name} {r.next_token_p:.2f}"
            for r in f.lens[f.lens["half"] == "repeated"].itertuples()
        ),
        why_lines(f)[1],
        feature_sentence(f.features, f.induction_label, f.prev_label),
    ]

"""The pretrained-heads lab's figures, HTML report and summary lines.

They lay out the findings of :mod:`.analysis` and compute nothing.
"""

from __future__ import annotations

from typing import Any

from interp.experiments.pretrained_heads.analysis import TITLE, PretrainedFindings, top_by_kind
from interp.outputs.figures import bars, heatmap, line_panels
from interp.outputs.render import Report
from interp.outputs.tables import styled_html

CAUTIONS = [
    "A heatmap is not an explanation. An attention score says where a head looks on this "
    "data, not what it writes into the residual stream or whether anything downstream reads it.",
    "A named role (induction head, clue head) is a hypothesis. It is checked here by "
    "intervention: zero-ablating the named heads together and comparing against the same "
    "number of random heads, several draws. Ablation effects are about this data and this "
    "model; other heads can compensate (redundancy hides single-head effects), and a random "
    "draw can contain a head that matters for other reasons.",
    "Cosines are between one word's vectors in different sentences. Stage 0 is the token "
    "embedding, identical in every sentence, so it is 1 by construction. A falling cosine "
    "shows that context entered the vector; the same-sense control shows how much of that is "
    "sense rather than any change of context. It does not show which components moved it.",
    "The nearest-neighbour probe says the senses are findable in a stage's vectors with two "
    "training sentences per word; it does not show that the model itself uses that "
    "difference.",
    'Many clues sit right before the word ("river bank"), where previous-token heads look '
    "anyway. Clue heads are therefore ranked on the sentences whose clue is not the adjacent "
    "token.",
]


def _stem(name: str) -> str:
    return name.replace("/", "_")


def figures(f: PretrainedFindings) -> dict[str, Any]:
    """Per model: induction-score heatmap and group ablation; both models' sense curves."""
    out: dict[str, Any] = {}
    cos_series: dict[str, Any] = {}
    probe_series: dict[str, Any] = {}
    for i, (name, mf) in enumerate(f.models.items()):
        ind, sense = mf.induction, mf.sense
        pivot = ind.scores.pivot(index="layer", columns="head", values="induction")
        out[f"{_stem(name)}_induction_scores"] = heatmap(
            pivot.to_numpy(),
            row_labels=list(pivot.index),
            col_labels=list(pivot.columns),
            xlabel="head",
            ylabel="layer",
            colorbar="induction score",
            vmin=0,
            vmax=1,
            caption=f"{name}: induction score of each of its {mf.n_layers} x {mf.n_heads} heads "
            "on BOS + random ordinary word tokens repeated once. It shows where heads look; the "
            "ablation shows whether they matter.",
        )
        depth = [s / mf.n_layers for s in sense.similarity["stage"]]
        cos_series[f"{name} cross-sense"] = (
            depth,
            sense.similarity["cross_sense_centred"],
            {"colour": i},
        )
        cos_series[f"{name} same-sense"] = (
            depth,
            sense.similarity["same_sense_centred"],
            {"colour": i, "dashed": True},
        )
        probe_series[f"{name}"] = (depth, sense.probe["accuracy"], {"colour": i})
        if ind.group_ablation is not None:
            abl = ind.group_ablation
            top = abl[abl["kind"] == "top induction"]["effect"].tolist()
            rand = abl[abl["kind"] == "random"]["effect"].tolist()
            out[f"{_stem(name)}_group_ablation"] = bars(
                [f"top {len(ind.top)} induction", f"random {len(ind.top)} (median)"],
                [top[0], float(sorted(rand)[len(rand) // 2])],
                points={f"random {len(ind.top)} (median)": rand},
                highlight=[f"top {len(ind.top)} induction"],
                xlabel="heads zero-ablated together",
                ylabel="change of repeated-half loss (nats)",
                caption=f"{name}: zero-ablating the top induction heads together against random "
                "sets of as many heads (dots: each draw). A costly random draw usually holds a "
                "strong previous-token head (see strong_heads in the table).",
            )
    chance = float(next(iter(f.models.values())).sense.probe["chance"].iloc[0])
    probe_series["chance"] = ([0, 1], [chance, chance], {"colour": 6, "dashed": True})
    out["sense_by_stage"] = line_panels(
        [
            {"title": "centred cosine between uses", "ylabel": "mean cosine", "series": cos_series},
            {"title": "held-out sense probe", "ylabel": "accuracy", "series": probe_series},
        ],
        xlabel="stage / number of layers (0 = token embedding, 1 = last block)",
        caption="Left: a word's vectors in different senses (solid) against the same sense in "
        "different sentences (dashed), centred per stage; the gap is sense beyond context. "
        "Right: a 1-nearest-neighbour sense probe on held-out sentences. Both say the senses "
        "are separable in the vectors, not that the model uses them.",
    )
    return out


def _induction_section(report: Report, name: str, mf: Any, plots: dict[str, Any]) -> None:
    f = mf.induction
    report.heading("Induction heads on repeated random tokens", 3)
    n, length = f.data.tokens.shape
    report.text(
        f"{n} sequences of BOS then {(length - 1) // 2} random ordinary word tokens (no "
        "special tokens or word pieces), repeated once. Scores are the mean attention on each "
        "stripe (interp convention, interp.analysis.heads.scores)"
        + (
            "."
            if f.causal
            else "; this model is bidirectional, so the stripes make no causal "
            "assumption (keys on both sides count)."
        )
    )
    report.figure(plots[f"{_stem(name)}_induction_scores"], f"{_stem(name)}_induction_scores")
    report.table(f.top, caption=f"top {len(f.top)} heads by induction score")
    leaders = top_by_kind(f.scores)
    report.table(leaders, caption="best three heads for each stripe")
    report.text(
        "Patterns of the best head for each stripe on the first sequence: "
        + ", ".join(f"{r.kind} {r.label}" for r in leaders[leaders["rank"] == 1].itertuples())
        + "."
    )
    report.attention(f.str_tokens, f.leader_patterns, head_names=f.leader_labels, causal=f.causal)
    report.table(
        f.composition,
        caption="strongest K-composition pairs (earlier head's OV into later head's keys; "
        "weights only, no data)",
    )
    if f.skipped:
        report.text(f"Skipped: {f.skipped}.")
        return
    report.text(
        f"Mean next-token loss: first half {f.losses['first_half']:.3f} nats (random tokens are "
        f"unpredictable), repeated half {f.losses['repeated']:.3f} nats (predictable by "
        "copying from the first half)."
    )
    report.figure(plots[f"{_stem(name)}_group_ablation"], f"{_stem(name)}_group_ablation")
    report.raw(styled_html(f.group_ablation))
    report.table(
        f.copying,
        caption="OV copying score (sum of OV eigenvalues / sum of their magnitudes; 1 = copies)",
    )
    labels = f.top["label"].tolist()
    report.text(f"Patterns of the top {len(labels)} induction heads on the first sequence.")
    report.attention(f.str_tokens, f.top_patterns, head_names=labels, causal=f.causal)


def _sense_section(report: Report, mf: Any) -> None:
    s = mf.sense
    report.heading("Bank sense: one word, two meanings", 3)
    n_words = s.sentences["word"].nunique()
    report.text(
        f"{len(s.sentences)} sentences: {n_words} ambiguous words, each in two senses, two "
        "sentences per sense, the clue word before the ambiguous word. Vectors are read at the "
        "word's last token."
    )
    report.table(
        s.similarity,
        caption="cosine between the word's vectors across senses and within a sense, per stage",
    )
    report.table(s.probe, caption="nearest-neighbour sense probe, held-out accuracy per stage")
    bank = s.similarity_by_word[s.similarity_by_word["word"] == "bank"]
    if len(bank):
        report.table(bank, caption="the article's word: bank (river vs money)")
    heads = s.clue_heads
    report.table(
        heads.nlargest(10, "clue_attention"),
        caption=f"heads attending from the word to its clue ({heads.attrs.get('sentences')} "
        "sentences): clue_attention = mass on the clue; lift = per clue token / per other token",
    )
    for i, pattern in s.example_patterns.items():
        item = s.items[i]
        report.text(f"{item.text!r}: the word is {item.str_tokens[item.word_pos]!r}")
        report.attention(
            list(item.str_tokens), pattern, head_names=s.top_clue_heads, causal=s.causal
        )
    report.text(
        "Intervention: zero-ablate the top clue heads together, against random heads; "
        "measured on the last stage: gap_centred (same-sense minus cross-sense centred cosine) "
        "and the probe's accuracy."
    )
    report.raw(styled_html(s.clue_ablation, colour="delta_gap_centred"))


def report(f: PretrainedFindings, plots: dict[str, Any] | None = None) -> Report:
    """The lab's HTML report (:class:`interp.outputs.render.Report`)."""
    plots = figures(f) if plots is None else plots  # the writer passes the ones it saves
    report = Report(TITLE)
    report.text(
        "The article's last step: watch real heads. Every number below is computed from the "
        "model's own activations and weights; read the cautions before quoting one. "
        f"Seed {f.seed}."
    )
    report.cautions(CAUTIONS)
    report.figure(plots["sense_by_stage"], "sense_by_stage")
    for name, mf in f.models.items():
        kind = "causal" if mf.induction.causal else "bidirectional encoder"
        report.heading(f"{name}: {mf.n_layers} layers x {mf.n_heads} heads, {kind}")
        _induction_section(report, name, mf, plots)
        _sense_section(report, mf)
    return report


def summary(f: PretrainedFindings) -> list[str]:
    """Lines for the terminal."""
    lines = []
    for name, mf in f.models.items():
        ind, sense = mf.induction, mf.sense
        lead = top_by_kind(ind.scores, 1).set_index("kind")
        lines.append(
            f"{name}: best heads: "
            + ", ".join(f"{k} {r['label']} ({r['score']:.3f})" for k, r in lead.iterrows())
        )
        if ind.group_ablation is not None and ind.losses is not None:
            abl = ind.group_ablation
            rand = abl[abl["kind"] == "random"]["effect"]
            lines.append(
                f"  loss first half {ind.losses['first_half']:.3f}, repeated half "
                f"{ind.losses['repeated']:.3f}; ablating the top {len(ind.top)}: "
                f"{abl['effect'].iloc[0]:+.3f} nats, random (median of {len(rand)}): "
                f"{rand.median():+.3f}"
            )
        sim, probe = sense.similarity, sense.probe
        lines.append(
            f"  bank-sense cosine across senses: {sim['cross_sense'].iloc[0]:.3f} (embedding) -> "
            f"{sim['cross_sense'].iloc[-1]:.3f} (last layer); probe accuracy "
            f"{probe['accuracy'].iloc[0]:.3f} -> {probe['accuracy'].max():.3f} (best stage)"
        )
    return lines

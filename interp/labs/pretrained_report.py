"""Write the pretrained-heads lab's report: ``interp lab pretrained``.

For each model (default: ``smollm2-135m`` and ``minilm-l6``) this runs
:func:`interp.labs.pretrained.induction_in` and
:func:`interp.labs.pretrained.sense_in` and writes ``OUT/report.html``
(self-contained, renders offline) plus every table as
``OUT/<model>_<table>.csv``, all atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from interp._export import export, styled_html
from interp.analysis._common import parse_heads, patterns
from interp.errors import InterpError
from interp.labs._output import LabOutput, prepare_out_dir
from interp.labs.pretrained import (
    InductionInModel,
    SenseInModel,
    induction_in,
    sense_in,
    top_by_kind,
)
from interp.render import Report

DEFAULT_OUT = Path("reports") / "pretrained"
DEFAULT_MODELS = ("smollm2-135m", "minilm-l6")
Results = dict[str, tuple[Any, InductionInModel, SenseInModel]]

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


def _check_models(models: Sequence[Any]) -> list[Any]:
    if not models:
        raise InterpError("no models given; name at least one of " + ", ".join(DEFAULT_MODELS))
    return list(models)


def induction_tables(f: InductionInModel) -> dict[str, pd.DataFrame]:
    out = {
        "induction_scores": f.scores,
        "induction_top": f.top,
        "head_leaders": top_by_kind(f.scores),
    }
    if f.composition is not None:
        out["induction_composition_k"] = f.composition
    if f.losses is not None:
        out["induction_losses"] = pd.DataFrame([f.losses])
    if f.group_ablation is not None:
        out["induction_ablation"] = f.group_ablation
    if f.copying is not None:
        out["induction_copying"] = f.copying
    return out


def sense_tables(s: SenseInModel) -> dict[str, pd.DataFrame]:
    return {
        "sense_sentences": s.sentences,
        "sense_similarity": s.similarity,
        "sense_similarity_by_word": s.similarity_by_word,
        "sense_probe": s.probe,
        "clue_heads": s.clue_heads,
        "clue_ablation": s.clue_ablation,
    }


def _patterns(model: Any, tokens: torch.Tensor, labels: list[str]) -> torch.Tensor:
    """``[head, q, k]`` patterns of the heads ``labels`` on one ``[1, pos]`` sequence."""
    wanted = parse_heads(model, labels)
    layers = sorted({l for l, _ in wanted})
    per_layer = dict(zip(layers, patterns(model, tokens, layers=layers)))
    return torch.stack([per_layer[l][0, h] for l, h in wanted])


def _induction_section(report: Report, model: Any, f: InductionInModel) -> None:
    report.heading("Induction heads on repeated random tokens", 3)
    n, length = f.data.tokens.shape
    report.text(
        f"{n} sequences of BOS then {(length - 1) // 2} random ordinary word tokens (no "
        "special tokens or word pieces), repeated once. Scores are the mean attention on each "
        "stripe (interp.analysis.induction)"
        + (
            "."
            if f.causal
            else "; this model is bidirectional, so the stripes make no causal "
            "assumption (keys on both sides count)."
        )
    )
    report.heatmap(f.scores.pivot(index="layer", columns="head", values="induction"), "induction")
    report.table(f.top, caption=f"top {len(f.top)} heads by induction score")
    leaders = top_by_kind(f.scores)
    report.table(leaders, caption="best three heads for each stripe")
    tokens = f.data.tokens[:1]
    strs = model.to_str_tokens(tokens[0])
    best = list(dict.fromkeys(leaders[leaders["rank"] == 1]["label"]))
    report.text(
        "Patterns of the best head for each stripe on the first sequence: "
        + ", ".join(f"{r.kind} {r.label}" for r in leaders[leaders["rank"] == 1].itertuples())
        + "."
    )
    report.attention(strs, _patterns(model, tokens, best), head_names=best, causal=f.causal)
    if f.composition is not None:
        report.table(
            f.composition,
            caption="strongest K-composition pairs (earlier head's OV into later head's keys; "
            "weights only, no data)",
        )
    if f.skipped:
        report.text(f"Skipped: {f.skipped}.")
        return
    assert f.losses is not None and f.group_ablation is not None and f.copying is not None
    report.text(
        f"Mean next-token loss: first half {f.losses['first_half']:.3f} nats (random tokens are "
        f"unpredictable), repeated half {f.losses['repeated']:.3f} nats (predictable by "
        "copying from the first half)."
    )
    report.text(
        "Zero-ablation at hook_z, the top heads together against random heads drawn from the "
        "rest (delta = change of repeated-half loss, nats). strong_heads lists the heads of a "
        "group that score at least 0.5 on some stripe: a random draw that costs as much as the "
        "induction heads usually holds a strong previous-token head, the other half of the "
        "induction circuit."
    )
    report.raw(styled_html(f.group_ablation))
    report.table(
        f.copying,
        caption="OV copying score (sum of OV eigenvalues / sum of their magnitudes; 1 = copies)",
    )
    labels = f.top["label"].tolist()
    report.text(f"Patterns of the top {len(labels)} induction heads on the first sequence.")
    report.attention(strs, _patterns(model, tokens, labels), head_names=labels, causal=f.causal)


def _sense_section(report: Report, model: Any, s: SenseInModel, k: int) -> None:
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
    top = heads.nlargest(k, "clue_attention")["label"].tolist()
    for i in s.sentences.index[s.sentences["word"] == "bank"][::2][:2]:
        item = s.items[i]
        report.text(f"{item.text!r}: the word is {item.str_tokens[item.word_pos]!r}")
        report.attention(
            list(item.str_tokens),
            _patterns(model, item.tokens, top),
            head_names=top,
            causal=s.causal,
        )
    report.text(
        "Intervention: zero-ablate the top clue heads together, against random heads; "
        "measured on the last stage: gap_centred (same-sense minus cross-sense centred cosine) "
        "and the probe's accuracy."
    )
    report.raw(styled_html(s.clue_ablation, colour="delta_gap_centred"))


def build_report(results: Results, k: int) -> Report:
    report = Report("Real heads: induction and word sense in pretrained transformers")
    report.text(
        "The article's last step: watch real heads. Every number below is computed from the "
        "model's own activations and weights; read the cautions before quoting one."
    )
    report.heading("Cautions: what these numbers do not show")
    for line in CAUTIONS:
        report.text(line)
    for alias, (model, ind, sense) in results.items():
        cfg = model.cfg
        kind = "causal" if ind.causal else "bidirectional encoder"
        report.heading(f"{alias}: {cfg.n_layers} layers x {cfg.n_heads} heads, {kind}")
        _induction_section(report, model, ind)
        _sense_section(report, model, sense, k)
    return report


def _summary(alias: str, ind: InductionInModel, sense: SenseInModel) -> list[str]:
    lead = top_by_kind(ind.scores, 1).set_index("kind")
    lines = [
        f"{alias}: best heads: "
        + ", ".join(f"{k} {r['label']} ({r['score']:.3f})" for k, r in lead.iterrows())
    ]
    if ind.group_ablation is not None and ind.losses is not None:
        abl = ind.group_ablation
        rand = abl[abl["kind"] == "random"]["delta"]
        lines.append(
            f"  loss first half {ind.losses['first_half']:.3f}, repeated half "
            f"{ind.losses['repeated']:.3f}; ablating the top {len(ind.top)}: "
            f"{abl['delta'].iloc[0]:+.3f} nats, random (median of {len(rand)}): "
            f"{rand.median():+.3f}"
        )
    sim, probe = sense.similarity, sense.probe
    lines.append(
        f"  bank-sense cosine across senses: {sim['cross_sense'].iloc[0]:.3f} (embedding) -> "
        f"{sim['cross_sense'].iloc[-1]:.3f} (last layer); probe accuracy "
        f"{probe['accuracy'].iloc[0]:.3f} -> {probe['accuracy'].max():.3f} (best stage)"
    )
    return lines


def analyse(
    models: Sequence[Any] = DEFAULT_MODELS, *, k: int = 6, seed: int = 0, progress: bool = True
) -> Results:
    """Both parts of the lab for each model: ``{name: (model, induction, sense)}``.

    Shows a progress bar (three steps per model: load, induction, sense).

    Raises:
        InterpError: for no models or an unknown alias.
    """
    from tqdm.auto import tqdm

    from interp.models import load_model
    from interp.models.pretrained import check_model_name

    models = _check_models(models)
    for m in models:  # every name, before any slow work or output
        if isinstance(m, str):
            check_model_name(m)
    results: Results = {}
    with tqdm(total=3 * len(models), disable=not progress, desc="pretrained lab") as bar:
        for m in models:
            name = str(m if isinstance(m, str) else getattr(m.cfg, "model_name", "model"))
            bar.set_postfix_str(f"{name}: loading")
            model = load_model(m) if isinstance(m, str) else m
            if not getattr(getattr(model, "tokenizer", None), "is_fast", False):
                raise InterpError(
                    f"{name} has no Hugging Face tokenizer; the pretrained lab needs real text "
                    f"models ({', '.join(DEFAULT_MODELS)} or a local Hugging Face directory)"
                )
            bar.update()
            bar.set_postfix_str(f"{name}: induction")
            ind = induction_in(model, k=k, seed=seed)
            bar.update()
            bar.set_postfix_str(f"{name}: word sense")
            results[name] = (model, ind, sense_in(model, k=k, seed=seed))
            bar.update()
    return results


def write(out_dir: str | os.PathLike[str], results: Results, *, k: int = 6) -> LabOutput:
    """Write the report and the tables of :func:`analyse`'s ``results`` (atomically).

    Raises:
        InterpError: for an output path that is a file.
    """
    out = prepare_out_dir(out_dir)
    paths, summary = {}, []
    for name, (_, ind, sense) in results.items():
        stem = name.replace("/", "_")
        for table, df in {**induction_tables(ind), **sense_tables(sense)}.items():
            paths[f"{stem}_{table}"] = export(df, out / f"{stem}_{table}.csv")
        summary += _summary(name, ind, sense)
    report_path = build_report(results, k).write(out / "report.html")
    summary.append(f"wrote {report_path} and {len(paths)} csv tables")
    return LabOutput(out_dir=out, report=report_path, tables=paths, summary=summary)


def run(
    out_dir: str | os.PathLike[str] = DEFAULT_OUT,
    *,
    models: Sequence[Any] = DEFAULT_MODELS,
    k: int = 6,
    seed: int = 0,
) -> LabOutput:
    """Run the lab on ``models`` (aliases, local paths, or loaded models) and write the report.

    Raises:
        InterpError: for no models, an unknown alias, or an output path that is a file.
    """
    prepare_out_dir(out_dir)  # fail before loading anything
    return write(out_dir, analyse(models, k=k, seed=seed), k=k)

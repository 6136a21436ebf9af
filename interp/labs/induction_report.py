"""Write the induction lab's report: ``interp lab induction``.

``OUT/report.html`` is self-contained and renders offline (circuitsvis bundle
inlined once). Every table is also written as ``OUT/<name>.<format>``
(csv by default; parquet, md or json with ``--format``), all atomically.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from interp._export import export, styled_html
from interp.errors import InterpError
from interp.labs._output import LabOutput, prepare_out_dir
from interp.labs.induction import InductionFindings, analyse, example_sequence
from interp.render import Report

DEFAULT_OUT = Path("reports") / "induction"
TABLE_FORMATS = ("csv", "parquet", "md", "json")


def tables(f: InductionFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name."""
    return {
        "summary": f.summary().astype({"value": str}),
        "head_scores": f.scores,
        "composition_k": f.composition,
        "composition_q": f.composition_q,
        "composition_v": f.composition_v,
        "copying": f.copying,
        "ablation": f.ablation,
        "group_ablation": f.group_ablation,
        "losses": pd.DataFrame([{**f.losses, **{f"icl_{k}": v for k, v in f.icl.items()}}]),
    }


def build_report(model: Any, f: InductionFindings) -> Report:
    report = Report("Induction heads in a two-layer attention-only model")
    report.text(
        "All numbers are computed on held-out repeated sequences whose segment lengths were "
        "never used in training. Attention scores name hypotheses; the ablation table tests "
        "them. A heatmap shows where a head looks, not what it writes."
    )
    report.heading("Summary")
    summary = f.summary()
    summary["value"] = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in summary["value"]]
    report.table(summary)

    report.heading("Attention patterns on one held-out sequence")
    tokens = example_sequence(f)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    labels = model.to_str_tokens(tokens[0])
    labels = ["BOS" if i == 0 else t for i, t in enumerate(labels)]
    pats, names = [], []
    for l in range(model.cfg.n_layers):
        for h in range(model.cfg.n_heads):
            pats.append(cache[f"blocks.{l}.attn.hook_pattern"][0, h])
            names.append(f"L{l}H{h}")
    report.attention(labels, torch.stack(pats), head_names=names, causal=True)
    key = [f.prev_label, f.induction_label]
    report.text(f"Key heads: previous-token {key[0]}, induction {key[1]}.")
    report.attention(labels, torch.stack([pats[names.index(k)] for k in key]), head_names=key)

    report.heading("Head scores (layer x head)")
    for col in ("previous_token", "induction", "duplicate_token"):
        report.heatmap(f.scores.pivot(index="layer", columns="head", values=col), col)
    report.table(f.scores)

    report.heading("K-composition (earlier OV into later keys)")
    report.heatmap(
        f.composition.pivot(index="src_label", columns="label", values="score"),
        f"K-composition scores; random baseline {f.composition['baseline'].iloc[0]:.3f}",
    )
    report.text(
        f"K-composition circuit {f.prev_label} -> {f.induction_label}: fraction of query "
        f"tokens whose best key is the one preceded by the same token = "
        f"{f.kcomp_diagonal_fraction:.3f}."
    )
    report.heading("OV copying scores")
    report.table(f.copying)
    report.heading("Ablations (zero, at hook_z)")
    report.raw(styled_html(f.ablation))
    report.raw(styled_html(f.group_ablation))
    report.text(
        "Caution: ablation effects describe this data and this model; other heads may "
        "compensate, and a head that looks like an induction head can contribute nothing."
    )
    return report


def run(
    out_dir: str | os.PathLike[str] = DEFAULT_OUT,
    *,
    fmt: str = "csv",
    model: Any = None,
    checkpoint: str | os.PathLike[str] | None = None,
) -> LabOutput:
    """Analyse the shipped checkpoint (or ``model`` / ``checkpoint``) and write the report.

    Raises:
        InterpError: for an unknown table format or an output path that is a file.
        CheckpointError: for a missing or corrupt checkpoint.
    """
    if fmt not in TABLE_FORMATS:
        raise InterpError(f"unknown table format {fmt!r}; choose one of {', '.join(TABLE_FORMATS)}")
    out = prepare_out_dir(out_dir)
    if model is None:
        from interp.models.checkpoints import load_induction_model

        model = load_induction_model(checkpoint)
    findings = analyse(model)
    paths = {name: export(df, out / f"{name}.{fmt}") for name, df in tables(findings).items()}
    report_path = build_report(model, findings).write(out / "report.html")
    abl = findings.ablation.set_index("label")["delta"]
    summary = [
        f"previous-token head {findings.prev_label} "
        f"(score {findings.score_of(findings.prev_head, 'previous_token'):.3f}), "
        f"induction head {findings.induction_label} "
        f"(score {findings.score_of(findings.induction_head, 'induction'):.3f})",
        f"loss: first half {findings.losses['first_half']:.3f}, "
        f"repeated half {findings.losses['repeated']:.3f}",
        "ablation delta (nats): " + ", ".join(f"{k} {v:+.3f}" for k, v in abl.items()),
        f"wrote {report_path} and {len(paths)} {fmt} tables",
    ]
    return LabOutput(out_dir=out, report=report_path, tables=paths, summary=summary)

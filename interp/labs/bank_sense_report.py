"""Run the whole bank-sense lab and write its report: ``interp lab bank-sense``.

Writes ``OUT/report.html`` (self-contained, renders offline) and one CSV per
table, all atomically, and returns a short summary for the terminal.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from interp._io import write_with
from interp.labs import bank_sense as bs
from interp.labs import sense_training as st
from interp.labs._output import LabOutput, prepare_out_dir
from interp.render import Report

DEFAULT_OUT = Path("reports") / "bank-sense"


def build_tables() -> tuple[dict[str, pd.DataFrame], dict[str, object]]:
    """Compute every table of the lab, plus the extra arrays the report shows."""
    fit = st.train_sense_classifier()
    biased_fit, biased = st.biased_dataset()
    walk = st.SGDWalkthrough()
    first = walk.trace(0)
    grads = first["7. gradients"]["emb"]
    walk.apply_update()
    history = walk.train(19)
    ns = bs.null_space_example()
    sense = fit.table.assign(
        bank_attention=[str(st.rounded_attention(r)) for r in fit.table["bank_attention"]]
    )
    groups = fit.model.parameter_groups()
    tables: dict[str, pd.DataFrame] = {
        "embeddings": bs.embeddings().reset_index(),
        "bank_weights": bs.bank_weights_table(),
        "identity_forward": bs.identity_forward_table(),
        "score_scale": bs.score_scale_sweep(),
        "softmax": bs.softmax_table(),
        "similarity": bs.similarity_table(),
        "scaled_dot": bs.scaled_dot_table(),
        "eiffel": bs.eiffel(),
        "eiffel_queries": bs.eiffel_queries().reset_index(),
        **{f"matching_{p}": bs.matching_directions(p) for p in bs.PRESETS},
        "matching_zero_query": bs.matching_directions(Wq=np.zeros((4, 3))),
        "null_space": pd.DataFrame(
            {
                "vector": ["n", "e", "e+n", "Mn", "Me", "M(e+n)"],
                "value": [
                    str(np.round(ns[k], 6).tolist())
                    for k in ("n", "e", "e_plus_n", "Mn", "Me", "M_e_plus_n")
                ],
            }
        ),
        "causal": bs.causal_comparison(),
        "sgd_gradients_embedding": pd.DataFrame(grads, columns=["d0", "d1"]).assign(
            token=list(st.VOCAB)
        )[["token", "d0", "d1"]],
        "sgd_training": history,
        "sense_classifier": sense,
        "parameter_groups": pd.DataFrame(
            {"group": [*groups, "total"], "parameters": [*groups.values(), sum(groups.values())]}
        ),
        "biased_dataset": biased,
    }
    extras = {"fit": fit, "biased_fit": biased_fit, "walk": walk, "null": ns}
    return tables, extras


def run(out_dir: str | os.PathLike[str] = DEFAULT_OUT) -> LabOutput:
    """Compute the lab, write ``report.html`` and one CSV per table into ``out_dir``.

    Raises:
        InterpError: if ``out_dir`` is an existing file.
    """
    out = prepare_out_dir(out_dir)
    tables, extras = build_tables()
    report = Report("Bank sense: how one attention head mixes information")
    report.text(
        "Every number below is computed by interp from the article's toy vectors; the "
        "attention patterns are read from TransformerLens hooks on the toy head. The "
        "axes are hand-chosen for legibility; a heatmap shows mixing weights, not an "
        "explanation of what is contributed."
    )

    report.heading("a. One forward pass with identity projections")
    for s in bs.SENTENCES:
        r = bs.identity_forward(s)
        report.attention(r["tokens"], r["A"], head_names=[s], causal=False)
    report.table(tables["bank_weights"], "bank's scores and weights")
    report.table(tables["identity_forward"], "vectors at bank")

    report.heading("b. Score scale, softmax and similarity")
    for name in ("score_scale", "softmax", "similarity", "scaled_dot"):
        report.table(tables[name], name.replace("_", " "))

    report.heading("c. Eiffel tower: change the match, then the content")
    report.table(tables["eiffel"], "tower's weights and mixture")
    report.table(tables["eiffel_queries"], "queries under the swap matrix")

    report.heading("d. Three matching directions for bank's query (fixed keys)")
    for name in [*(f"matching_{p}" for p in bs.PRESETS), "matching_zero_query"]:
        report.table(tables[name], name.replace("_", " "))

    report.heading("e. What the query map ignores: the null space of M")
    report.table(tables["null_space"], "M = [[1,0,1],[0,1,1]]")

    report.heading("f. Two-coordinate SGD walkthrough")
    report.text("Embedding gradients for 'the river bank': money is absent and gets exactly 0.")
    report.table(tables["sgd_gradients_embedding"])
    report.table(tables["sgd_training"], "20 SGD steps alternating the examples", "{:.4f}")

    report.heading("g. The trained eight-dimensional OneHeadSense")
    fit = extras["fit"]
    for tokens, _ in st.ARTICLE_DATA[:2]:
        _, A = fit.model(fit.model.encode(list(tokens)), return_attn=True)
        report.attention(list(tokens), A.detach(), head_names=[" ".join(tokens)], causal=False)
    report.table(tables["sense_classifier"], "predictions and bank's attention (rounded)")
    report.table(tables["parameter_groups"], "parameters")

    report.heading("h. Attention learns the data, not the world (biased labels)")
    report.text(
        "Seed-0 run on our stack; the article's table is a reference, not a target. "
        "Small weights, values and the classifier all matter."
    )
    report.table(tables["biased_dataset"], float_format="{:.2f}")

    report.heading("i. Causal masking")
    demo = bs.causal_mask_demo()
    report.attention(
        demo["tokens"],
        np.stack([demo["bidirectional"], demo["causal"], demo["zero_mask"]]),
        head_names=["bidirectional", "causal (-inf)", "wrong mask (0)"],
        causal=False,
    )
    report.table(tables["causal"], "bank's row, bidirectional vs causal")
    cat = bs.tired_cat()
    report.attention(
        cat["tokens"],
        np.stack([cat["bidirectional"], cat["causal"]]),
        head_names=["bidirectional (illustrative)", "causal"],
        causal=False,
    )

    paths = {}
    for name, df in tables.items():
        paths[name] = write_with(out / f"{name}.csv", lambda p, df=df: df.to_csv(p, index=False))
    report_path = report.write(out / "report.html")

    r = bs.identity_forward("the river bank")
    swap = (
        tables["eiffel"].set_index("variant").loc["swap query", ["w[the]", "w[Eiffel]", "w[tower]"]]
    )
    swap = swap.to_numpy(dtype=float)
    sense = tables["sense_classifier"]
    summary = [
        f"river bank: weights {np.round(r['weights'], 2).tolist()}, "
        f"mixture {np.round(r['mixture'], 2).tolist()}",
        f"Eiffel swap query: weights {np.round(swap, 4).tolist()}",
        f"null direction n = {np.round(extras['null']['n'], 6).tolist()}, "
        f"Me = M(e+n) = {extras['null']['Me'].tolist()}",
        f"OneHeadSense (seed 0): predictions {sense['prediction'].tolist()[:2]}, "
        f"bank attention {sense['bank_attention'].tolist()[:2]}",
        f"wrote {report_path} and {len(paths)} CSV tables",
    ]
    return LabOutput(out_dir=out, report=report_path, tables=paths, summary=summary)

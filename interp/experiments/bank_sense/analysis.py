"""The bank-sense lab: every experiment of the article "How an attention head mixes information".

Part one runs hand-set toy heads (:mod:`interp.experiments.bank_sense.toy_heads`): the
identity head on "the river bank" / "the money bank", score scales, softmax,
the Eiffel-tower swap query, fixed-key matching directions, the null space
of a query map, and causal masking (:mod:`interp.experiments.bank_sense.causal_masking`);
the scores of bank's row and of the Eiffel swap split into query-side and key-side
pieces by input coordinate (:mod:`interp.experiments.bank_sense.qk_split`).
Part two trains (:mod:`interp.experiments.bank_sense.sense_training`): the article's
two-coordinate SGD widget, the eight-dimensional ``OneHeadSense`` classifier,
and the biased dataset. Every number is computed
here, read off TransformerLens hooks on the toy heads and checked against the
article's numpy head; none is copied from the article.

Example (one experiment; :func:`analyse` runs them all):
    >>> th.identity_forward("the river bank")["weights"].round(2).tolist()
    [0.26, 0.31, 0.43]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from interp.core.checks import check_seed
from interp.experiments.bank_sense import causal_masking as cm
from interp.experiments.bank_sense import qk_split
from interp.experiments.bank_sense import sense_training as st
from interp.experiments.bank_sense import toy_heads as th
from interp.experiments.common import progress_bar

NAME = "bank-sense"
TITLE = "Bank sense: how one attention head mixes information"
SGD_STEPS = 20


@dataclasses.dataclass(frozen=True)
class BankSenseFindings:
    """Everything the bank-sense lab computes and its report shows."""

    seed: int
    tables: dict[str, pd.DataFrame]
    identity: dict[str, dict[str, Any]]  # sentence -> identity_forward result
    classifier_patterns: dict[str, np.ndarray]  # sentence -> [pos, pos] trained attention
    causal_demo: dict[str, Any]
    tired_cat: dict[str, Any]
    null_space: dict[str, Any]
    sgd_paths: dict[str, np.ndarray]  # sentence -> [steps + 1, 2] bank's mixture
    biased: pd.DataFrame

    @property
    def sense_classifier(self) -> pd.DataFrame:
        return self.tables["sense_classifier"]


def analyse(*, seed: int = 0, progress: bool = False) -> BankSenseFindings:
    """Run every experiment (module docstring); ``seed`` seeds the three trainings (0 = article).

    Raises:
        InterpError: for a bad seed.
    """
    seed = check_seed(seed)
    bar = progress_bar(5, progress, "bank-sense lab")
    identity = {s: th.identity_forward(s) for s in th.SENTENCES}
    ns = th.null_space_example()
    tables: dict[str, pd.DataFrame] = {
        "embeddings": th.embeddings().reset_index(),
        "bank_weights": th.bank_weights_table(),
        "identity_forward": th.identity_forward_table(),
        "score_scale": th.score_scale_sweep(),
        "softmax": th.softmax_table(),
        "similarity": th.similarity_table(),
        "scaled_dot": th.scaled_dot_table(),
        "dot_product_spread": pd.DataFrame([th.dot_product_spread(seed=seed)]),
        "eiffel": th.eiffel(),
        "eiffel_queries": th.eiffel_queries().reset_index(),
        **{f"matching_{p}": th.matching_directions(p) for p in th.PRESETS},
        "matching_zero_query": th.matching_directions(Wq=np.zeros((4, 3))),
        "null_space": pd.DataFrame(
            {
                "vector": ["n", "e", "e+n", "Mn", "Me", "M(e+n)"],
                "value": [
                    str(np.round(ns[k], 6).tolist())
                    for k in ("n", "e", "e_plus_n", "Mn", "Me", "M_e_plus_n")
                ],
            }
        ),
        "causal": cm.causal_comparison(),
        **qk_split.article_splits(),
    }
    bar.update()
    walk = st.SGDWalkthrough(seed=seed)
    first = walk.trace(0)
    grads = first["7. gradients"]["emb"]
    start = walk.mixtures()
    walk.apply_update()
    steps = [walk.mixtures()]
    history = [_step_row(first, 1)]
    for _ in range(SGD_STEPS - 1):
        t = walk.trace()
        history.append(_step_row(t, walk.updates + 1))
        walk.apply_update()
        steps.append(walk.mixtures())
    paths = {s: np.stack([start[s]] + [m[s] for m in steps]) for s in start}
    tables["sgd_gradients_embedding"] = pd.DataFrame(grads, columns=["d0", "d1"]).assign(
        token=list(st.VOCAB)
    )[["token", "d0", "d1"]]
    tables["sgd_training"] = pd.DataFrame(history)
    bar.update()
    fit = st.train_sense_classifier(seed=seed)
    bar.update()
    groups = fit.model.parameter_groups()
    tables["sense_classifier"] = fit.table.assign(
        bank_attention=[str(st.rounded_attention(r)) for r in fit.table["bank_attention"]]
    )
    tables["parameter_groups"] = pd.DataFrame(
        {"group": [*groups, "total"], "parameters": [*groups.values(), sum(groups.values())]}
    )
    patterns = {}
    for tokens, _ in st.ARTICLE_DATA[:2]:
        _, A = fit.model(fit.model.encode(list(tokens)), return_attn=True)
        patterns[" ".join(tokens)] = A.detach().numpy()
    _, biased = st.biased_dataset(seed=seed)
    tables["biased_dataset"] = biased
    bar.update()
    demo, cat = cm.causal_mask_demo(), cm.tired_cat()
    bar.update()
    bar.close()
    return BankSenseFindings(
        seed=seed,
        tables=tables,
        identity=identity,
        classifier_patterns=patterns,
        causal_demo=demo,
        tired_cat=cat,
        null_space=ns,
        sgd_paths=paths,
        biased=biased,
    )


def _step_row(t: dict[str, Any], step: int) -> dict[str, Any]:
    target = t["1. sentence"]["target"]
    return {
        "step": step,
        "sentence": " ".join(t["1. sentence"]["tokens"]),
        "loss_before": t["6. loss"]["loss"],
        "p_target": float(t["5. prediction"]["probs"][st.SENSES.index(target)]),
    }


def tables(f: BankSenseFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name."""
    return dict(f.tables)

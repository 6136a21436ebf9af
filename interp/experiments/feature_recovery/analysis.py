"""The feature-recovery lab: what two 9 x 3 maps learn, read and ignore; null spaces in a real head.

Part one trains the synthetic task of :mod:`interp.experiments.feature_recovery.feature_task` (only
``W_Q`` and ``W_V`` learn; keys and output targets are fixed so feature
meanings are identifiable) on three seeds, and checks which features each
map recovers, held-out accuracy against baselines, and interventions on
relevant and irrelevant input directions. Part two runs the null-space probe
(:func:`interp.analysis.null_space_probe`) on the induction head of the
shipped two-layer model: directions in the null space of its ``W_Q^T`` leave
its queries and (keys held fixed) its attention unchanged, while row-space
controls move them; and the article's count, the nullity of a random
12,288 x 128 query map.

Example (the article's count, small; :func:`analyse` runs the lab):
    >>> query_map_arithmetic(d_in=64, d_out=8)[["rank", "nullity"]].values.tolist()
    [[8, 56]]
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.heads.subspace import null_space_dimension
from interp.core.checks import check_seed
from interp.experiments.common import progress_bar
from interp.experiments.feature_recovery import feature_task as fr

NAME = "feature-recovery"
TITLE = "Feature recovery: what two 9 x 3 maps learn, read and ignore"
N_SEEDS = 3


@dataclasses.dataclass(frozen=True)
class FeatureFindings:
    """Everything the feature-recovery lab computes and its report shows."""

    seed: int
    runs: list[fr.Recovery]
    seeds: pd.DataFrame
    maps: pd.DataFrame
    null_space: dict[str, Any]
    query_map: pd.DataFrame
    probe: pd.DataFrame
    read: pd.DataFrame


def query_map_arithmetic(d_in: int = 12_288, d_out: int = 128, seed: int = 0) -> pd.DataFrame:
    """The article's count: a random ``d_in x d_out`` query map has ``d_in - d_out`` null dims."""
    W = np.random.default_rng(seed).standard_normal((d_in, d_out)).astype(np.float32)
    t = time.perf_counter()
    nullity = null_space_dimension(W, convention="row")
    return pd.DataFrame(
        [
            {
                "d_in": d_in,
                "d_out": d_out,
                "rank": d_in - nullity,
                "nullity": nullity,
                "seconds": time.perf_counter() - t,
            }
        ]
    )


def analyse(*, seed: int = 0, progress: bool = False) -> FeatureFindings:
    """Train seeds ``seed .. seed + 2``, evaluate them, and probe the induction head's null space.

    Raises:
        InterpError: for a bad seed.
    """
    from interp.analysis.heads.null_probe import null_space_probe, read_fraction
    from interp.analysis.heads.scores import probe_tokens
    from interp.experiments.bank_sense.toy_heads import null_space_example
    from interp.models.checkpoints import load_induction_model

    seed = check_seed(seed)
    bar = progress_bar(N_SEEDS + 2, progress, "feature-recovery lab")
    runs = []
    for s in range(seed, seed + N_SEEDS):
        runs.append(fr.run(s))
        bar.update()
    Wq, Wv = fr.canonical_maps(runs[0].model)
    maps = pd.DataFrame(
        np.concatenate([Wq, Wv], 1),
        columns=[f"W_Q[:, {i}]" for i in range(3)] + [f"W_V[:, {i}]" for i in range(3)],
    )
    maps.insert(0, "feature", list(fr.FEATURES))
    model = load_induction_model()
    tokens = probe_tokens(model, n=8, seed=seed)
    probe = null_space_probe(model, tokens, layer=1, head=1, component="Q", seed=seed)
    read = read_fraction(model, tokens)
    bar.update()
    query_map = query_map_arithmetic(seed=seed)
    bar.update()
    bar.close()
    return FeatureFindings(
        seed=seed,
        runs=runs,
        seeds=fr.summarise(runs),
        maps=maps,
        null_space=null_space_example(),
        query_map=query_map,
        probe=probe,
        read=read,
    )


PROBE_COLUMNS = (
    "d_query",
    "d_pattern_fixed_keys",
    "d_pattern",
    "d_key",
    "d_other_queries",
    "d_output",
)


def tables(f: FeatureFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name."""
    main = f.runs[0]
    ns = f.null_space
    return {
        "alignment": main.alignment,
        "recovered": pd.DataFrame(
            [{"claim": k, "holds": v} for k, v in fr.recovered(main.alignment).items()]
        ),
        "held_out": pd.DataFrame([main.held_out]),
        "interventions": main.interventions,
        "seeds": f.seeds,
        "learned_maps": f.maps,
        "null_space_3d": pd.DataFrame(
            {
                "vector": ["n", "Mn", "Me", "M(e+n)"],
                "value": [
                    str(np.round(ns[k], 6).tolist()) for k in ("n", "Mn", "Me", "M_e_plus_n")
                ],
            }
        ),
        "query_map_arithmetic": f.query_map,
        "null_space_probe": f.probe,
        "read_fraction": f.read,
    }

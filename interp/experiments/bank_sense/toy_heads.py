"""The bank-sense lab's toy-head experiments: one head on hand-chosen vectors, no training.

Each function reproduces one experiment of the article "How an attention head
mixes information" and returns data (a DataFrame or a dict of arrays). Every
head here runs through the hooked toy model (:func:`interp.models.toy.toy_model`)
and is cross-checked against the article's numpy reference
(:func:`interp.models.toy.attention`), so the numbers printed by the notebook
are read off TransformerLens hooks, not retyped.

The toy embedding axes are hand-chosen for legibility (finance, water,
structure, generic); real embeddings have no labelled finance coordinate.
Causal masking (experiment i) is in :mod:`interp.experiments.bank_sense.causal_masking`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.heads.subspace import subspaces
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.models.attn_only import words_to_ids
from interp.models.toy import attention, softmax, toy_model

AXES = ("finance", "water", "structure", "generic")
EMB: dict[str, np.ndarray] = {
    #               finance water structure generic
    "the": np.array([0.0, 0.0, 0.0, 1.0]),
    "river": np.array([0.0, 1.0, 0.0, 0.2]),
    "money": np.array([1.0, 0.0, 0.0, 0.2]),
    "bank": np.array([0.5, 0.5, 0.8, 0.2]),
}
VOCAB = tuple(EMB)
SENTENCES = ("the river bank", "the money bank")

# The Eiffel-tower teaching space: axes structure and Paris identity.
EIFFEL_VOCAB = ("the", "Eiffel", "tower")
EIFFEL_X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
SWAP = np.array([[0.0, 1.0], [1.0, 0.0]])

# Three matching coordinates (finance, water, structure). The fixed key map
# keeps those three input coordinates and drops "generic".
MATCH_AXES = ("finance", "water", "structure")
FIXED_WK = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [0, 0, 0]])
# The article's presets: only bank's "structure" input row is non-zero, and it
# points the query at one matching coordinate (coefficient as in its widget).
_PRESET_GAIN = 3.75
PRESETS = {
    name: np.outer(np.eye(4)[AXES.index("structure")], np.eye(3)[i] * _PRESET_GAIN)
    for i, name in enumerate(MATCH_AXES)
}


def embedding_matrix() -> np.ndarray:
    """``W_E [4, 4]``: the article's toy embeddings, rows in :data:`VOCAB` order."""
    return np.stack([EMB[w] for w in VOCAB])


def embeddings() -> pd.DataFrame:
    """The toy embedding table, one row per word, one column per named axis."""
    return pd.DataFrame(embedding_matrix(), index=pd.Index(VOCAB, name="token"), columns=AXES)


def bank_model(*, causal: bool = False, residual: bool = False):
    """The hooked toy head with identity projections on the bank vocabulary."""
    eye = np.eye(4)
    return toy_model(
        embedding_matrix(), eye, eye, eye, vocab=VOCAB, causal=causal, residual=residual
    )


def run_head(model: HookedModel, sentence: str | Sequence[str]) -> dict[str, np.ndarray]:
    """Run a one-layer, one-head toy model and read its hooks.

    Returns ``tokens``, ``X [pos, d_model]``, ``scores [query_pos, key_pos]``
    (scaled, after masking), ``A [query_pos, key_pos]``, ``H [pos, d_head]`` and
    ``out [pos, d_model]`` (the block output: the mixture, or input plus mixture
    when the model has a residual connection). ``sentence`` is a string or a list of words.
    """
    tokens = model.to_tokens(sentence if isinstance(sentence, str) else " ".join(sentence))
    names = (
        "hook_embed",
        "blocks.0.attn.hook_attn_scores",
        "blocks.0.attn.hook_pattern",
        "blocks.0.attn.hook_z",
        "blocks.0.hook_resid_post",
    )
    _, cache = model.run_with_cache(tokens, names_filter=list(names))
    return {
        "tokens": model.to_str_tokens(tokens),
        "X": cache["hook_embed"][0].numpy(),
        "scores": cache["blocks.0.attn.hook_attn_scores"][0, 0].numpy(),
        "A": cache["blocks.0.attn.hook_pattern"][0, 0].numpy(),
        "H": cache["blocks.0.attn.hook_z"][0, :, 0].numpy(),
        "out": cache["blocks.0.hook_resid_post"][0].numpy(),
    }


def check_against_reference(run: dict[str, np.ndarray], Wq, Wk, Wv, causal=False) -> None:
    """Every hooked toy run is checked against the article's numpy head (a broken invariant)."""
    A, H = attention(run["X"], Wq, Wk, Wv, causal=causal)
    if not (np.allclose(A, run["A"], atol=1e-12) and np.allclose(H, run["H"], atol=1e-12)):
        raise InterpError(
            "internal check failed: the hooked toy head disagrees with the numpy reference "
            "head; please report this"
        )


def identity_forward(sentence: str = "the river bank") -> dict[str, Any]:
    """Experiment (a): the identity-projection head on one sentence, traced at ``bank``.

    Returns the bank row's unscaled and scaled scores, its weights and mixture,
    the residual preview (input + mixture, identity output projection), and the
    plain average of the sentence's vectors for comparison.
    """
    eye = np.eye(4)
    run = run_head(bank_model(), sentence)
    check_against_reference(run, eye, eye, eye)
    resid = run_head(bank_model(residual=True), sentence)["out"]
    X = run["X"]
    d = X.shape[1]
    return {
        "tokens": run["tokens"],
        "bank_input": X[-1],
        "unscaled_scores": X[-1] @ X.T,
        "scaled_scores": run["scores"][-1],
        "scale": float(np.sqrt(d)),
        "weights": run["A"][-1],
        "mixture": run["H"][-1],
        "residual": resid[-1],
        "plain_average": X.mean(axis=0),
        "A": run["A"],
    }


def identity_forward_table(sentences: Sequence[str] = SENTENCES) -> pd.DataFrame:
    """Experiment (a) for both sentences: one row per sentence and vector, one column per axis.

    Vectors at bank: ``input``, ``mixture`` (the head output), ``residual``
    (input + mixture, identity output projection) and ``plain_average`` (the
    unweighted mean of the sentence's vectors).
    """
    rows = []
    for s in sentences:
        r = identity_forward(s)
        for q in ("bank_input", "mixture", "residual", "plain_average"):
            rows.append({"sentence": s, "vector": q, **dict(zip(AXES, r[q]))})
    return pd.DataFrame(rows)


def bank_weights_table(sentences: Sequence[str] = SENTENCES) -> pd.DataFrame:
    """Experiment (a): bank's unscaled and scaled scores and weights, one row per source."""
    rows = []
    for s in sentences:
        r = identity_forward(s)
        for i, t in enumerate(r["tokens"]):
            rows.append(
                {
                    "sentence": s,
                    "source": t,
                    "unscaled_score": r["unscaled_scores"][i],
                    "scaled_score": r["scaled_scores"][i],
                    "weight": r["weights"][i],
                }
            )
    return pd.DataFrame(rows)


def score_scale_sweep(
    multipliers: Sequence[float] = (5.0, 1.0, 0.1), sentence: str = "the river bank"
) -> pd.DataFrame:
    """Experiment (b): multiply bank's scaled scores before the softmax.

    Large multipliers sharpen the weights towards the highest score (bank
    itself here, not river); small ones flatten them towards uniform. The
    ``entropy`` column (nats; uniform over n tokens is ``log n``) shows it.
    """
    r = identity_forward(sentence)
    rows = []
    for m in multipliers:
        w = softmax(np.asarray(r["scaled_scores"]) * m)
        rows.append(
            {
                "multiplier": m,
                **{f"w[{t}]": x for t, x in zip(r["tokens"], w)},
                "entropy": float(-(w * np.log(w)).sum()),
            }
        )
    return pd.DataFrame(rows)


def softmax_table(score_rows: Sequence[Sequence[float]] = ((4, 2, 0), (2, 1, 0))) -> pd.DataFrame:
    """Experiment (b): softmax weights (percent) of score rows, e.g. raw vs divided by sqrt(4)."""
    rows = []
    for s in score_rows:
        w = softmax(np.asarray(s, dtype=float)) * 100
        rows.append({"scores": str(list(s)), **{f"key {i + 1} %": x for i, x in enumerate(w)}})
    return pd.DataFrame(rows)


def similarity_table(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]] = (
        ((1, 0), (1, 0)),
        ((10, 0), (10, 0)),
        ((1, 0), (0, 1)),
        ((1, 0), (-1, 0)),
    ),
) -> pd.DataFrame:
    """Experiment (b): dot product, cosine similarity and scaled dot product of query/key pairs.

    Raises:
        InterpError: for a zero vector (cosine similarity is undefined).
    """
    rows = []
    for q, k in pairs:
        q, k = np.asarray(q, float), np.asarray(k, float)
        nq, nk = np.linalg.norm(q), np.linalg.norm(k)
        if nq == 0 or nk == 0:
            raise InterpError(f"cosine similarity is undefined for a zero vector ({q}, {k})")
        rows.append(
            {
                "q": str(q.tolist()),
                "k": str(k.tolist()),
                "dot": float(q @ k),
                "cosine": float(q @ k / (nq * nk)),
                "scaled_dot": float(q @ k / np.sqrt(len(q))),
            }
        )
    return pd.DataFrame(rows)


def scaled_dot_table(dots: Sequence[float] = (1, 8, 40, 100), d_k: int = 64) -> pd.DataFrame:
    """Experiment (b): a head with ``d_k`` query/key coordinates divides every dot by sqrt(d_k)."""
    return pd.DataFrame(
        {
            "d_k": d_k,
            "divisor": np.sqrt(d_k),
            "dot": np.asarray(dots, float),
            "scaled_dot": np.asarray(dots, float) / np.sqrt(d_k),
        }
    )


def dot_product_spread(d_k: int = 64, n: int = 200_000, seed: int = 0) -> dict[str, float]:
    """Why divide by sqrt(d_k): the variance of q.k for unit-variance components is d_k.

    Draws ``n`` random pairs and reports the empirical variance before and
    after scaling (about ``d_k`` and about 1).
    """
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, n, d_k))
    dots = (q * k).sum(-1)
    return {
        "d_k": d_k,
        "var_dot": float(dots.var()),
        "var_scaled": float((dots / np.sqrt(d_k)).var()),
    }


def eiffel() -> pd.DataFrame:
    """Experiment (c): tower's weights and mixture under raw, swap-query and swap-value heads.

    Columns: variant, the three weights, the mixture (structure, Paris
    identity), tower's query, and the residual preview ``tower + mixture``.
    """
    eye = np.eye(2)
    variants = {
        "raw similarity": (eye, eye, eye),
        "swap query": (SWAP, eye, eye),
        "swap query and values": (SWAP, eye, SWAP),
    }
    rows = []
    for name, (Wq, Wk, Wv) in variants.items():
        model = toy_model(EIFFEL_X, Wq, Wk, Wv, vocab=EIFFEL_VOCAB)
        run = run_head(model, list(EIFFEL_VOCAB))
        check_against_reference(run, Wq, Wk, Wv)
        queries = run["X"] @ Wq
        rows.append(
            {
                "variant": name,
                **{f"w[{t}]": w for t, w in zip(EIFFEL_VOCAB, run["A"][-1])},
                "mix_structure": run["H"][-1, 0],
                "mix_paris": run["H"][-1, 1],
                "tower_query": str(queries[-1].tolist()),
                "resid_structure": run["X"][-1, 0] + run["H"][-1, 0],
                "resid_paris": run["X"][-1, 1] + run["H"][-1, 1],
            }
        )
    return pd.DataFrame(rows)


def eiffel_queries(Wq: np.ndarray = SWAP) -> pd.DataFrame:
    """Experiment (c): every token's query ``X2 @ Wq`` (one shared matrix for all rows)."""
    Q = EIFFEL_X @ Wq
    return pd.DataFrame(
        Q, index=pd.Index(EIFFEL_VOCAB, name="token"), columns=["q_structure", "q_paris"]
    )


def matching_directions(
    preset: str | None = "water", *, Wq: Any = None, sentence: str = "the river bank"
) -> pd.DataFrame:
    """Experiment (d): bank's query against fixed keys in a 3-D matching space.

    ``preset`` is ``"water"``, ``"finance"`` or ``"structure"``; or pass your own
    ``Wq [4, 3]`` (then ``preset`` is ignored). Keys use the fixed map that keeps
    finance, water and structure and drops generic. One row per token: its
    query, its key, bank's scaled score against it and bank's attention weight.

    Raises:
        InterpError: for an unknown preset or a ``Wq`` that is not ``[4, 3]``.
    """
    if Wq is None:
        if preset not in PRESETS:
            raise InterpError(
                f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)} "
                "or pass Wq=[4, 3] matrix"
            )
        Wq = PRESETS[preset]
    Wq = np.asarray(Wq, dtype=float)
    if Wq.shape != (4, 3):
        raise InterpError(f"Wq must be [4, 3] (4 input coordinates x 3 matching), got {Wq.shape}")
    if not np.isfinite(Wq).all():
        raise InterpError("Wq contains NaN or infinite entries")
    ids = words_to_ids(sentence, VOCAB).numpy()
    X = embedding_matrix()[ids]
    # Values are irrelevant to matching; pass the keys' map so the reference head runs.
    A, _ = attention(X, Wq, FIXED_WK, FIXED_WK)
    Q, K = X @ Wq, X @ FIXED_WK
    scores = Q[-1] @ K.T / np.sqrt(K.shape[1])
    return pd.DataFrame(
        {
            "token": [VOCAB[i] for i in ids],
            "query": [str(np.round(q, 4).tolist()) for q in Q],
            "key": [str(np.round(k, 4).tolist()) for k in K],
            "score": scores,
            "weight": A[-1],
        }
    )


def null_space_example() -> dict[str, np.ndarray]:
    """Experiment (e): ``M = [[1,0,1],[0,1,1]]`` reads x1+x3 and x2+x3; find what it ignores.

    The null direction ``n`` is computed from the SVD (scaled so its first entry
    is 1), then ``M n``, ``M e`` and ``M (e + n)`` for ``e = (1, 2, 3)``.
    """
    M = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    s = subspaces(M)
    n = s.null_space[0] / s.null_space[0, 0]
    e = np.array([1.0, 2.0, 3.0])
    return {
        "M": M,
        "rank": s.rank,
        "nullity": s.nullity,
        "n": n,
        "Mn": M @ n,
        "e": e,
        "e_plus_n": e + n,
        "Me": M @ e,
        "M_e_plus_n": M @ (e + n),
    }

"""The bank-sense lab's causal-masking experiments (the article's part i), on the toy head.

Masking future scores with ``-inf`` against a wrong mask of 0, bidirectional
against causal rows, and the article's illustrative "tired cat" pattern. The
head is the hooked toy head of :mod:`interp.experiments.bank_sense.toy_heads`,
cross-checked against the article's numpy reference.

Example:
    >>> causal_mask_demo()["future_weight_causal"].tolist()
    [0.0, 0.0, 0.0]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.core.errors import InterpError
from interp.core.paths import data_dir
from interp.experiments.bank_sense.toy_heads import bank_model, check_against_reference, run_head
from interp.models.toy import attention, softmax


def causal_mask_demo(sentence: str = "the river bank") -> dict[str, np.ndarray]:
    """Experiment (i): masking future scores with ``-inf`` versus 0.

    Returns the scaled scores, the patterns with no mask, with a ``-inf`` mask
    and with a 0 mask (where future positions keep ``exp(0) = 1`` shares), and
    the total weight each row puts on future positions under each mask.
    """
    eye = np.eye(4)
    run = run_head(bank_model(causal=True), sentence)
    check_against_reference(run, eye, eye, eye, causal=True)
    X = run["X"]
    A_bi, _ = attention(X, eye, eye, eye)
    A_zero, _ = attention(X, eye, eye, eye, causal=True, mask_value=0.0)
    future = np.triu(np.ones_like(A_bi, dtype=bool), k=1)
    return {
        "tokens": run["tokens"],
        "scores": X @ X.T / 2.0,
        "bidirectional": A_bi,
        "causal": run["A"],
        "zero_mask": A_zero,
        "future_weight_causal": (run["A"] * future).sum(-1),
        "future_weight_zero_mask": (A_zero * future).sum(-1),
        "self_weight_causal": np.diag(run["A"]),
    }


def causal_comparison() -> pd.DataFrame:
    """Experiment (i): last-row and bank-row weights, bidirectional versus causal.

    For "the river bank" bank is last, so causal masking leaves its row
    unchanged. For "the bank river" causal bank gets nothing from river.
    """
    rows = []
    for sentence in ("the river bank", "the bank river"):
        tokens = sentence.split()
        bank = tokens.index("bank")
        for mode in ("bidirectional", "causal"):
            A = run_head(bank_model(causal=mode == "causal"), sentence)["A"]
            rows.append(
                {
                    "sentence": sentence,
                    "mode": mode,
                    "row": "bank",
                    **{f"w[{t}]": w for t, w in zip(tokens, A[bank])},
                }
            )
    return pd.DataFrame(rows)


def tired_cat(path: str | Path | None = None) -> dict[str, Any]:
    """Experiment (i): the article's illustrative five-token pattern, bidirectional and causal.

    The bidirectional weights are the article's hand-chosen illustration
    (``data/tired_cat_attention.csv``), not a model's. The causal version masks
    the upper triangle and renormalises each row over its allowed keys, which
    is exactly a ``-inf`` masked softmax of the log-weights.
    """
    file = Path(path) if path is not None else data_dir() / "tired_cat_attention.csv"
    if not file.is_file():
        raise InterpError(f"tired-cat pattern not found at {file}")
    df = pd.read_csv(file, index_col=0)
    W = df.to_numpy(dtype=float)
    if W.shape[0] != W.shape[1] or not np.allclose(W.sum(1), 1.0, atol=0.02):
        raise InterpError("tired-cat pattern must be square with rows summing to 1")
    scores = np.log(W)
    future = np.triu(np.ones_like(W, dtype=bool), k=1)
    causal = softmax(np.where(future, -np.inf, scores))
    return {
        "tokens": list(df.index),
        "bidirectional": W / W.sum(1, keepdims=True),
        "causal": causal,
    }

"""The bank-sense lab, part 2: a one-head classifier learns to route attention.

Three experiments from the article, each returning data:

* :class:`SGDWalkthrough` (experiment f): the article's widget, a two-coordinate
  one-head classifier trained by plain SGD (learning rate 0.3), traced stage by
  stage for one sentence: lookup, Q/K/V, mixture, prediction, loss, gradients,
  update. Absent words' embedding rows get exactly zero gradient.
* :func:`train_sense_classifier` (experiment g): the runnable eight-dimensional
  ``OneHeadSense`` trained with Adam (lr 0.05) for 300 passes, ``torch.manual_seed(0)``.
* :func:`biased_dataset` (experiment h): the same model fitted to six context
  words with arbitrary sense labels (lawyer and attorney get opposite ones).

Training touches the global torch RNG only inside ``torch.random.fork_rng``, so
calling these functions does not change the caller's random state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from interp.core.errors import InterpError
from interp.models.toy import OneHeadSense

SENSES = ("water", "finance")
VOCAB = ("the", "river", "money", "bank")
ARTICLE_DATA: tuple[tuple[tuple[str, ...], int], ...] = (
    (("the", "river", "bank"), 0),
    (("the", "money", "bank"), 1),
    (("river", "bank"), 0),
    (("money", "bank"), 1),
)
BIASED_CONTEXTS: tuple[tuple[str, str], ...] = (
    ("river", "water"),
    ("money", "finance"),
    ("vault", "water"),
    ("salmon", "finance"),
    ("lawyer", "water"),
    ("attorney", "finance"),
)


def _label(y: int) -> str:
    return SENSES[y]


@dataclass(frozen=True)
class SenseFit:
    """A trained :class:`OneHeadSense` and its per-example results."""

    model: OneHeadSense
    table: pd.DataFrame  # one row per training sentence
    losses: np.ndarray  # [epochs]: mean loss per pass over the data


def _check_data(data: Sequence[tuple[Sequence[str], int]], vocab: Sequence[str]) -> None:
    if not data:
        raise InterpError("training data is empty: pass (tokens, label) pairs")
    for tokens, label in data:
        if label not in (0, 1):
            raise InterpError(
                f"label {label!r} for {list(tokens)} must be 0 (water) or 1 (finance)"
            )
        for t in tokens:
            if t not in vocab:
                raise InterpError(f"unknown token {t!r}; vocabulary: {', '.join(vocab)}")


def train_sense_classifier(
    data: Sequence[tuple[Sequence[str], int]] = ARTICLE_DATA,
    vocab: Sequence[str] = VOCAB,
    *,
    d: int = 8,
    lr: float = 0.05,
    epochs: int = 300,
    seed: int = 0,
) -> SenseFit:
    """Train the article's ``OneHeadSense`` with Adam, one example per step, as the article does.

    Example:
        >>> fit = train_sense_classifier()
        >>> fit.table["prediction"].tolist()[:2]
        ['water', 'finance']

    Raises:
        InterpError: for empty data, labels other than 0/1 or words outside ``vocab``.
    """
    _check_data(data, vocab)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = OneHeadSense(len(vocab), d=d, vocab=vocab)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        loss_fn = nn.CrossEntropyLoss()
        encoded = [(model.encode(list(t)), torch.tensor([y])) for t, y in data]
        losses = np.zeros(epochs)
        for epoch in range(epochs):
            for ids, y in encoded:
                loss = loss_fn(model(ids).unsqueeze(0), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses[epoch] += loss.item() / len(encoded)
    model.eval()
    rows = []
    with torch.no_grad():
        for tokens, y in data:
            logits, A = model(model.encode(list(tokens)), return_attn=True)
            prob = torch.softmax(logits, -1)
            rows.append(
                {
                    "sentence": " ".join(tokens),
                    "label": _label(y),
                    "prediction": _label(int(logits.argmax())),
                    "p_finance": float(prob[1]),
                    "bank_attention": {t: float(w) for t, w in zip(tokens, A[-1])},
                }
            )
    return SenseFit(model=model, table=pd.DataFrame(rows), losses=losses)


def rounded_attention(row: dict[str, float], ndigits: int = 2) -> dict[str, float]:
    """The article's display: ``{token: round(weight, 2)}`` (rounded, not exact zeros)."""
    return {t: round(w, ndigits) for t, w in row.items()}


def biased_dataset(
    contexts: Sequence[tuple[str, str]] = BIASED_CONTEXTS, *, seed: int = 0, **kwargs: Any
) -> tuple[SenseFit, pd.DataFrame]:
    """Experiment (h): fit arbitrary sense labels to six context words.

    Each context word ``c`` appears in "the c bank" and "c bank" with its
    assigned label. Returns the fit and a table: context, assigned label,
    prediction on "the c bank", and bank's attention to ``c`` there.

    Raises:
        InterpError: for an unknown sense name or a repeated context word.
    """
    names = [c for c, _ in contexts]
    if len(set(names)) != len(names):
        raise InterpError(f"context words must be distinct, got {names}")
    for c, sense in contexts:
        if sense not in SENSES:
            raise InterpError(f"sense {sense!r} for {c!r} must be one of {SENSES}")
    vocab = ("the", "bank", *names)
    data = []
    for c, sense in contexts:
        y = SENSES.index(sense)
        data += [(("the", c, "bank"), y), ((c, "bank"), y)]
    fit = train_sense_classifier(data, vocab, seed=seed, **kwargs)
    table = fit.table[fit.table["sentence"].str.startswith("the ")].reset_index(drop=True)
    out = pd.DataFrame(
        {
            "context": names,
            "assigned_label": [s for _, s in contexts],
            "prediction": table["prediction"].to_numpy(),
            "attention_to_context": [row[c] for row, c in zip(table["bank_attention"], names)],
        }
    )
    return fit, out


class SGDWalkthrough:
    """The article's widget: one head, two learned coordinates, two classes, SGD.

    Parameters start from ``torch.manual_seed(seed)`` (repeatable), the
    classifier bias starts at zero. :meth:`trace` follows one sentence through
    all eight stages without changing anything; :meth:`apply_update` takes the
    SGD step for the gradients of the last trace; :meth:`train` alternates the
    two examples; :meth:`reset` returns to the same initial parameters.

    Example:
        >>> w = SGDWalkthrough()
        >>> stages = w.trace(0)
        >>> stages["7. gradients"]["emb"][2]  # 'money' is absent from "the river bank"
        array([0., 0.], dtype=float32)
    """

    EXAMPLES: tuple[tuple[tuple[str, ...], int], ...] = ARTICLE_DATA[:2]

    def __init__(self, *, d: int = 2, lr: float = 0.3, seed: int = 0):
        if lr <= 0:
            raise InterpError(f"learning rate must be positive, got {lr}")
        self.d, self.lr, self.seed = d, lr, seed
        self.reset()

    def reset(self) -> None:
        """Back to the seeded initial parameters, zero updates, first example next."""
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self.model = OneHeadSense(len(VOCAB), d=self.d, vocab=VOCAB)
        with torch.no_grad():
            self.model.cls.bias.zero_()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.lr)
        self.updates = 0
        self.next_example = 0
        self._pending = False

    def parameters(self) -> dict[str, np.ndarray]:
        """Stored parameters in the row-vector convention (``q = x @ Wq``)."""
        m = self.model
        return {
            "emb": m.emb.weight.detach().numpy().copy(),
            "Wq": m.Wq.weight.detach().T.numpy().copy(),
            "Wk": m.Wk.weight.detach().T.numpy().copy(),
            "Wv": m.Wv.weight.detach().T.numpy().copy(),
            "cls_weight": m.cls.weight.detach().T.numpy().copy(),
            "cls_bias": m.cls.bias.detach().numpy().copy(),
        }

    def _grads(self) -> dict[str, np.ndarray]:
        m = self.model
        return {
            "emb": m.emb.weight.grad.numpy().copy(),
            "Wq": m.Wq.weight.grad.T.numpy().copy(),
            "Wk": m.Wk.weight.grad.T.numpy().copy(),
            "Wv": m.Wv.weight.grad.T.numpy().copy(),
            "cls_weight": m.cls.weight.grad.T.numpy().copy(),
            "cls_bias": m.cls.bias.grad.numpy().copy(),
        }

    def trace(self, example: int | None = None) -> dict[str, dict[str, Any]]:
        """Follow one sentence through the eight stages; parameters are not changed.

        Raises:
            InterpError: for an example index other than 0 or 1.
        """
        idx = self.next_example if example is None else example
        if idx not in (0, 1):
            raise InterpError(f"example must be 0 (river) or 1 (money), got {example!r}")
        tokens, y = self.EXAMPLES[idx]
        m = self.model
        ids = m.encode(list(tokens))
        self.optimizer.zero_grad()
        X = m.emb(ids)
        Q, K, V = m.Wq(X), m.Wk(X), m.Wv(X)
        scores = Q @ K.T / self.d**0.5
        A = torch.softmax(scores, -1)
        H = A @ V
        logits = m.cls(H[-1])
        probs = torch.softmax(logits, -1)
        loss = nn.functional.cross_entropy(logits[None], torch.tensor([y]))
        loss.backward()
        grads = self._grads()
        params = self.parameters()
        self._pending = True
        self._pending_example = idx
        n = lambda t: t.detach().numpy().copy()  # noqa: E731
        return {
            "1. sentence": {"tokens": list(tokens), "ids": ids.tolist(), "target": _label(y)},
            "2. lookup": {"X": n(X)},
            "3. qkv": {"Q": n(Q), "K": n(K), "V": n(V)},
            "4. mixture": {"scores": n(scores[-1]), "weights": n(A[-1]), "mixture": n(H[-1])},
            "5. prediction": {
                "logits": n(logits),
                "probs": n(probs),
                "predicted": _label(int(logits.argmax())),
            },
            "6. loss": {"loss": loss.item()},
            "7. gradients": grads,
            "8. update": {k: params[k] - self.lr * grads[k] for k in params},
        }

    def apply_update(self) -> None:
        """Take the SGD step for the last :meth:`trace`, then move to the other example.

        Raises:
            InterpError: if there is no traced, un-applied gradient.
        """
        if not self._pending:
            raise InterpError("no gradients to apply: call trace() first")
        self.optimizer.step()
        self.updates += 1
        self._pending = False
        self.next_example = 1 - self._pending_example

    def train(self, steps: int = 20) -> pd.DataFrame:
        """Alternate the two examples for ``steps`` SGD updates; one row per step."""
        rows = []
        for _ in range(steps):
            t = self.trace()
            rows.append(
                {
                    "step": self.updates + 1,
                    "sentence": " ".join(t["1. sentence"]["tokens"]),
                    "loss_before": t["6. loss"]["loss"],
                    "p_target": float(
                        t["5. prediction"]["probs"][SENSES.index(t["1. sentence"]["target"])]
                    ),
                }
            )
            self.apply_update()
        return pd.DataFrame(rows)

    def mixtures(self) -> dict[str, np.ndarray]:
        """Bank's current mixture ``H[-1]`` (``[d]``) for each example (no update)."""
        out = {}
        with torch.no_grad():
            for tokens, _ in self.EXAMPLES:
                m = self.model
                X = m.emb(m.encode(list(tokens)))
                A = torch.softmax(m.Wq(X) @ m.Wk(X).T / self.d**0.5, -1)
                out[" ".join(tokens)] = (A @ m.Wv(X))[-1].numpy().copy()
        return out

    def losses(self) -> dict[str, float]:
        """Current loss on each example (no update)."""
        out = {}
        with torch.no_grad():
            for tokens, y in self.EXAMPLES:
                logits = self.model(self.model.encode(list(tokens)))
                out[" ".join(tokens)] = float(
                    nn.functional.cross_entropy(logits[None], torch.tensor([y]))
                )
        return out

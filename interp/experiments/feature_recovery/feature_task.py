"""The feature-recovery task: can two small learned maps recover known features?

A synthetic task whose answer is known, as the article proposes. Every token
has nine named input features in three groups of three:

* ``type_A, type_B, type_C``: what a *source* token is (one-hot; the receiver has none);
* ``want_A, want_B, want_C``: what a token asks for (one-hot, random on sources);
* ``pay_0, pay_1, pay_2``: a payload (standard normal on every token).

A sequence holds three sources, one of each type in random order, then the
receiver. The target is the payload of the source whose type the receiver
wants. One head, three query/key/value coordinates:

* keys are **fixed**: ``W_K`` maps ``type_X`` to key coordinate X (so key
  coordinate X means "I am of type X");
* the output is read directly from the value mixture, with **fixed** targets
  (coordinate i must carry ``pay_i``), which gives value coordinates their meaning;
* only ``W_Q [9, 3]`` and ``W_V [9, 3]`` are trained (MSE, Adam).

The known solution: ``W_Q`` maps ``want_X`` to a large multiple of key
coordinate X and ignores everything else; ``W_V`` is the identity on the
payload and ignores the rest. One near-symmetry of the data is removed
before measuring alignment: every source has exactly one ``type`` and one
``want`` feature, so adding ``u`` to every ``type`` row of ``W_V`` and ``-u``
to every ``want`` row leaves every *source's* value unchanged (only the
receiver's own value, which gets little weight, moves); ``u`` is chosen to
make the two groups' mean rows equal. (Adding a constant to all three query
coordinates would be a symmetry too if the receiver had a type; its key is 0,
so that constant sets how much the receiver attends to itself, and ``W_Q`` is
used as learned.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from interp.analysis.heads.subspace import subspaces
from interp.core.errors import InterpError

FEATURES = ("type_A", "type_B", "type_C", "want_A", "want_B", "want_C", "pay_0", "pay_1", "pay_2")
TYPE, WANT, PAY = slice(0, 3), slice(3, 6), slice(6, 9)
D_IN, D_HEAD, N_SOURCES = 9, 3, 3
FIXED_WK = np.zeros((D_IN, D_HEAD))
FIXED_WK[TYPE, :] = np.eye(3)


@dataclasses.dataclass(frozen=True)
class Batch:
    X: torch.Tensor  # [batch, pos = 4, 9]
    target: torch.Tensor  # [batch, 3]: the wanted source's payload
    answer: torch.Tensor  # [batch]: position of the wanted source


def make_batch(n: int, *, generator: torch.Generator) -> Batch:
    """``n`` random sequences: three sources (one per type, shuffled) and a receiver."""
    X = torch.zeros(n, N_SOURCES + 1, D_IN)
    order = torch.argsort(torch.rand(n, N_SOURCES, generator=generator), dim=1)  # type per slot
    X[torch.arange(n)[:, None], torch.arange(N_SOURCES)[None], order] = 1.0
    wants = torch.randint(3, (n, N_SOURCES + 1), generator=generator)
    X[torch.arange(n)[:, None], torch.arange(N_SOURCES + 1)[None], 3 + wants] = 1.0
    X[:, :, PAY] = torch.randn(n, N_SOURCES + 1, 3, generator=generator)
    answer = (order == wants[:, -1:]).float().argmax(1)  # slot holding the wanted type
    target = X[torch.arange(n), answer, 6:9]
    return Batch(X=X, target=target, answer=answer)


class FeatureHead(torch.nn.Module):
    """One head over 9 input features: learned ``W_Q, W_V [9, 3]``, fixed ``W_K``."""

    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.W_Q = torch.nn.Parameter(torch.randn(D_IN, D_HEAD, generator=generator) * 0.1)
        self.W_V = torch.nn.Parameter(torch.randn(D_IN, D_HEAD, generator=generator) * 0.1)
        self.register_buffer("W_K", torch.tensor(FIXED_WK, dtype=torch.float32))

    def forward(self, X: torch.Tensor) -> dict[str, torch.Tensor]:
        # X [batch, pos, 9]; the receiver is the last position.
        q = X[:, -1] @ self.W_Q  # [batch, 3]
        k = X @ self.W_K  # [batch, pos, 3]
        v = X @ self.W_V  # [batch, pos, 3]
        scores = torch.einsum("be,bpe->bp", q, k) / D_HEAD**0.5
        A = torch.softmax(scores, -1)  # [batch, pos]
        return {"q": q, "k": k, "v": v, "A": A, "out": torch.einsum("bp,bpe->be", A, v)}


@dataclasses.dataclass
class Recovery:
    """A trained head and its evaluation."""

    seed: int
    model: FeatureHead
    losses: np.ndarray
    held_out: dict[str, float]
    alignment: pd.DataFrame
    interventions: pd.DataFrame


def train(seed: int = 0, *, steps: int = 800, batch: int = 128, lr: float = 0.03) -> FeatureHead:
    """Train ``W_Q`` and ``W_V`` only (MSE to the wanted payload), deterministic by seed."""
    gen = torch.Generator().manual_seed(seed)
    model = FeatureHead(gen)
    opt = torch.optim.Adam([model.W_Q, model.W_V], lr=lr)
    for _ in range(steps):
        b = make_batch(batch, generator=gen)
        loss = ((model(b.X)["out"] - b.target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def evaluate(model: FeatureHead, *, n: int = 4096, seed: int = 10_000) -> dict[str, float]:
    """Held-out accuracy (attention argmax on the wanted source) and MSE vs two baselines.

    Baselines: predicting zero (MSE = payload variance, about 1) and uniform
    attention over the four tokens (what a head that matches nothing would give).
    """
    b = make_batch(n, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        r = model(b.X)
        uniform = b.X[:, :, PAY].mean(1)
    return {
        "accuracy": float((r["A"].argmax(1) == b.answer).float().mean()),
        "mse": float(((r["out"] - b.target) ** 2).mean()),
        "mse_zero_baseline": float((b.target**2).mean()),
        "mse_uniform_baseline": float(((uniform - b.target) ** 2).mean()),
        "mean_weight_on_answer": float(r["A"][torch.arange(n), b.answer].mean()),
    }


def canonical_maps(model: FeatureHead) -> tuple[np.ndarray, np.ndarray]:
    """``W_Q`` as learned and ``W_V`` with the type/want near-symmetry removed (module doc)."""
    Wq = model.W_Q.detach().numpy().astype(np.float64)
    Wv = model.W_V.detach().numpy().astype(np.float64).copy()
    u = (Wv[TYPE].mean(0) - Wv[WANT].mean(0)) / 2
    Wv[TYPE] -= u
    Wv[WANT] += u
    return Wq, Wv


def alignment(model: FeatureHead, *, null_tol: float = 0.05) -> pd.DataFrame:
    """Per input feature: what each learned map does with it.

    ``W_V`` is first put in canonical form (:func:`canonical_maps`).
    Columns: ``feature``, ``q_row_norm`` and ``v_row_norm`` (relative to the
    largest row), ``q_coord`` / ``v_coord`` (the coordinate the row points to
    most), ``q_in_row_space`` /
    ``v_in_row_space`` (norm of the feature's projection onto the map's row
    space, i.e. how much the map reads it), ``q_null`` / ``v_null`` (True when
    the feature lies in the map's null space within ``null_tol``).
    """
    Wq, Wv = canonical_maps(model)
    rows = []
    parts = {}
    for name, W in (("q", Wq), ("v", Wv)):
        # A feature is ignored when its row is (relatively) zero: e_f @ W = W[f].
        norms = np.linalg.norm(W, axis=1)
        rel = norms / norms.max()
        sub = subspaces(W, convention="row", tol=null_tol * float(np.linalg.svd(W)[1][0]))
        proj = np.linalg.norm(sub.row_space, axis=0)  # |P_row e_f| for each feature f
        parts[name] = (rel, np.abs(W).argmax(1), proj)
    for f, feat in enumerate(FEATURES):
        row = {"feature": feat}
        for name in ("q", "v"):
            rel, coord, proj = parts[name]
            row.update(
                {
                    f"{name}_row_norm": rel[f],
                    f"{name}_coord": int(coord[f]),
                    f"{name}_in_row_space": proj[f],
                    f"{name}_null": bool(rel[f] < null_tol),
                }
            )
        rows.append(row)
    return pd.DataFrame(rows)


def recovered(al: pd.DataFrame) -> dict[str, bool]:
    """Did each map recover the known solution? (which features it reads, and how)."""
    a = al.set_index("feature")
    wants = [f"want_{x}" for x in "ABC"]
    pays = [f"pay_{i}" for i in range(3)]
    others_q = [f for f in FEATURES if f not in wants]
    others_v = [f for f in FEATURES if f not in pays]
    return {
        "W_Q reads want_X into key coordinate X": bool(
            (a.loc[wants, "q_coord"].to_numpy() == [0, 1, 2]).all()
            and (~a.loc[wants, "q_null"]).all()
        ),
        "W_Q ignores type and payload (null space)": bool(a.loc[others_q, "q_null"].all()),
        "W_V copies pay_i into value coordinate i": bool(
            (a.loc[pays, "v_coord"].to_numpy() == [0, 1, 2]).all()
            and (~a.loc[pays, "v_null"]).all()
        ),
        "W_V ignores type and want (null space)": bool(a.loc[others_v, "v_null"].all()),
    }


def interventions(model: FeatureHead, *, n: int = 2048, seed: int = 20_000) -> pd.DataFrame:
    """Add input directions to the receiver and compare with what the maps predict.

    * ``switch want``: ``+e(want_Y) - e(want_X)`` (a relevant direction): attention
      should move to the type-Y source and the output to its payload.
    * a random direction of the exact null space of the learned ``W_Q^T``: the
      query cannot change, nor (keys are fixed) the attention; the receiver's
      own key and value may, and the output moves only through them. A random
      direction null for both ``W_Q^T`` and the fixed ``W_K^T`` leaves queries,
      keys and attention exactly unchanged; only the receiver's value can move.
    * ``+2 pay_0``: nearly null for ``W_Q`` but read by ``W_V``: attention stays,
      the receiver's value changes, the output barely (the receiver's weight is small).
    * ``+1 type_A``: nearly null for ``W_Q`` but read by the fixed ``W_K``: the
      receiver's *key* changes, so attention moves although the query does not.
    """
    b = make_batch(n, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        clean = model(b.X)
        # The exact null space of the learned query map W_Q^T (row convention: x @ W_Q = 0).
        null = subspaces(model.W_Q.detach().double().numpy(), convention="row").null_space
        gen = np.random.default_rng(seed)
        directions: dict[str, torch.Tensor] = {}
        want = b.X[:, -1, WANT].argmax(1)
        switch = torch.zeros(n, D_IN)
        new_want = (want + 1) % 3
        switch[torch.arange(n), 3 + want] = -1.0
        switch[torch.arange(n), 3 + new_want] = 1.0
        directions["switch want (relevant)"] = switch
        rand_null = torch.tensor(gen.standard_normal(null.shape[0]) @ null, dtype=torch.float32)
        directions["random null(W_Q^T) direction"] = (rand_null / rand_null.norm() * 2)[None]
        both = np.concatenate([model.W_Q.detach().double().numpy(), FIXED_WK], 1)  # [9, 6]
        null_qk = subspaces(both, convention="row").null_space
        rand_qk = torch.tensor(gen.standard_normal(null_qk.shape[0]) @ null_qk, dtype=torch.float32)
        directions["random null(W_Q^T) & null(W_K^T) direction"] = (rand_qk / rand_qk.norm() * 2)[
            None
        ]
        e = torch.eye(D_IN)
        directions["+2 pay_0 (irrelevant to Q)"] = 2 * e[FEATURES.index("pay_0")][None]
        directions["+1 type_A (~null for W_Q, read by fixed W_K)"] = e[FEATURES.index("type_A")][
            None
        ]
        rows = []
        wanted_slot = (b.X[:, :3, TYPE].argmax(-1) == new_want[:, None]).float().argmax(1)
        for name, d in directions.items():
            X = b.X.clone()
            X[:, -1] += d.expand(n, -1)
            r = model(X)
            row = {
                "intervention": name,
                "d_query": float((r["q"] - clean["q"]).norm(dim=-1).mean()),
                "d_attention": float((r["A"] - clean["A"]).abs().sum(-1).mean()),
                "d_receiver_key": float((r["k"][:, -1] - clean["k"][:, -1]).norm(dim=-1).mean()),
                "d_receiver_value": float((r["v"][:, -1] - clean["v"][:, -1]).norm(dim=-1).mean()),
                "d_output": float((r["out"] - clean["out"]).norm(dim=-1).mean()),
            }
            if name.startswith("switch"):
                new_target = b.X[torch.arange(n), wanted_slot, 6:9]
                row["accuracy_on_new_target"] = float(
                    (r["A"].argmax(1) == wanted_slot).float().mean()
                )
                row["mse_to_new_target"] = float(((r["out"] - new_target) ** 2).mean())
            rows.append(row)
    return pd.DataFrame(rows)


def run(seed: int = 0, **train_kwargs) -> Recovery:
    """Train with ``seed`` and evaluate recovery, held-out predictions and interventions."""
    model = train(seed, **train_kwargs)
    return Recovery(
        seed=seed,
        model=model,
        losses=np.array([]),
        held_out=evaluate(model),
        alignment=alignment(model),
        interventions=interventions(model),
    )


def seed_summary(seeds: Sequence[int] = (0, 1, 2), **train_kwargs) -> pd.DataFrame:
    """One row per seed: held-out numbers and which parts of the solution were recovered.

    One seed's solution is an observation, not a law; this shows how often it recurs.

    Raises:
        InterpError: for an empty seed list.
    """
    if not seeds:
        raise InterpError("seed_summary needs at least one seed")
    return summarise([run(s, **train_kwargs) for s in seeds])


def summarise(runs: Sequence[Recovery]) -> pd.DataFrame:
    """The :func:`seed_summary` table for runs already made."""
    return pd.DataFrame([{"seed": r.seed, **r.held_out, **recovered(r.alignment)} for r in runs])

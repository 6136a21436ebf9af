"""The computational graph circuits are made of: senders, receivers, and the edges between them.

The residual stream is a sum: every component reads the sum of what earlier
components wrote. An *edge* is one writer's contribution to one reader's
input (Elhage et al. 2021; ACDC, Conmy et al. 2023; EAP, Syed et al. 2023).

* **Senders** write: the token embedding (``embed``), the positional
  embedding (``pos_embed``, where the model has one), every head's output
  (``L3H7``: ``z @ W_O`` of that head) and every MLP (``L3.mlp``).
* **Receivers** read: every head's query input (``L3H7.q``), every key and
  value input (``L3H7.k`` / ``.v``; on grouped-query models one per key/value
  head, ``L3KV1.k``: SmolLM2 has 9 query heads but 3 key/value heads a layer,
  so 3 key receivers, not 9 copies), every MLP's input (``L3.mlp``) and the
  logits (``logits``: the stream the final norm reads).
* A sender precedes a receiver when it writes before the receiver reads:
  embeddings precede everything, a layer's heads precede later layers and its
  own MLP, a layer's MLP precedes later layers.

Edge labels read ``L0H1 -> L1H1.k``, ``embed -> L1H1.v``, ``L29H1 -> logits``,
``L3.mlp -> L20H0.q``. :class:`Index` is the same graph as the edge engine
reads it: which receivers and senders each layer has.

Example:
    >>> from interp.models import load_model
    >>> graph = build_graph(load_model("induction-2l"))
    >>> graph.n_edges, graph.edge_labels()[:2]
    (42, ['embed -> L0H0.q', 'embed -> L0H1.q'])
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import numpy as np
import pandas as pd

from interp.core.errors import InterpError
from interp.core.protocol import (
    HookedModel,
    check_model,
    hook_names,
    logits_meaningful,
    model_name,
)
from interp.runtime import runtime_of

INPUTS = ("q", "k", "v", "mlp", "logits")


@dataclasses.dataclass(frozen=True)
class Graph:
    """Senders, receivers and which sender may feed which receiver (module docstring)."""

    model_name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    has_mlp: bool
    senders: tuple[str, ...]
    sender_layer: tuple[int, ...]  # -1 for the embeddings
    sender_kind: tuple[str, ...]  # "embed", "pos_embed", "head", "mlp"
    receivers: tuple[str, ...]
    receiver_layer: tuple[int, ...]  # n_layers for the logits
    receiver_input: tuple[str, ...]  # "q", "k", "v", "mlp", "logits"
    receiver_head: tuple[int, ...]  # head (q) or key/value head (k, v) index; -1 otherwise
    valid: np.ndarray  # [n_senders, n_receivers] bool: the edges
    # every hook name the model exposes, read once with the graph (a cache is checked by them)
    hook_names: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False)

    @property
    def n_edges(self) -> int:
        return int(self.valid.sum())

    @property
    def grouped(self) -> bool:
        """Grouped-query attention: fewer key/value heads than query heads."""
        return self.n_kv_heads != self.n_heads

    def edge_labels(self) -> list[str]:
        """Every edge as ``"sender -> receiver"``, senders in order, then receivers."""
        s, r = np.nonzero(self.valid)
        return [f"{self.senders[i]} -> {self.receivers[j]}" for i, j in zip(s, r)]

    def edges(self) -> pd.DataFrame:
        """One row per edge: ``sender, receiver, receiver_input, sender_layer,
        receiver_layer, label``."""
        s, r = np.nonzero(self.valid)
        return pd.DataFrame(
            {
                "sender": [self.senders[i] for i in s],
                "receiver": [self.receivers[j] for j in r],
                "receiver_input": [self.receiver_input[j] for j in r],
                "sender_layer": [self.sender_layer[i] for i in s],
                "receiver_layer": [self.receiver_layer[j] for j in r],
                "label": [f"{self.senders[i]} -> {self.receivers[j]}" for i, j in zip(s, r)],
            }
        )

    def describe(self) -> str:
        """The graph's size in one paragraph."""
        kinds = pd.Series(self.receiver_input).value_counts()
        counts = ", ".join(f"{kinds.get(k, 0)} {k}" for k in INPUTS if kinds.get(k, 0))
        kv = f" ({self.n_kv_heads} key/value heads a layer)" if self.grouped else ""
        return (
            f"{self.model_name}: {len(self.senders)} senders, {len(self.receivers)} receivers "
            f"({counts}){kv}, {self.n_edges:,} edges"
        )

    def __str__(self) -> str:
        return self.describe()

    def _layer_head(
        self, label: Any, layer: str, head: str, *, role: str, kv: bool = False
    ) -> tuple:
        """``(layer, head)`` of a label's digits, in range for this graph.

        Raises:
            InterpError: naming the label, what it is not (``role``) and the graph's range.
        """
        l, h = int(layer), int(head)
        heads = self.n_kv_heads if kv else self.n_heads
        if not 0 <= l < self.n_layers:
            raise InterpError(
                f"{label!r} is not a {role} of this graph: it names layer {l}, but the layers "
                f"are 0..{self.n_layers - 1}"
            )
        if not 0 <= h < heads:
            what = "key/value heads" if kv else "heads"
            raise InterpError(
                f"{label!r} is not a {role} of this graph: it names {what[:-1]} {h}, but a "
                f"layer has {what} 0..{heads - 1}"
            )
        return l, h

    def sender_index(self, label: Any) -> int:
        """Index of a sender given by label (``"L3H7"``, ``"L3.mlp"``, ``"embed"``) or
        ``(layer, head)``.

        Raises:
            InterpError: for a name that is not a sender of this graph (a malformed label, a
                layer or head out of range, an MLP of an attention-only model), or a pair that
                is not two integers.
        """
        if isinstance(label, tuple):
            if len(label) != 2 or not all(_is_int(x) for x in label):
                raise InterpError(f"sender {label!r}: a (layer, head) pair is two integers")
            label = f"L{int(label[0])}H{int(label[1])}"
        text = str(label).strip()
        m = _HEAD.match(text)
        if m:
            l, h = self._layer_head(label, *m.groups(), role="sender")
            return self.senders.index(f"L{l}H{h}")
        m = _MLP.match(text)
        if m and self.has_mlp:
            l, _ = self._layer_head(label, m.group(1), "0", role="sender")
            return self.senders.index(f"L{l}.mlp")
        if text in self.senders:
            return self.senders.index(text)
        raise InterpError(
            f"{label!r} is not a sender of this graph; senders are embed"
            + (", pos_embed" if "pos_embed" in self.senders else "")
            + f", heads L0H0..L{self.n_layers - 1}H{self.n_heads - 1}"
            + (", MLPs like L0.mlp" if self.has_mlp else " (no MLPs: it is attention-only)")
        )

    def receiver_indices(self, label: Any) -> list[int]:
        """Indices of the receivers a name stands for: ``"L1H1.k"`` (one), ``"L1H1"`` (its q,
        k and v inputs), ``"L2.mlp"``, ``"logits"``; on grouped-query models ``"L1KV0.k"``,
        and a query head's ``.k``/``.v`` is its key/value head's (with a warning: it is shared).

        Raises:
            InterpError: for a name that is not a receiver of this graph (a malformed label,
                an unknown input, a layer or head out of range, an MLP of an attention-only
                model).
        """
        text = str(label).strip()
        if text == "logits":
            return [self.receivers.index("logits")]
        base, _, inp = text.rpartition(".") if "." in text else (text, "", "")
        m = _HEAD.match(base)
        if m and inp in ("", "q", "k", "v"):
            l, h = self._layer_head(label, *m.groups(), role="receiver")
            g = h // (self.n_heads // self.n_kv_heads)
            kv = f"L{l}KV{g}" if self.grouped else f"L{l}H{h}"
            if inp in ("k", "v") and self.grouped:
                group = self.n_heads // self.n_kv_heads
                warnings.warn(
                    f"{text} is the {inp} input of key/value head {kv}, which query heads "
                    f"L{l}H{g * group}..L{l}H{(g + 1) * group - 1} share; reading it as {kv}.{inp}",
                    UserWarning,
                    stacklevel=3,
                )
            names = {"q": [f"L{l}H{h}.q"], "k": [f"{kv}.k"], "v": [f"{kv}.v"]}
            want = names[inp] if inp else [f"L{l}H{h}.q", f"{kv}.k", f"{kv}.v"]
            return [self.receivers.index(n) for n in want]
        m = _KV.match(base)
        if m and inp in ("k", "v") and self.grouped:
            l, g = self._layer_head(label, *m.groups(), role="receiver", kv=True)
            return [self.receivers.index(f"L{l}KV{g}.{inp}")]
        m = _MLP.match(text)
        if m and self.has_mlp:
            l, _ = self._layer_head(label, m.group(1), "0", role="receiver")
            return [self.receivers.index(f"L{l}.mlp")]
        raise InterpError(
            f"{label!r} is not a receiver of this graph; receivers are a head's input "
            "(L1H1.q, L1H1.k, L1H1.v" + (", L1KV0.k" if self.grouped else "") + "), a head "
            "(all three), " + ("an MLP (L2.mlp), " if self.has_mlp else "") + "or logits"
        )


_HEAD = re.compile(r"^L(\d+)H(\d+)$", re.IGNORECASE)
_KV = re.compile(r"^L(\d+)KV(\d+)$", re.IGNORECASE)
_MLP = re.compile(r"^L(\d+)\.mlp$", re.IGNORECASE)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def build_graph(model: HookedModel) -> Graph:
    """The graph of ``model`` (module docstring): print it for its counts.

    Senders are the embeddings, every head and every MLP; receivers every head's q, k and
    v input (one k and v per key/value head on grouped-query models), every MLP and the
    logits; an edge is a sender that writes before its receiver reads.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its config, hook names and
            weights' shapes are read (no forward pass).

    Returns:
        The :class:`Graph`: senders, receivers, and ``valid[s, r]``, which sender may feed
        which receiver.

    Example:
        >>> from interp.models import load_model
        >>> graph = build_graph(load_model("induction-2l"))
        >>> graph.n_edges, len(graph.senders), len(graph.receivers)
        (42, 6, 13)

    Raises:
        InterpError: for a model whose blocks run attention and MLP in parallel
            (their inputs are one stream; this graph assumes sequential blocks),
            or an encoder without an LM head (no logits receiver).
    """
    cfg = check_model(model)
    names, meaningful, name = hook_names(model), logits_meaningful(model), model_name(model)
    if getattr(cfg, "parallel_attn_mlp", False):
        raise InterpError(
            "this model runs attention and MLP in parallel in each block; circuits here assume "
            "sequential blocks (attention, then MLP)"
        )
    if not meaningful:
        raise InterpError(
            "this model's logits are meaningless (no language-model head): a circuit ends at "
            "the logits"
        )
    rt = runtime_of(model)
    has_pos = rt.has_positional
    has_mlp = "blocks.0.hook_mlp_out" in names
    L, H = int(cfg.n_layers), int(cfg.n_heads)
    kv = rt.n_kv_heads
    senders, s_layer, s_kind, s_order = ["embed"], [-1], ["embed"], [(-1, 0)]
    if has_pos:
        senders.append("pos_embed")
        s_layer.append(-1)
        s_kind.append("pos_embed")
        s_order.append((-1, 0))
    receivers, r_layer, r_input, r_head, r_order = [], [], [], [], []
    for l in range(L):
        for h in range(H):
            receivers.append(f"L{l}H{h}.q")
            r_layer.append(l)
            r_input.append("q")
            r_head.append(h)
            r_order.append((l, 0))
        for inp in ("k", "v"):
            for g in range(kv):
                receivers.append(f"L{l}KV{g}.{inp}" if kv != H else f"L{l}H{g}.{inp}")
                r_layer.append(l)
                r_input.append(inp)
                r_head.append(g)
                r_order.append((l, 0))
        if has_mlp:
            receivers.append(f"L{l}.mlp")
            r_layer.append(l)
            r_input.append("mlp")
            r_head.append(-1)
            r_order.append((l, 1))
        for h in range(H):
            senders.append(f"L{l}H{h}")
            s_layer.append(l)
            s_kind.append("head")
            s_order.append((l, 0))
        if has_mlp:
            senders.append(f"L{l}.mlp")
            s_layer.append(l)
            s_kind.append("mlp")
            s_order.append((l, 1))
    receivers.append("logits")
    r_layer.append(L)
    r_input.append("logits")
    r_head.append(-1)
    r_order.append((L, 0))
    valid = np.array([[s < r for r in r_order] for s in s_order], dtype=bool)
    return Graph(
        model_name=name,
        n_layers=L,
        n_heads=H,
        n_kv_heads=kv,
        has_mlp=has_mlp,
        senders=tuple(senders),
        sender_layer=tuple(s_layer),
        sender_kind=tuple(s_kind),
        receivers=tuple(receivers),
        receiver_layer=tuple(r_layer),
        receiver_input=tuple(r_input),
        receiver_head=tuple(r_head),
        valid=valid,
        hook_names=frozenset(names),
    )


@dataclasses.dataclass(frozen=True)
class Index:
    """Graph indices the engine needs, per layer."""

    q: list[list[int]]  # receivers of each layer's queries, by head
    k: list[list[int]]
    v: list[list[int]]
    mlp: list[int]  # each layer's MLP receiver (-1: none)
    logits: int
    before_attn: list[int]  # senders that precede layer l's attention (a prefix)
    before_mlp: list[int]  # senders that precede layer l's MLP
    heads: list[list[int]]  # sender index of each head of layer l
    mlp_sender: list[int]  # sender index of layer l's MLP (-1: none)
    embed: int
    pos_embed: int  # -1: none

    @classmethod
    def of(cls, graph: Any) -> Index:
        L = graph.n_layers
        q, k, v, mlp = [[] for _ in range(L)], [[] for _ in range(L)], [[] for _ in range(L)], []
        mlp = [-1] * L
        for j, (lay, inp) in enumerate(zip(graph.receiver_layer, graph.receiver_input)):
            if inp == "q":
                q[lay].append(j)
            elif inp == "k":
                k[lay].append(j)
            elif inp == "v":
                v[lay].append(j)
            elif inp == "mlp":
                mlp[lay] = j
        heads = [[] for _ in range(L)]
        mlp_sender = [-1] * L
        for i, (lay, kind) in enumerate(zip(graph.sender_layer, graph.sender_kind)):
            if kind == "head":
                heads[lay].append(i)
            elif kind == "mlp":
                mlp_sender[lay] = i
        before_attn = [int(graph.valid[:, q[l][0]].sum()) for l in range(L)]
        before_mlp = [int(graph.valid[:, mlp[l]].sum()) if mlp[l] >= 0 else 0 for l in range(L)]
        return cls(
            q=q,
            k=k,
            v=v,
            mlp=mlp,
            logits=len(graph.receivers) - 1,
            before_attn=before_attn,
            before_mlp=before_mlp,
            heads=heads,
            mlp_sender=mlp_sender,
            embed=graph.senders.index("embed"),
            pos_embed=graph.senders.index("pos_embed") if "pos_embed" in graph.senders else -1,
        )

"""Circuits: sets of the graph's edges, the forms edges are given in, and circuit files.

The graph (:mod:`interp.engine.edges.graph`: senders, receivers, and which sender may
feed which receiver) is the edge engine's: :func:`~interp.engine.edges.graph.build_graph` gives it
for a model. Edge labels read ``L0H1 -> L1H1.k``, ``embed -> L1H1.v``, ``L29H1 ->
logits``; tables have ``sender, receiver, receiver_input`` (``q``, ``k``, ``v``,
``mlp``, ``logits``). A circuit is a set of edges (:class:`Circuit`): edges are
given as masks, tables, labels or pairs (:func:`edge_mask`; per position,
:func:`position_edge_mask`), and a circuit is saved as JSON and loaded back
with :func:`load_circuit` to be evaluated on other prompts.

Example:
    >>> from interp.models import load_model
    >>> graph = build_graph(load_model("induction-2l"))
    >>> graph.n_edges, graph.edge_labels()[:2]
    (42, ['embed -> L0H0.q', 'embed -> L0H1.q'])
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.core.errors import InterpError
from interp.core.moved import renamed
from interp.core.protocol import HookedModel
from interp.core.version import VERSION
from interp.engine.edges.graph import Graph, build_graph
from interp.outputs.files import write_text
from interp.outputs.tables import plain


@dataclasses.dataclass(frozen=True)
class Circuit:
    """A set of edges of a graph, with how it was found and how faithful it was measured.

    :func:`~interp.analysis.find_circuit` returns one and :func:`load_circuit` reads one
    back; :func:`~interp.analysis.evaluate_circuit` takes one as its ``edges``.

    Attributes:
        graph: The graph the edges belong to (:func:`~interp.engine.edges.graph.build_graph`).
        mask: ``[n_senders, n_receivers]`` bool: the edges in the circuit.
        scores: ``[n_senders, n_receivers]``: the scores the edges were ranked by, or
            ``None``.
        info: How it was found and measured (faithfulness, size, target, evaluations,
            forward-equivalents, how the scores were made): JSON-ready values.

    Example:
        >>> from interp.models import load_model
        >>> g = build_graph(load_model("induction-2l"))
        >>> c = Circuit(g, edge_mask(g, ["L0H1 -> L1H1.k", "L1H1 -> logits"]))
        >>> c.n_edges, c.edges()["label"].tolist()
        (2, ['L0H1 -> L1H1.k', 'L1H1 -> logits'])
    """

    graph: Graph
    mask: np.ndarray  # [n_senders, n_receivers] bool: the edges in the circuit
    scores: np.ndarray | None = None  # [n_senders, n_receivers] the scores it was ranked by
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def n_edges(self) -> int:
        return int(self.mask.sum())

    def edges(self) -> pd.DataFrame:
        """One row per edge in the circuit, in sender then receiver order.

        Returns:
            A table: ``sender, receiver, receiver_input, score`` (NaN without scores),
            ``label`` (``"a -> b"``).
        """
        s, r = np.nonzero(self.mask)
        g = self.graph
        return pd.DataFrame(
            {
                "sender": [g.senders[i] for i in s],
                "receiver": [g.receivers[j] for j in r],
                "receiver_input": [g.receiver_input[j] for j in r],
                "score": [
                    float(self.scores[i, j]) if self.scores is not None else np.nan
                    for i, j in zip(s, r)
                ],  # fmt: skip
                "label": [f"{g.senders[i]} -> {g.receivers[j]}" for i, j in zip(s, r)],
            }
        )

    def to_json(self) -> dict[str, Any]:
        """The circuit as a JSON document (nodes, edges, scores, how it was found).

        Returns:
            A JSON-ready dict: ``format`` (``"interp-circuit"``), ``version``,
            ``interp_version``, ``model``, ``graph`` (its sizes), ``nodes`` (the senders and
            receivers the edges use), ``edges`` (one dict per edge, with its score) and
            ``info``.
        """
        g = self.graph
        used_s = sorted({g.senders[i] for i in np.nonzero(self.mask)[0]})
        used_r = sorted({g.receivers[j] for j in np.nonzero(self.mask)[1]})
        return {
            "format": "interp-circuit",
            "version": 1,
            "interp_version": VERSION,
            "model": g.model_name,
            "graph": {
                "n_layers": g.n_layers,
                "n_heads": g.n_heads,
                "n_kv_heads": g.n_kv_heads,
                "has_mlp": g.has_mlp,
                "n_senders": len(g.senders),
                "n_receivers": len(g.receivers),
                "n_edges": g.n_edges,
            },
            "nodes": {"senders": used_s, "receivers": used_r},
            "edges": plain(self.edges().drop(columns="label").to_dict("records")),
            "info": plain(self.info),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_json` atomically.

        Args:
            path: The file to write (``.json`` by convention); an existing file is replaced
                whole or not at all.

        Returns:
            The path written.

        Raises:
            InterpError: for a destination that cannot be written.
        """
        return write_text(path, json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")


def edge_mask(graph: Graph, edges: Any) -> np.ndarray:
    """``edges`` as a ``[n_senders, n_receivers]`` bool mask: a :class:`Circuit`, a mask, a
    table with ``sender`` and ``receiver`` columns, ``"a -> b"`` labels or ``(a, b)`` pairs.

    Raises:
        InterpError: for an edge that is not in the graph (a sender after its receiver,
            an unknown name) or a mask of the wrong shape.
    """
    if isinstance(edges, Circuit):
        if edges.graph.senders != graph.senders or edges.graph.receivers != graph.receivers:
            raise InterpError(
                f"this circuit belongs to another graph ({edges.graph.describe()}); this model's "
                f"is {graph.describe()}"
            )
        return edges.mask.copy()
    if isinstance(edges, np.ndarray) or hasattr(edges, "numpy"):
        arr = np.asarray(edges.numpy() if hasattr(edges, "numpy") else edges, dtype=bool)
        if arr.shape != graph.valid.shape:
            raise InterpError(f"edge mask has shape {arr.shape}, the graph {graph.valid.shape}")
        if (arr & ~graph.valid).any():
            s, r = (int(i[0]) for i in np.nonzero(arr & ~graph.valid))
            raise InterpError(
                f"the edge mask holds {graph.senders[s]} -> {graph.receivers[r]}, which is not "
                "an edge of the graph (the sender writes after the receiver reads)"
            )
        return arr
    if isinstance(edges, pd.DataFrame):
        if not {"sender", "receiver"} <= set(edges.columns):
            raise InterpError("an edges table needs sender and receiver columns")
        if "position" in edges.columns:
            raise InterpError(
                "this table holds edges per position (a position column, from "
                "positions='each'); here edges are whole: pass positions='each' to read them "
                "per position, or sum them first, e.g. "
                "df.groupby(['sender', 'receiver'], as_index=False).sum()"
            )
        pairs: Iterable[Any] = zip(edges["sender"], edges["receiver"])
    elif isinstance(edges, (str, bytes)):
        raise InterpError("edges must be a list of edges, not one string; pass [label]")
    else:
        pairs = edges
    mask = np.zeros_like(graph.valid)
    for item in pairs:
        if isinstance(item, str):
            if "->" not in item:
                raise InterpError(f"edge {item!r} is not of the form 'sender -> receiver'")
            a, b = (x.strip() for x in item.split("->", 1))
        elif isinstance(item, Sequence) and len(item) == 2:
            a, b = item
        else:
            raise InterpError(f"cannot read {item!r} as an edge")
        s = graph.sender_index(a)
        for r in graph.receiver_indices(b):
            if not graph.valid[s, r]:
                raise InterpError(
                    f"{graph.senders[s]} -> {graph.receivers[r]} is not an edge: the sender "
                    "writes after the receiver reads"
                )
            mask[s, r] = True
    return mask


def position_edge_mask(graph: Graph, edges: Any, n_positions: int) -> np.ndarray:
    """``edges`` as a ``[n_senders, n_receivers, n_positions]`` bool mask: edges per position
    (``positions="each"``). Reads a mask of that shape, a table with a ``position`` column
    (an :func:`~interp.analysis.attribute_edges` table with ``positions="each"``), labels
    ``"a -> b @p"`` or ``(a, b, p)`` triples; an edge given without a position (any form
    :func:`edge_mask` reads) stands for that edge at every position.

    Example:
        >>> from interp.models import load_model
        >>> g = build_graph(load_model("induction-2l"))
        >>> m = position_edge_mask(g, ["L0H1 -> L1H1.k @3", "embed -> logits"], 5)
        >>> m.shape, int(m.sum()), int(m[g.sender_index("L0H1")].sum())
        ((6, 13, 5), 6, 1)

    Raises:
        InterpError: for an edge not in the graph, a position outside the prompt, or a mask
            of the wrong shape.
    """
    return wanted_edges(graph, edges, n_positions)


def wanted_edges(graph: Graph, edges: Any, n_positions: int | None = None) -> np.ndarray:
    """The edges an analysis reads, as a bool mask: ``None`` is every edge of the graph;
    else ``edges`` in any form :func:`edge_mask` reads (``[sender, receiver]``), or, given
    ``n_positions``, edges per position as :func:`position_edge_mask` reads them
    (``[sender, receiver, pos]``). Every edge is read by :func:`edge_mask`, an edge at a
    time in the order given.

    Args:
        graph: The model's graph.
        edges: The edges (``None``: every edge).
        n_positions: The prompts' length for edges per position (``positions="each"``);
            ``None`` for whole edges.

    Returns:
        The bool mask (``graph.valid`` itself for every whole edge).

    Raises:
        InterpError: as :func:`edge_mask` and :func:`position_edge_mask`.
    """
    if n_positions is None:
        if edges is None:
            return graph.valid
        parts: Iterable[tuple[Any, list[int] | None]] = [(edges, None)]
        mask = None
    else:
        P = int(n_positions)
        if edges is None:
            return np.repeat(graph.valid[..., None], P, axis=-1)
        mask = np.zeros((*graph.valid.shape, P), dtype=bool)
        every = list(range(P))
        if isinstance(edges, np.ndarray) or hasattr(edges, "numpy"):
            arr = np.asarray(edges.numpy() if hasattr(edges, "numpy") else edges, dtype=bool)
            if arr.ndim != 2:
                if arr.shape != (*graph.valid.shape, P):
                    raise InterpError(
                        f"edge mask has shape {arr.shape}; per position it must be "
                        f"{(*graph.valid.shape, P)}"
                    )
                if (arr & ~graph.valid[..., None]).any():
                    raise InterpError("the edge mask holds pairs that are not edges of the graph")
                return arr
            parts = [(arr, every)]
        elif isinstance(edges, pd.DataFrame) and "position" in edges.columns:
            parts = _edges_at(list(zip(edges["sender"], edges["receiver"], edges["position"])), P)
        elif isinstance(edges, (Circuit, pd.DataFrame)):
            parts = [(edges, every)]
        elif isinstance(edges, (str, bytes)):
            raise InterpError("edges must be a list of edges, not one string; pass [label]")
        else:
            parts = _edges_at(list(edges), P)
    for spec, ps in parts:  # each read as it comes: the first bad edge is the one named
        one = edge_mask(graph, spec)
        if mask is None:
            return one
        for p in ps:
            mask[..., p] |= one
    return mask


def _edges_at(items: list[Any], P: int) -> Iterator[tuple[list[Any], list[int]]]:
    """Each item of an edge list per position as ``(the edge, as edge_mask reads it, its
    positions)``, read as it is reached: ``"a -> b @p"``, ``(a, b, p)``, or an edge without a
    position (every position)."""
    for item in items:
        if isinstance(item, str) and "@" in item:
            edge, _, where = item.rpartition("@")
            try:
                p = int(where.strip())
            except ValueError:
                raise InterpError(
                    f"edge {item!r}: the position after '@' must be an integer"
                ) from None
            yield [edge.strip()], [_position(p, P)]
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 3:
            yield [tuple(item[:2])], [_position(item[2], P)]
        else:
            yield [item], list(range(P))


def _position(p: Any, P: int) -> int:
    """An edge's position in a prompt of ``P`` tokens (negative from the end), checked."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise InterpError(f"edge position must be an integer, got {p!r}")
    if not -P <= int(p) < P:
        raise InterpError(f"edge position {int(p)} is outside a prompt of {P} tokens")
    return int(p) % P


def load_circuit(
    path: str | os.PathLike[str], model: HookedModel, *, any_model: bool = False
) -> Circuit:
    """A circuit saved by :meth:`Circuit.save`, on ``model``'s graph (to evaluate elsewhere).

    A circuit names the model it was found on; it is refused on another model (a circuit of
    one model's heads says nothing about another's) unless ``any_model=True`` says that is
    meant (the graphs must still have the same shape).

    Args:
        path: A file written by :meth:`Circuit.save`.
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``); the circuit is placed on its graph
            (only its config and hook names are read).
        any_model: Accept a circuit found on another model whose graph has the same shape
            (default ``False``).

    Returns:
        The :class:`Circuit`, its scores and ``info`` as saved.

    Raises:
        InterpError: for a missing or malformed file (a key missing, a value of the wrong
            type, an edge that names no edge of the graph: the message names it), a circuit
            of another model (without ``any_model``), or of a graph of another shape.
    """
    p = Path(path)
    if not p.is_file():
        raise InterpError(f"circuit file {str(p)!r} not found")
    try:
        doc = json.loads(p.read_text())
    except ValueError as exc:
        raise InterpError(f"{str(p)!r} is not JSON ({exc}); is it a circuit file?") from None
    if not isinstance(doc, dict) or doc.get("format") != "interp-circuit":
        raise InterpError(f"{str(p)!r} is not an interp circuit file (no format: interp-circuit)")
    for key, kind in (("edges", list), ("graph", dict), ("model", str)):
        if key not in doc:
            raise InterpError(f"{str(p)!r} lacks its {key!r}; it was edited or truncated")
        if not isinstance(doc[key], kind):
            raise InterpError(
                f"{str(p)!r}: {key!r} must be a {kind.__name__}, got {type(doc[key]).__name__}"
            )
    graph = build_graph(model)
    if doc["model"] != graph.model_name and not any_model:
        raise InterpError(
            f"{str(p)!r} is a circuit of {doc['model']!r}, not of this model "
            f"({graph.model_name!r}); pass any_model=True to evaluate it here anyway"
        )
    shape = doc["graph"]
    if (shape.get("n_layers"), shape.get("n_heads"), shape.get("n_kv_heads")) != (
        graph.n_layers,
        graph.n_heads,
        graph.n_kv_heads,
    ):
        raise InterpError(
            f"{str(p)!r} is a circuit of a {shape.get('n_layers')} x {shape.get('n_heads')} "
            f"model; this model is {graph.n_layers} x {graph.n_heads}"
        )
    mask = np.zeros_like(graph.valid)
    scores = np.full(graph.valid.shape, np.nan)
    for i, e in enumerate(doc["edges"]):
        if not isinstance(e, dict) or not {"sender", "receiver"} <= set(e):
            raise InterpError(f"{str(p)!r}: edge {i} ({e!r}) needs a sender and a receiver")
        score = e.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            raise InterpError(f"{str(p)!r}: edge {i}'s score must be a number, got {score!r}")
        try:
            one = edge_mask(graph, [(e["sender"], e["receiver"])])
        except InterpError as exc:
            raise InterpError(
                f"{str(p)!r}: edge {i} ({e['sender']} -> {e['receiver']}): {exc}"
            ) from None
        mask |= one
        scores[one] = np.nan if score is None else float(score)
    info = doc.get("info", {})
    if not isinstance(info, dict):
        raise InterpError(f"{str(p)!r}: 'info' must be a mapping, got {type(info).__name__}")
    return Circuit(graph=graph, mask=mask, scores=scores, info=dict(info))


def __getattr__(name: str) -> Any:
    return renamed(__name__, name)  # an old name warns and names the new one

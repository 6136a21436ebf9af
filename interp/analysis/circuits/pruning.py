"""Which edges a top-n circuit keeps: the largest scores, then only the edges on a path.

:func:`top_edges` takes the ``n`` edges with the largest ``|score|``;
:func:`prune` drops those that cannot carry information from the input to the
logits through the circuit's own edges (a key/value head feeds every query head
of its group). :func:`interp.analysis.circuits.search.find_circuit` and
:func:`~interp.analysis.circuits.evaluation.circuit_curve` build their circuits
with them.

Example:
    >>> import numpy as np
    >>> top_edges(np.array([[3.0, -5.0], [np.nan, 1.0]]), 2).tolist()
    [[True, True], [False, False]]
"""

from __future__ import annotations

import numpy as np

from interp.engine.edges.graph import Graph


def top_edges(scores: np.ndarray, n: int) -> np.ndarray:
    """The mask of the ``n`` edges with the largest ``|score|`` (NaN scores never chosen)."""
    flat = np.where(np.isnan(scores), -np.inf, np.abs(scores)).ravel()
    mask = np.zeros(flat.shape, dtype=bool)
    if n > 0:
        mask[np.argsort(-flat, kind="stable")[:n]] = True
    return mask.reshape(scores.shape) & ~np.isnan(scores)


def prune(graph: Graph, mask: np.ndarray) -> np.ndarray:
    """``mask`` without edges that cannot carry information from the input to the logits:
    an edge stays when its sender is reached from the embeddings and its receiver's
    component reaches the logits, both through edges of the circuit."""
    comp_of_r = []  # the sender index of each receiver's component (-1 for the logits)
    for name, inp in zip(graph.receivers, graph.receiver_input):
        if inp == "logits":
            comp_of_r.append(-1)
        elif inp == "mlp":
            comp_of_r.append(graph.senders.index(name))  # "L3.mlp" reads and writes
        else:
            base = name.rsplit(".", 1)[0]
            comp_of_r.append(graph.senders.index(base) if base in graph.senders else -2)
    heads_of_kv: dict[int, list[int]] = {}
    for j, (inp, name) in enumerate(zip(graph.receiver_input, graph.receivers)):
        if inp in ("k", "v") and graph.grouped:  # a key/value head feeds its query heads
            l, g = name.split("KV")
            g = int(g.split(".")[0])
            group = graph.n_heads // graph.n_kv_heads
            heads_of_kv[j] = [
                graph.senders.index(f"{l}H{h}") for h in range(g * group, (g + 1) * group)
            ]
    S = len(graph.senders)
    reached = np.zeros(S, dtype=bool)
    reached[[i for i, k in enumerate(graph.sender_kind) if k in ("embed", "pos_embed")]] = True
    useful = np.zeros(S, dtype=bool)
    for _ in range(2 * graph.n_layers + 2):  # forward and backward sweeps until stable
        before = (reached.copy(), useful.copy())
        for s, r in zip(*np.nonzero(mask)):
            targets = heads_of_kv.get(r, [comp_of_r[r]])
            if reached[s]:
                for c in targets:
                    if c >= 0:
                        reached[c] = True
            if any(c == -1 or (c >= 0 and useful[c]) for c in targets):
                useful[s] = True
        if np.array_equal(before[0], reached) and np.array_equal(before[1], useful):
            break
    out = mask.copy()
    for s, r in zip(*np.nonzero(mask)):
        targets = heads_of_kv.get(r, [comp_of_r[r]])
        if not (reached[s] and any(c == -1 or (c >= 0 and useful[c]) for c in targets)):
            out[s, r] = False
    return out

"""The edge engine's passes: sender outputs, edited passes, and their exactness check.

Every circuit analysis runs on these: :func:`sender_outputs` (one pass that
records every sender's output), :func:`run` (one batched pass with an
:class:`~interp.engine.edges.run.EdgeRun`'s edits, resumed at a block or reading
only the logits' input), :func:`evaluate_masks` (circuits: edges outside a
mask carry the replacement) and :func:`patch_edges` (edge patches: only the
masked edges move). :func:`check_exact` verifies once per model that giving
every receiver its own input reproduces the model's own pass.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.engine.edges.graph import build_graph
    >>> from interp.runtime import runtime_of
    >>> model = load_model("induction-2l")
    >>> rt = runtime_of(model)
    >>> out, logits = sender_outputs(rt, build_graph(model), torch.tensor([[0, 5, 6]]))
    >>> tuple(out.shape)  # [sender, batch, pos, d_model]
    (6, 1, 3, 128)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.engine.batching import copies_per_pass, pack
from interp.engine.edges.graph import Graph, Index
from interp.engine.edges.run import EdgeRun, sender_hooks
from interp.runtime import Layer, Runtime


def layer_parts(rt: Runtime) -> list[Layer]:
    """Every layer's norms and head weights, as the engine recomputes receivers with them."""
    return [rt.layer(l) for l in range(rt.n_layers)]


def sender_outputs(
    rt: Runtime,
    graph: Graph,
    tokens: torch.Tensor,
    *,
    extra_hooks: Sequence[tuple[str, Callable]] = (),
    parts: list[Layer] | None = None,
    rows: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: every sender's output ``[sender, batch, pos, d_model]`` and the
    logits (where the runtime can, only at ``rows``: the pass is for its senders)."""
    index = Index.of(graph)
    parts = parts or layer_parts(rt)
    b, n = tokens.shape
    d = rt.d_model
    out = torch.empty(len(graph.senders), b, n, d, device=tokens.device)  # each filled once
    seen: set[int] = set()

    def store(s: int, x: torch.Tensor) -> None:
        out[s] = x.detach().float()
        seen.add(s)

    with torch.no_grad():
        hooks = [*sender_hooks(graph, index, parts, store), *extra_hooks]
        logits = rt.run(tokens, hooks=hooks, rows=rows)
    check_filled(seen, graph)
    return out, logits


def check_filled(seen: set[int], graph: Graph) -> None:
    """Raise unless every sender's output was seen in the pass.

    Raises:
        InterpError: naming the senders whose hooks never fired.
    """
    if len(seen) != len(graph.senders):
        missing = [graph.senders[i] for i in range(len(graph.senders)) if i not in seen][:5]
        raise InterpError(
            f"edge engine: the outputs of {missing} were never seen in the forward pass; this "
            "model's hooks do not fire as its graph says"
        )


def input_hooks(graph: Graph, store: dict[str, torch.Tensor]) -> list[tuple[str, Callable]]:
    """Hooks keeping every receiver layer's input: ``pre{l}``, ``mid{l}`` and ``final``."""
    index = Index.of(graph)

    def keep(key: str) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> None:
            store[key] = x.detach()

        return hook

    hooks = []
    for l in range(graph.n_layers):
        hooks.append((hook_name("resid_pre", l), keep(f"pre{l}")))
        if index.mlp[l] >= 0:
            hooks.append((hook_name("resid_mid", l), keep(f"mid{l}")))
    hooks.append((hook_name("resid_post", graph.n_layers - 1), keep("final")))
    return hooks


def run(
    rt: Runtime,
    tokens: torch.Tensor,
    edge_run: EdgeRun,
    *,
    start: int = 0,
    kept: dict[int, Any] | None = None,
    final: torch.Tensor | None = None,
    rows: Sequence[int] | None = None,
) -> torch.Tensor:
    """Logits ``[k * batch, pos, d_vocab]`` of one batched pass with ``edge_run``'s edits.

    ``start`` skips blocks ``0 .. start - 1`` (what enters block ``start`` in ``kept``,
    from the runtime's ``block_inputs``); ``start == n_layers`` reads only the logits'
    input: ``final`` (the base residual the final norm reads) plus its edit. ``rows`` (the
    positions a metric reads) may limit the unembedding; other rows as
    :func:`interp.runtime.scatter_rows` leaves them.
    """
    from interp.runtime import kept_rows, scatter_rows

    k = edge_run.k
    n = tokens.shape[1]
    if start >= rt.n_layers:
        d = edge_run.delta([edge_run.index.logits], len(edge_run.graph.senders))
        x = final[None].expand(k, *final.shape)
        if d is not None:
            x = x + d[:, 0].to(x.device, x.dtype)
        x = x.reshape(k * final.shape[0], *final.shape[1:])
        keep = kept_rows(rows, n)
        if keep is None:
            return rt.readout(x)
        return scatter_rows(rt.readout(x[:, torch.tensor(keep, device=x.device)]), keep, n)
    state = kept[start] if start > 0 else None
    return rt.run(
        tokens, hooks=edge_run.hooks(start), rows=rows, start=start, state=state, copies=k
    )


def check_exact(rt: Runtime, graph: Graph, parts: list[Layer], tokens: torch.Tensor) -> None:
    """Once per model: the per-receiver recomputation reproduces the model's own pass (every
    receiver edited by zero), and a pass editing every edge reproduces the other run.

    Raises:
        InterpError: if this model's receivers cannot be given their own inputs exactly.
    """
    rt.check_readout("circuit analysis")  # a logits receiver's edits go through readout
    ok, why = rt.verdict("edges: exact", lambda: _probe(rt, graph, parts, tokens))
    if not ok:
        raise InterpError(
            f"circuits need each head's query, key and value recomputed from its own input, and "
            f"on this model that does not reproduce its forward pass ({why})"
        )


def _probe(rt: Runtime, graph: Graph, parts: list[Layer], tokens: torch.Tensor) -> tuple:
    from interp.core.precision import FROM_MODEL, check_finite_values, within

    probe = tokens[:1, : min(tokens.shape[1], 6)]
    other = torch.flip(probe, dims=[1])
    try:
        with torch.no_grad():
            clean_out, ref_logits = sender_outputs(rt, graph, probe, parts=parts)
            corr_out, corr_logits = sender_outputs(rt, graph, other, parts=parts)
            valid = torch.as_tensor(graph.valid, dtype=torch.float32)
            force = torch.ones_like(valid)[None] * valid  # every edge, so every receiver recomputed
            for logits, which in ((ref_logits, "the first"), (corr_logits, "the reversed first")):
                check_finite_values(
                    logits,
                    f"the model's own logits on {which} {probe.shape[1]} tokens of the prompts "
                    "(the check that edges reproduce the model)",
                    f"{FROM_MODEL}; no circuit of non-finite logits is computed",
                )
            zero = EdgeRun(graph, parts, force, clean_out, clean_out, 1)  # alt - ref = 0
            got = run(rt, probe, zero)
            # the rounding of a per-head product against the model's fused projection, carried
            # through every layer: well inside 1e-5 of the logits' size in float32 on the models
            # tested; in float16 / bfloat16 the precision's rule (interp.core.precision)
            gap, tol = _gap(got, ref_logits, float32=1e-5)
            if not within(gap, tol):  # NaN fails
                return False, f"recomputed inputs change the logits by {gap:.2e} (> {tol:.2g})"
            every = EdgeRun(graph, parts, force, corr_out, None, 1)
            got = run(rt, probe, every)
            gap, tol = _gap(got, corr_logits, float32=1e-3)
            if not within(gap, tol):
                return False, (
                    f"corrupting every edge differs from the corrupted run by {gap:.2e} "
                    f"(> {tol:.2g})"
                )
        return True, ""
    except InterpError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot split this model"
        return False, f"{type(exc).__name__}: {exc}"


def _gap(got: torch.Tensor, want: torch.Tensor, *, float32: float) -> tuple[float, float]:
    """The largest gap between two computations of the logits, and the tolerance of a claim
    that holds to ``float32`` (relative to the largest logit) in the logits' precision."""
    from interp.core.precision import tolerance

    size = float(want.float().abs().max())
    gap = float((got.float() - want.float()).abs().max())
    return gap, tolerance(want.dtype, size, float32=float32)


def copy_bytes(
    graph: Graph,
    rt: Runtime,
    pos: int,
    *,
    running: bool,
    rows: Sequence[int] | None = None,
    logits_only: bool = False,
) -> tuple[int, int]:
    """The edge engine's memory model of one copy of one prompt in a pass of ``pos`` tokens:
    its bytes and the part later layers read back. A forward pass's transients, the logits at
    the metric's ``rows`` where the runtime unembeds only those
    (:func:`interp.core.memory.forward_bytes`); the state a resumed pass starts from, repeated per
    copy; one layer's edits while its receivers are recomputed: the edit of each of its
    attention receivers (held through its q, k and v hooks) and, first, the sum subtracted
    from it with the senders gathered for it (:data:`interp.engine.edges.run.GATHER` at a
    time), then the edited inputs and their norm (a query head's each); in a running pass,
    the store of every sender's difference and their running total, which later layers read
    back. A pass that edits only the logits' input (``logits_only``) runs no block: per copy
    the edit, the edited final stream and its logits at ``rows``. Residual-width tensors of
    the engine are float32."""
    from interp.core.memory import forward_bytes, logit_bytes, stream_bytes
    from interp.engine.edges.run import GATHER

    model = rt.model
    f = stream_bytes(model, pos, element=4)
    e = stream_bytes(model, pos)
    if logits_only:
        return f + e + logit_bytes(model, pos, rows), 0  # the readout reads only the rows
    R_l = graph.n_heads + 2 * graph.n_kv_heads  # a layer's attention receivers
    layer = R_l * f + max((R_l + GATHER) * f, 2 * graph.n_heads * e)
    store = (len(graph.senders) + 1) * f if running else 0
    per_copy = forward_bytes(model, 1, pos, rows=rt.unembedded(rows)) + e + layer + store
    return per_copy, store


def edits_per_pass(prep: Any, *, running: bool, logits_only: bool = False) -> int:
    """Copies per pass (:func:`interp.engine.batching.copies_per_pass`) under the task's
    budget (:func:`copy_bytes`)."""
    b, pos = prep.tokens.shape
    per_copy, store = copy_bytes(
        prep.graph, prep.rt, pos, running=running, rows=prep.metric.rows, logits_only=logits_only
    )
    return copies_per_pass(
        prep.tokens.numel(), prep.tokens.device, per_copy=b * per_copy, reread=b * store,
        memory_budget=prep.memory_budget,
    )  # fmt: skip


def as_tensor(mask: np.ndarray, device: Any = None) -> torch.Tensor:
    """A bool mask as a float tensor (the engine's mask dtype)."""
    return torch.as_tensor(mask.astype(np.float32), device=device)


def evaluate_masks(
    prep: Any,
    masks: Sequence[np.ndarray],
    *,
    progress: bool = False,
    desc: str = "circuits",
) -> list[float]:
    """The metric with each mask's edges carrying the replacement (``ref`` = running), one
    full pass per group of copies that fits :func:`edits_per_pass`."""
    from tqdm.auto import tqdm

    from interp.core.metrics import scalar
    from interp.core.protocol import eval_no_grad

    rt = prep.rt
    k = edits_per_pass(prep, running=True)
    out: list[float] = []
    b = prep.tokens.shape[0]
    bar = tqdm(total=len(masks), disable=not progress, desc=desc, unit="circuit")
    try:
        with eval_no_grad(rt.model):
            for chunk in pack([0] * len(masks), k):
                group = [masks[i] for i in chunk]
                stacked = torch.stack([as_tensor(m, prep.tokens.device) for m in group])
                er = prep.edge_run(stacked, ref=None)
                logits = run(rt, prep.base, er, rows=prep.metric.rows)
                prep.cost.forward(len(group))
                for c in range(len(group)):
                    part = logits[c * b : (c + 1) * b]
                    out.append(scalar(prep.metric(part, prep.tokens), prep.metric.name))
                del logits, part, er  # gone before the next pass makes its own
                bar.update(len(group))
    finally:
        bar.close()
    return out


Edit = Sequence[tuple[int, ...]]  # the (sender, receiver[, position]) indices an edit moves


def edit_starts(prep: Any, edits: Sequence[Edit]) -> list[int]:
    """The block each edit's pass resumes at: its first edited receiver's layer (``n_layers``
    when it edits only the logits; 0 on a runtime that cannot resume)."""
    graph, L = prep.graph, prep.graph.n_layers
    starts = [min((graph.receiver_layer[e[1]] for e in edit), default=L) for edit in edits]
    if not prep.rt.can_resume:  # passes run whole (the logits' input still alone)
        starts = [0 if st < L else L for st in starts]
    return starts


def pass_shape(prep: Any, edits: Sequence[Edit]) -> dict[str, Any]:
    """What :func:`patch_edges` will hold for ``edits`` (its memory model,
    :func:`interp.engine.edges.task.edge_footprint`): ``resumes``, the blocks whose entering
    stream it keeps to resume there; ``copies``, the most edits one pass can carry (those
    that resume at one block); ``logits_only``, whether every pass edits only the logits."""
    from collections import Counter

    L = prep.graph.n_layers
    starts = edit_starts(prep, edits)
    return {
        "resumes": len(set(starts) - {0, L}),
        "copies": max(Counter(starts).values(), default=1),
        "logits_only": all(st >= L for st in starts),
    }


def patch_cost(prep: Any, edits: Sequence[Edit]) -> float:
    """The forward-equivalents :func:`patch_edges` will run for ``edits`` (known before)."""
    L = prep.graph.n_layers
    starts = edit_starts(prep, edits)
    cost = prep.cost.like()
    if any(0 < st < L for st in starts):
        cost.forward(rows=(-1,))  # the states the passes resume from: logits unread
    for st in starts:
        cost.forward(start=min(st, L))  # from the edit's first layer, then the metric's rows
    return cost.total


def patch_edges(
    prep: Any,
    edits: Sequence[Edit],
    *,
    progress: bool = False,
    desc: str = "edges",
) -> list[float]:
    """The metric with each edit's edges (``(sender, receiver)`` index pairs, or triples with
    a position for ``positions="each"``) moved by ``alt - base`` (``ref`` = the base run's
    outputs), every other input the base run's: each pass resumes at its first edited
    receiver's layer, copies of one starting layer share passes, a pass that edits only
    the logits reads only them. Masks are built a pass at a time, so any number of edits
    fits in memory."""
    from tqdm.auto import tqdm

    from interp.core.metrics import scalar
    from interp.core.protocol import eval_no_grad

    rt, graph, b = prep.rt, prep.graph, prep.tokens.shape[0]
    L = graph.n_layers
    shape = (*graph.valid.shape, prep.tokens.shape[1]) if prep.each else graph.valid.shape
    starts = edit_starts(prep, edits)
    k = edits_per_pass(prep, running=False, logits_only=all(st >= L for st in starts))
    chunks = pack(starts, k)
    values: dict[int, float] = {}
    bar = tqdm(total=len(edits), disable=not progress, desc=desc, unit="edit")
    try:
        with eval_no_grad(rt.model):
            kept: dict[int, Any] = {}
            need = {starts[c[0]] for c in chunks} - {0, L}
            if need:
                _, kept = rt.block_inputs(prep.base, need, rows=(-1,))  # logits unread
                prep.cost.forward(rows=(-1,))
            final = prep.base_inputs["final"]
            for chunk in chunks:
                start = starts[chunk[0]]
                stacked = torch.zeros(len(chunk), *shape, device=prep.tokens.device)
                for c, i in enumerate(chunk):
                    for idx in edits[i]:
                        stacked[(c, *idx)] = 1.0
                er = prep.edge_run(stacked, ref=prep.base_out)
                logits = run(
                    rt, prep.base, er, start=start, kept=kept, final=final,
                    rows=prep.metric.rows,
                )  # fmt: skip
                prep.cost.forward(len(chunk), start=start)
                for c, i in enumerate(chunk):
                    part = logits[c * b : (c + 1) * b]
                    values[i] = scalar(prep.metric(part, prep.tokens), prep.metric.name)
                del logits, part, er, stacked  # gone before the next pass makes its own
                bar.update(len(chunk))
    finally:
        bar.close()
    return [values[i] for i in range(len(edits))]

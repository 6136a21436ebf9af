"""One batched pass of the edge engine: each receiver reads its own input.

A receiver's input is the residual stream it reads: the sum of every earlier
sender's output (plus biases). To change one *edge* ``s -> r`` without touching
``s``'s other edges, ``r`` alone must read a different sum. Heads read through
their layer's norm and their own ``W_Q`` / ``W_K`` / ``W_V``, so for each edited
layer :class:`EdgeRun`'s hooks recompute the queries, keys and values from
per-receiver inputs with the model's own norm (:class:`interp.runtime.Norm`) and
weights, the MLP's input through its second norm, and the logits' input
directly. Rotary embeddings, grouped keys and masks are applied by the model
after these hooks, as in any run. Unedited receivers keep the model's own
values, bit for bit.

For copy ``c`` of the batch (several edits share a pass) and receiver ``r``:

    input_r = input_r (as it is in this pass) + sum_s mask[c, s, r] * (alt_s - ref_s)

where ``alt`` are the senders' replacement outputs (the source run's, zero or a
mean), and ``ref`` either the senders' outputs in this very pass (``ref=None``,
EAP-IG's ``evaluate_graph``: edges outside a circuit carry the replacement,
every other edge what its sender computes now) or fixed base-run outputs (path
patching and single-edge effects: the sender's source minus base output reaches
only the edited receivers; everything else runs as usual, so a receiver
downstream of another edited receiver also reads what that one now writes).

The passes themselves are here too: :func:`sender_outputs` (one pass that records
every sender's output, :func:`sender_hooks`), :func:`run` (one batched pass with an
:class:`EdgeRun`'s edits, resumed at a block or reading only the logits' input) and
:func:`check_exact`, which verifies once per model that giving every receiver its own
input reproduces the model's own pass. :mod:`~interp.engine.edges.passes` packs them
over many edits.

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

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.engine.ablations import resample_index
from interp.engine.cost import ALL_ROWS
from interp.engine.edges.graph import Graph, Index
from interp.engine.edges.sums import GATHER, EdgeSums  # noqa: F401 - GATHER: its home was here
from interp.runtime import Layer, Runtime, kept_rows, scatter_rows


def sender_hooks(
    graph: Graph,
    index: Index,
    parts: list[Layer],
    store: Callable[[int, torch.Tensor], None],
    only: Collection[int] | None = None,
) -> list[tuple[str, Callable]]:
    """Hooks that hand every sender's output (``[batch, pos, d_model]``) to ``store(s, x)``;
    ``only``: just these senders' (a head's output is then projected through its ``W_O``
    only for the heads wanted, and a layer with none wanted gets no hook)."""
    hooks: list[tuple[str, Callable]] = []

    def wanted(s: int) -> bool:
        return s >= 0 and (only is None or s in only)

    def at(s: int) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> None:
            store(s, x)

        return hook

    if wanted(index.embed):
        hooks.append((hook_name("embed"), at(index.embed)))
    if wanted(index.pos_embed):
        hooks.append((hook_name("pos_embed"), at(index.pos_embed)))
    for l in range(graph.n_layers):
        hs = [h for h, s in enumerate(index.heads[l]) if wanted(s)]

        def heads(z: torch.Tensor, hook: Any, l: int = l, hs: list[int] = hs) -> None:
            # in float32 whatever the model's precision: the outputs are summed, never rounded
            W = parts[l].W_O.to(z.device).float()
            if len(hs) < W.shape[0]:  # the wanted heads' outputs alone
                z, W = z[:, :, hs], W[hs]
            out = torch.einsum("bphe,hed->hbpd", z.float(), W)
            for i, h in enumerate(hs):
                store(index.heads[l][h], out[i])

        if hs:
            hooks.append((hook_name("z", l), heads))
        if wanted(index.mlp_sender[l]):
            hooks.append((hook_name("mlp_out", l), at(index.mlp_sender[l])))
    return hooks


class EdgeRun(EdgeSums):
    """The hooks of one batched pass of ``k`` copies in which receivers' inputs are edited
    (module docstring). ``masks [k, sender, receiver]`` (float) says which edges of each copy
    carry ``alt - ref``, or ``[k, sender, receiver, pos]`` with one edge per position
    (``positions="each"``); ``positions`` (a ``[pos]`` bool mask) restricts the edits;
    ``senders`` (sorted graph indices, with a fixed ``ref``): the only senders ``masks``,
    ``alt`` and ``ref`` hold, in that order. The sums it adds to the receivers' inputs are
    :class:`~interp.engine.edges.sums.EdgeSums`'s."""

    def __init__(
        self,
        graph: Any,
        parts: list[Layer],
        masks: torch.Tensor,
        alt: torch.Tensor,
        ref: torch.Tensor | None,
        b: int,
        positions: torch.Tensor | None = None,
        cum: dict[str, torch.Tensor] | None = None,
        senders: Sequence[int] | None = None,
    ):
        if senders is not None and ref is None:
            raise InterpError("edge engine: a pass against its own outputs records every sender")
        self.senders = None if senders is None else list(senders)  # masks' and alt's sender axis
        self.graph = graph
        self.index = Index.of(graph)
        self.parts = parts
        self.masks = masks
        self.alt = alt  # [sender, batch, pos, d_model]
        self.ref = ref
        self.k = masks.shape[0]
        self.by_pos = masks.ndim == 4  # [k, sender, receiver, pos]: edges per position
        self.b = b
        self.pos = None if positions is None else positions.float()
        # In a running pass (ref None): alt_s - (sender s's output in this pass), per copy.
        self.running: torch.Tensor | None = None  # [sender, k, batch, pos, d_model], filled
        self.run_total: torch.Tensor | None = None  # the sum of those stored so far
        self.layer_delta: dict[int, torch.Tensor | None] = {}  # a layer's q/k/v edits
        self.n_stored = 0
        self.cum: dict[str, torch.Tensor] = cum if cum is not None else {}  # prefix sums
        self.resid: dict[str, torch.Tensor] = {}

    # ----------------------------------------------------------------- hooks
    def hooks(self, start: int = 0) -> list[tuple[str, Callable]]:
        """The pass's hooks; ``start`` is the first block that runs (earlier ones are stubs)."""
        g, ix = self.graph, self.index
        hooks: list[tuple[str, Callable]] = []
        if self.ref is None:

            def store(s: int, x: torch.Tensor) -> None:
                x = x.float().view(self.k, self.b, *x.shape[1:])  # the layer's device
                if self.running is None:
                    shape = (len(g.senders), *x.shape)
                    buf = self.cum.get("running buffer")  # reused across passes: no new pages
                    if buf is None or tuple(buf.shape) != shape or buf.dtype != x.dtype:
                        buf = self.cum["running buffer"] = x.new_empty(shape)
                    self.running = buf
                d = self.running[s]
                torch.sub(self.alt[s], x.to(d.device), out=d)  # alt_s - running_s, each copy
                self.run_total = d.clone() if self.run_total is None else self.run_total + d
                self.n_stored += 1

            hooks += [
                h
                for h in sender_hooks(g, ix, self.parts, store)
                if start == 0 or not h[0].startswith(("hook_embed", "hook_pos_embed"))
            ]
        for l in range(start, g.n_layers):
            hooks.append((hook_name("resid_pre", l), self._keep(f"pre{l}")))
            for kind in ("q", "k", "v"):
                hooks.append((hook_name(kind, l), self._attn_input(l, kind)))
            if ix.mlp[l] >= 0:
                hooks.append((hook_name("resid_mid", l), self._keep(f"mid{l}")))
                hooks.append((f"blocks.{l}.mlp.hook_in", self._mlp_input(l)))
        hooks.append((hook_name("resid_post", g.n_layers - 1), self._final()))
        return hooks

    def _keep(self, key: str) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> None:
            if key.startswith("pre"):  # a new layer: the earlier ones' inputs and edits are
                self.resid.clear()  # read no more (held, they would grow with every layer)
                self.layer_delta.clear()
            self.resid[key] = x

        return hook

    def _attn_input(self, l: int, kind: str) -> Callable:
        ix = self.index
        every = ix.q[l] + ix.k[l] + ix.v[l]  # one delta for the layer's q, k and v receivers
        lo = {"q": 0, "k": len(ix.q[l]), "v": len(ix.q[l]) + len(ix.k[l])}[kind]
        width = len(getattr(ix, kind)[l])

        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor | None:
            if l not in self.layer_delta:
                self.layer_delta[l] = self.delta(every, ix.before_attn[l])
            d = self.layer_delta[l]
            if d is None:
                return None
            edited = self.edited(every[lo : lo + width])  # [k, receiver]
            if not edited.any():
                return None  # none of these receivers is edited: the model's own values
            d = d[:, lo : lo + width]
            part = self.parts[l]
            pre = self._base(f"pre{l}")  # [k, batch, pos, d_model]
            inp = pre[:, None] + d.to(pre.device, pre.dtype)  # [k, receiver, batch, pos, d_model]
            normed = inp if part.ln1 is None else part.ln1(inp)
            # accumulated in float32 and rounded once to the model's precision, as the model's
            # own projection is (per head here, fused there: equal up to that rounding)
            W = part.W[kind].to(normed.device).float()
            new = torch.einsum("krbpd,rde->kbpre", normed.float(), W)
            if part.b[kind] is not None:
                new = new + part.b[kind].to(new.device).float()
            own = x.view(new.shape)  # unedited receivers keep the model's values, bit for bit
            keep = edited.to(x.device)[:, None, None, :, None]
            return torch.where(keep, new.to(x.dtype), own).reshape(x.shape)

        return hook

    def _mlp_input(self, l: int) -> Callable:
        receiver = [self.index.mlp[l]]

        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor | None:
            d = self.delta(receiver, self.index.before_mlp[l])
            if d is None:
                return None
            mid = self._base(f"mid{l}")
            inp = mid + d[:, 0].to(mid.device, mid.dtype)
            ln2 = self.parts[l].ln2
            new = (inp if ln2 is None else ln2(inp)).to(x.dtype)
            edited = self.edited(receiver)[:, 0].to(x.device)  # [k]
            own = x.view(new.shape)
            return torch.where(edited.view(-1, *[1] * (new.ndim - 1)), new, own).reshape(x.shape)

        return hook

    def _final(self) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor | None:
            d = self.delta([self.index.logits], len(self.graph.senders))
            if d is None:
                return None
            self.resid["final"] = x
            base = self._base("final")
            return (base + d[:, 0].to(base.device, base.dtype)).reshape(x.shape).to(x.dtype)

        return hook

    def _base(self, key: str) -> torch.Tensor:
        """The input an edited receiver reads in this pass, ``[k, batch, pos, d_model]``: what
        it would read unedited (upstream edits included), to which its edit is added."""
        x = self.resid[key]
        return x.view(self.k, self.b, *x.shape[1:])


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
    senders: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: every sender's output ``[sender, batch, pos, d_model]`` and the
    logits (where the runtime can, only at ``rows``: the pass is for its senders).
    ``senders`` (sorted graph indices): only theirs, in that order (an edge patch that moves
    a few senders' outputs reads no other's)."""
    index = Index.of(graph)
    parts = parts or layer_parts(rt)
    b, n = tokens.shape
    d = rt.d_model
    slot = {s: i for i, s in enumerate(range(len(graph.senders)) if senders is None else senders)}
    out = torch.empty(len(slot), b, n, d, device=tokens.device)  # each filled once
    seen: set[int] = set()

    def store(s: int, x: torch.Tensor) -> None:
        out[slot[s]] = x.detach().float()
        seen.add(s)

    with torch.no_grad():
        only = None if senders is None else slot
        hooks = [*sender_hooks(graph, index, parts, store, only), *extra_hooks]
        logits = rt.run(tokens, hooks=hooks, rows=rows)
    check_filled(seen, graph, slot)
    return out, logits


def replacement(ablation: str, outputs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The senders' replacement outputs ``[sender, batch, pos, d_model]`` for zero, mean or
    resample ablation, made from the base run's ``outputs`` (resample: each sequence's
    outputs are another sequence's, drawn with ``seed``)."""
    if ablation == "zero":
        return torch.zeros_like(outputs)
    if ablation == "resample":
        idx = resample_index(outputs.shape[1], None, seed, device=outputs.device)
        return outputs[:, idx].contiguous()
    return outputs.mean(1, keepdim=True).expand_as(outputs).contiguous()


def replacement_outputs(task: Any, outputs: torch.Tensor) -> torch.Tensor:
    """The senders' replacement outputs for an edge task's zero, mean or resample ablation,
    from the base run's ``outputs``; in a chunk of a larger batch, the whole batch's mean,
    or the outputs of the sequences drawn for this chunk's rows (one more pass, counted in
    the task's ``cost``).

    Args:
        task: The edge task (:class:`interp.engine.edges.task.EdgeTask`).
        outputs: The base run's senders' outputs ``[sender, batch, pos, d_model]``.

    Returns:
        The replacement outputs, of the same shape.
    """
    if task.ablation == "mean" and task.mean_out is not None:
        return task.mean_out.expand_as(outputs).contiguous()
    if task.ablation == "resample" and task.resample_tokens is not None:
        alt, _ = sender_outputs(task.rt, task.graph, task.resample_tokens, parts=task.parts)
        task.cost.forward(rows=ALL_ROWS)  # its logits are not read, but made
        return alt
    return replacement(task.ablation, outputs, task.seed)


def check_filled(seen: set[int], graph: Graph, wanted: Collection[int] | None = None) -> None:
    """Raise unless every sender's output (every ``wanted`` one's) was seen in the pass.

    Raises:
        InterpError: naming the senders whose hooks never fired.
    """
    wanted = range(len(graph.senders)) if wanted is None else wanted
    if len(seen) != len(wanted):
        missing = [graph.senders[i] for i in wanted if i not in seen][:5]
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

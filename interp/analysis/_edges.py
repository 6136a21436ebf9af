"""The engine room of circuits: forward passes in which each receiver gets its own input.

A receiver's input is the residual stream it reads: the sum of every
earlier sender's output (plus biases). To change one *edge* ``s -> r``
without touching ``s``'s other edges, ``r`` alone must read a different
sum. Heads read through their layer's norm and their own ``W_Q`` / ``W_K`` /
``W_V``, so for each edited layer the engine recomputes the queries, keys and
values from per-receiver inputs with the model's own norm module and weights
(checked to reproduce the model's own ``hook_q`` / ``hook_k`` / ``hook_v``
exactly before it is trusted), the MLP's input through its second norm, and
the logits' input directly. Rotary embeddings, grouped keys and masks are
applied by the model after these hooks, as in any run.

For copy ``c`` of the batch (several edits share a pass) and receiver ``r``:

    input_r = input_r (as it is in this pass) + sum_s mask[c, s, r] * (alt_s - ref_s)

where ``alt`` are the senders' replacement outputs (the corrupted run's, zero
or a mean), and ``ref`` either the senders' outputs in this very pass
(``ref=None``, EAP-IG's ``evaluate_graph``: edges outside a circuit carry the
replacement, every other edge what its sender computes now) or fixed clean
outputs (path patching and single-edge effects: the sender's corrupted minus
clean output reaches only the edited receivers; everything else runs as
usual, so a receiver downstream of another edited receiver also reads what
that one now writes).

Gradients for edge attribution come from one ordinary backward pass: the
gradients at ``hook_q`` / ``hook_k`` / ``hook_v`` and the MLP's input are
carried back through the head's own weights and norm (the model's module,
by autograd) to each receiver's input, so nothing is recomputed in the
forward pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from interp.analysis._sweep import blocks_of, clean_block_inputs, skipping_blocks
from interp.errors import InterpError
from interp.hooks import hook_name


@dataclasses.dataclass
class Layer:
    """What recomputing one layer's receivers needs: its norms and head weights."""

    ln1: Any  # module or None (identity)
    ln2: Any
    W: dict[str, torch.Tensor]  # "q": [head, d_model, d_head]; "k"/"v": [kv_head, d_model, d_head]
    b: dict[str, torch.Tensor | None]  # [head, d_head] or None
    W_O: torch.Tensor  # [head, d_head, d_model]


def layer_parts(model: Any, layer: int) -> Layer:
    """The norms and weights of ``layer`` (bias-free projections give ``None``)."""
    block = model.blocks[layer]
    attn = block.attn
    W = {k: getattr(attn, f"W_{k.upper()}").detach() for k in ("q", "k", "v")}
    b = {}
    for k in ("q", "k", "v"):
        v = getattr(attn, f"b_{k.upper()}", None)
        b[k] = v.detach() if isinstance(v, torch.Tensor) else None
    return Layer(
        ln1=getattr(block, "ln1", None),
        ln2=getattr(block, "ln2", None),
        W=W,
        b=b,
        W_O=attn.W_O.detach(),
    )


def _norm(module: Any, x: torch.Tensor) -> torch.Tensor:
    return x if module is None else module(x)


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


def sender_hooks(
    graph: Any, index: Index, parts: list[Layer], store: Callable[[int, torch.Tensor], None]
) -> list[tuple[str, Callable]]:
    """Hooks that hand every sender's output (``[batch, pos, d_model]``) to ``store(s, x)``."""
    hooks: list[tuple[str, Callable]] = []

    def at(s: int) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> None:
            store(s, x)

        return hook

    hooks.append((hook_name("embed"), at(index.embed)))
    if index.pos_embed >= 0:
        hooks.append((hook_name("pos_embed"), at(index.pos_embed)))
    for l in range(graph.n_layers):

        def heads(z: torch.Tensor, hook: Any, l: int = l) -> None:
            out = torch.einsum("bphe,hed->hbpd", z, parts[l].W_O.to(z.dtype))
            for h, s in enumerate(index.heads[l]):
                store(s, out[h])

        hooks.append((hook_name("z", l), heads))
        if index.mlp_sender[l] >= 0:
            hooks.append((hook_name("mlp_out", l), at(index.mlp_sender[l])))
    return hooks


def sender_outputs(
    model: Any,
    graph: Any,
    tokens: torch.Tensor,
    *,
    extra_hooks: Sequence[tuple[str, Callable]] = (),
    parts: list[Layer] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: every sender's output ``[sender, batch, pos, d_model]`` and the logits."""
    index = Index.of(graph)
    parts = parts or [layer_parts(model, l) for l in range(graph.n_layers)]
    b, n = tokens.shape
    d = int(model.cfg.d_model)
    out = torch.zeros(len(graph.senders), b, n, d, device=tokens.device)

    def store(s: int, x: torch.Tensor) -> None:
        out[s] = x.detach().float()

    with torch.no_grad():
        logits = model.run_with_hooks(
            tokens, fwd_hooks=[*sender_hooks(graph, index, parts, store), *extra_hooks]
        )
    return out, logits


def input_hooks(graph: Any, store: dict[str, torch.Tensor]) -> list[tuple[str, Callable]]:
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


class EdgeRun:
    """The hooks of one batched pass of ``k`` copies in which receivers' inputs are edited
    (module docstring). ``masks [k, sender, receiver]`` (float) says which edges of each copy
    carry ``alt - ref``; ``positions`` (a ``[pos]`` bool mask) restricts the edits."""

    def __init__(
        self,
        graph: Any,
        parts: list[Layer],
        masks: torch.Tensor,
        alt: torch.Tensor,
        ref: torch.Tensor | None,
        b: int,
        positions: torch.Tensor | None = None,
    ):
        self.graph = graph
        self.index = Index.of(graph)
        self.parts = parts
        self.masks = masks
        self.alt = alt  # [sender, batch, pos, d_model]
        self.ref = ref
        self.k = masks.shape[0]
        self.b = b
        self.pos = None if positions is None else positions.float()
        self.running: dict[int, torch.Tensor] = {}  # sender -> [k, batch, pos, d_model]
        self.resid: dict[str, torch.Tensor] = {}

    # ----------------------------------------------------------------- the edit
    def delta(self, receivers: Sequence[int], n_senders: int) -> torch.Tensor | None:
        """``[k, receiver, batch, pos, d_model]`` added to these receivers' inputs, or None."""
        m = self.masks[:, :n_senders][:, :, receivers]  # [k, sender, receiver]
        used = torch.nonzero(m.sum(dim=(0, 2)) != 0).flatten()
        if used.numel() == 0:
            return None
        m = m[:, used]
        alt = self.alt[used]  # [s, batch, pos, d]
        if self.ref is None:
            run = torch.stack([self.running[int(s)] for s in used])  # [s, k, batch, pos, d]
            diff = alt[:, None] - run
            out = torch.einsum("skbpd,ksr->krbpd", diff, m.to(diff.dtype))
        else:
            diff = alt - self.ref[used]
            out = torch.einsum("sbpd,ksr->krbpd", diff, m.to(diff.dtype))
        if self.pos is not None:
            out = out * self.pos.to(out.device)[:, None]
        return out

    # ----------------------------------------------------------------- hooks
    def hooks(self, start: int = 0) -> list[tuple[str, Callable]]:
        """The pass's hooks; ``start`` is the first block that runs (earlier ones are stubs)."""
        g, ix = self.graph, self.index
        hooks: list[tuple[str, Callable]] = []
        if self.ref is None:

            def store(s: int, x: torch.Tensor) -> None:
                self.running[s] = x.float().view(self.k, self.b, *x.shape[1:])

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
            self.resid[key] = x

        return hook

    def _attn_input(self, l: int, kind: str) -> Callable:
        receivers = getattr(self.index, kind)[l]

        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor | None:
            d = self.delta(receivers, self.index.before_attn[l])
            if d is None:
                return None
            part = self.parts[l]
            pre = self._base(f"pre{l}")  # [k, batch, pos, d_model]
            inp = pre[:, None] + d.to(pre.dtype)  # [k, receiver, batch, pos, d_model]
            normed = _norm(part.ln1, inp)
            new = torch.einsum("krbpd,rde->kbpre", normed, part.W[kind].to(normed.dtype))
            if part.b[kind] is not None:
                new = new + part.b[kind].to(new.dtype)
            return new.reshape(x.shape).to(x.dtype)

        return hook

    def _mlp_input(self, l: int) -> Callable:
        receiver = [self.index.mlp[l]]

        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor | None:
            d = self.delta(receiver, self.index.before_mlp[l])
            if d is None:
                return None
            mid = self._base(f"mid{l}")
            inp = mid + d[:, 0].to(mid.dtype)
            return _norm(self.parts[l].ln2, inp).reshape(x.shape).to(x.dtype)

        return hook

    def _final(self) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor | None:
            d = self.delta([self.index.logits], len(self.graph.senders))
            if d is None:
                return None
            self.resid["final"] = x
            base = self._base("final")
            return (base + d[:, 0].to(base.dtype)).reshape(x.shape).to(x.dtype)

        return hook

    def _base(self, key: str) -> torch.Tensor:
        """The input an edited receiver reads in this pass, ``[k, batch, pos, d_model]``: what
        it would read unedited (upstream edits included), to which its edit is added."""
        x = self.resid[key]
        return x.view(self.k, self.b, *x.shape[1:])


def run(
    model: Any,
    tokens: torch.Tensor,
    edge_run: EdgeRun,
    *,
    start: int = 0,
    kept: dict[int, Any] | None = None,
    final: torch.Tensor | None = None,
    rows: Sequence[int] | None = None,
) -> torch.Tensor:
    """Logits ``[k * batch, pos, d_vocab]`` of one batched pass with ``edge_run``'s edits.

    ``start`` skips blocks ``0 .. start - 1`` (their clean outputs in ``kept``, from
    :func:`interp.analysis._sweep.clean_block_inputs`); ``start == n_layers`` reads only the
    logits' input: ``final`` (the clean residual the final norm reads) plus its edit.
    ``rows`` (the positions a metric reads) limits the unembedding; other rows stay 0.
    """
    from interp.analysis._readout import readout

    k = edge_run.k
    L = model.cfg.n_layers
    n = tokens.shape[1]
    keep = None if rows is None else torch.tensor(sorted({r % n for r in rows}))
    if start >= L:
        d = edge_run.delta([edge_run.index.logits], len(edge_run.graph.senders))
        x = final[None].expand(k, *final.shape)
        if d is not None:
            x = x + d[:, 0].to(x.dtype)
        x = x.reshape(k * final.shape[0], *final.shape[1:])
        if keep is None:
            return readout(model, x)
        part = readout(model, x[:, keep.to(x.device)])
        full = part.new_zeros(part.shape[0], n, part.shape[-1])
        full[:, keep.to(part.device)] = part
        return full
    tokens_k = tokens.repeat(k, 1) if k > 1 else tokens
    hooks = edge_run.hooks(start)
    if callable(getattr(model, "forward_from", None)):
        if start == 0:
            return model.run_with_hooks(tokens_k, fwd_hooks=hooks)
        with model.hooks(fwd_hooks=hooks):
            return model.forward_from(_repeat(kept[start], k), start - 1)
    kwargs = {}
    hf = getattr(model, "interp_hf_model", None)
    if keep is not None and hf is not None:
        import inspect

        if "logits_to_keep" in inspect.signature(hf.forward).parameters:
            kwargs["logits_to_keep"] = keep.to(tokens.device)
    out = _repeat(kept[start], k) if start > 0 else None
    with skipping_blocks(blocks_of(model), start, out):
        logits = model.run_with_hooks(tokens_k, fwd_hooks=hooks, **kwargs)
    if kwargs:
        full = logits.new_zeros(logits.shape[0], n, logits.shape[-1])
        full[:, keep.to(logits.device)] = logits
        logits = full
    return logits


def _repeat(x: Any, k: int) -> Any:
    if k == 1:
        return x
    if isinstance(x, torch.Tensor):
        return x.repeat(k, *([1] * (x.ndim - 1)))
    if isinstance(x, tuple):
        return tuple(_repeat(v, k) for v in x)
    return x


def clean_inputs(model: Any, tokens: torch.Tensor, layers: set[int]) -> tuple[Any, dict]:
    """The clean logits and the inputs of ``layers`` for resumed passes."""
    return clean_block_inputs(model, tokens, {l for l in layers if 0 < l < model.cfg.n_layers})


_EXACT: dict[int, tuple[bool, str]] = {}


def check_exact(model: Any, graph: Any, parts: list[Layer], tokens: torch.Tensor) -> None:
    """Once per model: the per-receiver recomputation reproduces the model's own pass (every
    receiver edited by zero), and a pass editing every edge reproduces the corrupted run.

    Raises:
        InterpError: if this model's receivers cannot be given their own inputs exactly.
    """
    key = id(model)
    if key not in _EXACT:
        _EXACT[key] = _probe(model, graph, parts, tokens)
    ok, why = _EXACT[key]
    if not ok:
        raise InterpError(
            f"circuits need each head's query, key and value recomputed from its own input, and "
            f"on this model that does not reproduce its forward pass ({why})"
        )


def _probe(model, graph, parts, tokens) -> tuple[bool, str]:
    probe = tokens[:1, : min(tokens.shape[1], 6)]
    other = torch.flip(probe, dims=[1])
    try:
        with torch.no_grad():
            clean_out, ref_logits = sender_outputs(model, graph, probe, parts=parts)
            corr_out, corr_logits = sender_outputs(model, graph, other, parts=parts)
            valid = torch.as_tensor(graph.valid, dtype=torch.float32)
            force = torch.ones_like(valid)[None] * valid  # every edge, so every receiver recomputed
            zero = EdgeRun(graph, parts, force, clean_out, clean_out, 1)  # alt - ref = 0
            got = run(model, probe, zero)
            # float32 rounding of a per-head einsum against the model's fused projection,
            # carried through every layer: about 1e-6 of the logits' size (2.7e-5 on SmolLM2)
            tol = 1e-5 * max(1.0, float(ref_logits.abs().max()))
            gap = float((got.float() - ref_logits.float()).abs().max())
            if gap > tol:
                return False, f"recomputed inputs change the logits by {gap:.2e}"
            every = EdgeRun(graph, parts, force, corr_out, None, 1)
            got = run(model, probe, every)
            tol = 1e-3 * max(1.0, float(corr_logits.abs().max()))
            gap = float((got.float() - corr_logits.float()).abs().max())
            if gap > tol:
                return False, f"corrupting every edge differs from the corrupted run by {gap:.2e}"
        return True, ""
    except InterpError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot split this model"
        return False, f"{type(exc).__name__}: {exc}"


def edits_per_pass(graph: Any, tokens: torch.Tensor, d_model: int, running: bool) -> int:
    """Copies per pass: about :data:`interp.analysis._sweep.CPU_TOKENS_PER_PASS` tokens (a
    pass's fixed cost is then paid once for many copies), fewer when the engine's own
    tensors (the senders' outputs per copy when ``running``, each layer's per-receiver
    inputs) would pass 512 MiB."""
    from interp.analysis._sweep import CPU_TOKENS_PER_PASS

    per_copy = len(graph.senders) * tokens.numel() * d_model * 4 if running else 0
    per_copy += max(graph.n_heads, 1) * tokens.numel() * d_model * 4 * 3
    by_tokens = -(-CPU_TOKENS_PER_PASS // tokens.numel())
    return int(max(1, min(32, by_tokens, (512 << 20) // max(1, per_copy))))


def as_tensor(mask: np.ndarray, device: Any = None) -> torch.Tensor:
    return torch.as_tensor(mask.astype(np.float32), device=device)


# ------------------------------------------------------------------ gradients at receivers
@dataclasses.dataclass
class ReceiverGrads:
    """One backward pass's gradients at every receiver's read point (module docstring)."""

    value: float
    at: dict[tuple[str, int], torch.Tensor]  # ("q", l) [batch, pos, head, d_head] ...
    pre: dict[int, torch.Tensor]  # the stream entering each layer
    mid: dict[int, torch.Tensor]  # ... and each MLP
    senders: torch.Tensor | None  # [sender, batch, pos, d_model] of this pass

    def inputs(self, parts: list[Layer], kind: str, layer: int) -> torch.Tensor:
        """The gradient with respect to each receiver's input: ``[receiver, batch, pos,
        d_model]`` for a layer's ``"q"``, ``"k"``, ``"v"`` or ``"mlp"``, or the logits'
        (``"logits"``, layer ignored), carried back through the head's weights and norm."""
        if kind == "logits":
            return self.at[("logits", 0)][None]
        part = parts[layer]
        g = self.at[(kind, layer)]
        if kind == "mlp":
            x, module, g_norm = self.mid[layer][None], part.ln2, g[None]
        else:
            x, module = self.pre[layer], part.ln1
            g_norm = torch.einsum("bphe,hde->hbpd", g, part.W[kind].to(g.dtype))
            x = x[None].expand(g_norm.shape[0], *x.shape)
        if module is None:
            return g_norm
        with torch.enable_grad():
            leaf = x.detach().clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(module(leaf), leaf, grad_outputs=g_norm.to(leaf.dtype))
        return grad


def receiver_gradients(
    model: Any,
    graph: Any,
    parts: list[Layer],
    tokens: torch.Tensor,
    metric: Any,
    *,
    embed: torch.Tensor | None = None,
    keep_senders: bool = False,
) -> ReceiverGrads:
    """One forward and one backward pass of ``metric`` on ``tokens`` (``embed`` replaces the
    token embedding: integrated gradients interpolate it); parameters are not differentiated."""
    from interp.analysis._common import FrozenParams
    from interp.analysis.metrics import scalar
    from interp.protocol import eval_mode

    index = Index.of(graph)
    b, n = tokens.shape
    at: dict[tuple[str, int], torch.Tensor] = {}
    pre: dict[int, torch.Tensor] = {}
    mid: dict[int, torch.Tensor] = {}
    senders = None
    if keep_senders:
        senders = torch.zeros(
            len(graph.senders), b, n, int(model.cfg.d_model), device=tokens.device
        )

    def store(s: int, x: torch.Tensor) -> None:
        if senders is not None:
            senders[s] = x.detach().float()

    def root(x: torch.Tensor, hook: Any) -> torch.Tensor:
        x = embed.to(x.dtype) if embed is not None else x
        store(index.embed, x)
        return x.detach().requires_grad_(True)  # everything downstream is in the graph

    def leaf(key: tuple[str, int]) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor:
            at[key] = x
            return x

        return hook

    def keep(d: dict[int, torch.Tensor], l: int) -> Callable:
        def hook(x: torch.Tensor, hook: Any) -> None:
            d[l] = x.detach()

        return hook

    hooks = [(hook_name("embed"), root)]
    hooks += [h for h in sender_hooks(graph, index, parts, store) if h[0] != hook_name("embed")]
    for l in range(graph.n_layers):
        hooks.append((hook_name("resid_pre", l), keep(pre, l)))
        for kind in ("q", "k", "v"):
            hooks.append((hook_name(kind, l), leaf((kind, l))))
        if index.mlp[l] >= 0:
            hooks.append((hook_name("resid_mid", l), keep(mid, l)))
            hooks.append((f"blocks.{l}.mlp.hook_in", leaf(("mlp", l))))
    hooks.append((hook_name("resid_post", graph.n_layers - 1), leaf(("logits", 0))))
    with eval_mode(model), FrozenParams(model), torch.enable_grad():
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
        value = metric(logits, tokens)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            scalar(value, metric.name)  # raises the explanation
        if not value.requires_grad:
            raise InterpError(
                f"metric {metric.name!r} is not differentiable in the model's output; edge "
                "attribution needs a metric computed from the logits with torch operations"
            )
        keys = list(at)
        grads = torch.autograd.grad(value, [at[k] for k in keys], allow_unused=True)
    out = {
        k: (g if g is not None else torch.zeros_like(at[k])).detach().float()
        for k, g in zip(keys, grads)
    }
    return ReceiverGrads(
        value=scalar(value.detach(), metric.name), at=out, pre=pre, mid=mid, senders=senders
    )


def score_edges(
    graph: Any, parts: list[Layer], grads: ReceiverGrads, diff: torch.Tensor
) -> torch.Tensor:
    """``[sender, receiver]``: ``sum over batch, positions and d_model of diff_s * grad_r``
    for every edge (0 elsewhere); ``diff`` is ``[sender, batch, pos, d_model]``."""
    index = Index.of(graph)
    scores = torch.zeros(len(graph.senders), len(graph.receivers))
    flat = diff.flatten(1)  # [sender, batch * pos * d_model]
    for l in range(graph.n_layers):
        for kind in ("q", "k", "v"):
            rec = getattr(index, kind)[l]
            g = grads.inputs(parts, kind, l).flatten(1)  # [receiver, N]
            n = index.before_attn[l]
            scores[:n, rec] = (flat[:n] @ g.T.to(flat.dtype)).cpu()
        if index.mlp[l] >= 0:
            g = grads.inputs(parts, "mlp", l).flatten(1)
            n = index.before_mlp[l]
            scores[:n, index.mlp[l]] = (flat[:n] @ g.T.to(flat.dtype))[:, 0].cpu()
    g = grads.inputs(parts, "logits", 0).flatten(1)
    scores[:, index.logits] = (flat @ g.T.to(flat.dtype))[:, 0].cpu()
    return scores * torch.as_tensor(graph.valid, dtype=scores.dtype)


# ------------------------------------------------------------------ one preparation for all
ABLATIONS = ("patch", "zero", "mean")


@dataclasses.dataclass
class Prepared:
    """Checked inputs and the senders' outputs every circuit analysis starts from."""

    graph: Any
    parts: list[Layer]
    tokens: torch.Tensor
    corrupted: torch.Tensor | None
    metric: Any
    ablation: str
    clean_out: torch.Tensor  # [sender, batch, pos, d_model]
    alt: torch.Tensor  # the replacement outputs: corrupted, zero or the batch mean
    clean_value: float
    positions: torch.Tensor | None
    clean_inputs: dict[str, torch.Tensor]  # every receiver layer's clean input (input_hooks)


def prepare(
    model: Any,
    tokens: Any,
    *,
    corrupted_tokens: Any,
    metric: Any,
    ablation: str,
    positions: Any,
    cache: Any = None,
) -> Prepared:
    """Check every input (before any forward pass), then run the clean (and corrupted) pass.

    Raises:
        InterpError: for an unknown ablation, corrupted tokens missing for ``"patch"`` or
            given otherwise, tokens of different shapes, a metric that needs an LM head the
            model lacks, positions out of range, a cache of other tokens, or a model whose
            receivers cannot be given their own inputs exactly.
    """
    from interp.analysis._common import check_cache
    from interp.analysis.graph import circuit_graph
    from interp.analysis.metrics import prepare_metric, scalar
    from interp.analysis.patching import check_token_pair
    from interp.protocol import check_model, check_tokens, eval_no_grad, position_mask

    check_model(model)
    if ablation not in ABLATIONS:
        raise InterpError(f"unknown ablation {ablation!r}; choose one of {', '.join(ABLATIONS)}")
    if ablation == "patch":
        if corrupted_tokens is None:
            raise InterpError(
                "ablation='patch' needs corrupted_tokens (or use ablation='zero' or 'mean')"
            )
        tokens, corrupted_tokens = check_token_pair(model, tokens, corrupted_tokens)
    else:
        if corrupted_tokens is not None:
            raise InterpError(f"corrupted_tokens are for ablation='patch', not {ablation!r}")
        tokens = check_tokens(model, tokens)
        if ablation == "mean" and tokens.shape[0] < 2:
            raise InterpError(
                "mean ablation of one sequence replaces each output by itself; pass at least two"
            )
    if metric is None:
        raise InterpError("circuits need a metric, e.g. logit_diff_metric(correct, wrong)")
    m = prepare_metric(model, tokens, metric, None)
    pos = position_mask(tokens.shape[1], positions)
    graph = circuit_graph(model)
    parts = [layer_parts(model, l) for l in range(graph.n_layers)]
    with eval_no_grad(model):
        check_cache(model, tokens, cache)  # a cache of other tokens is refused, as everywhere
        check_exact(model, graph, parts, tokens)
        clean_inputs: dict[str, torch.Tensor] = {}
        clean_out, logits = sender_outputs(
            model, graph, tokens, parts=parts, extra_hooks=input_hooks(graph, clean_inputs)
        )
        clean_value = scalar(m(logits, tokens), m.name)
        if ablation == "patch":
            alt, _ = sender_outputs(model, graph, corrupted_tokens, parts=parts)
        elif ablation == "zero":
            alt = torch.zeros_like(clean_out)
        else:
            alt = clean_out.mean(1, keepdim=True).expand_as(clean_out).contiguous()
    return Prepared(
        graph=graph,
        parts=parts,
        tokens=tokens,
        corrupted=corrupted_tokens,
        metric=m,
        ablation=ablation,
        clean_out=clean_out,
        alt=alt,
        clean_value=clean_value,
        positions=None if pos is None else pos.to(tokens.device),
        clean_inputs=clean_inputs,
    )


def evaluate_masks(
    model: Any,
    prep: Prepared,
    masks: Sequence[np.ndarray],
    *,
    progress: bool = False,
    desc: str = "circuits",
) -> list[float]:
    """The metric with each mask's edges carrying the replacement (``ref`` = running), one
    full pass per group of copies that fits :func:`edits_per_pass`."""
    from tqdm.auto import tqdm

    from interp.analysis.metrics import scalar
    from interp.protocol import eval_no_grad

    k = edits_per_pass(prep.graph, prep.tokens, int(model.cfg.d_model), running=True)
    out: list[float] = []
    b = prep.tokens.shape[0]
    bar = tqdm(total=len(masks), disable=not progress, desc=desc, unit="circuit")
    try:
        with eval_no_grad(model):
            for i in range(0, len(masks), k):
                group = masks[i : i + k]
                stacked = torch.stack([as_tensor(m, prep.tokens.device) for m in group])
                er = EdgeRun(prep.graph, prep.parts, stacked, prep.alt, None, b, prep.positions)
                logits = run(model, prep.tokens, er, rows=prep.metric.rows)
                for c in range(len(group)):
                    part = logits[c * b : (c + 1) * b]
                    out.append(scalar(prep.metric(part, prep.tokens), prep.metric.name))
                bar.update(len(group))
    finally:
        bar.close()
    return out


def patch_edges(
    model: Any,
    prep: Prepared,
    masks: Sequence[np.ndarray],
    *,
    progress: bool = False,
    desc: str = "edges",
) -> list[float]:
    """The metric with each mask's edges moved by ``alt - clean`` (``ref`` = clean), every
    other input clean: each pass resumes at its first edited receiver's layer, copies of one
    starting layer share passes, a pass that edits only the logits reads only them."""
    from tqdm.auto import tqdm

    from interp.analysis.metrics import scalar
    from interp.protocol import eval_no_grad

    graph, b = prep.graph, prep.tokens.shape[0]
    L = graph.n_layers
    starts = []
    for m in masks:
        cols = np.nonzero(m.any(0))[0]
        starts.append(min((graph.receiver_layer[j] for j in cols), default=L))
    k = edits_per_pass(graph, prep.tokens, int(model.cfg.d_model), running=False)
    order = sorted(range(len(masks)), key=lambda i: starts[i])
    chunks: list[list[int]] = []
    for i in order:
        if chunks and starts[chunks[-1][0]] == starts[i] and len(chunks[-1]) < k:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    values: dict[int, float] = {}
    bar = tqdm(total=len(masks), disable=not progress, desc=desc, unit="edit")
    try:
        with eval_no_grad(model):
            kept: dict[int, Any] = {}
            need = {starts[c[0]] for c in chunks}
            if need - {0, L}:
                _, kept = clean_inputs(model, prep.tokens, need)
            final = prep.clean_inputs["final"]
            for chunk in chunks:
                start = starts[chunk[0]]
                stacked = torch.stack([as_tensor(masks[i], prep.tokens.device) for i in chunk])
                er = EdgeRun(
                    graph, prep.parts, stacked, prep.alt, prep.clean_out, b, prep.positions
                )
                logits = run(
                    model, prep.tokens, er, start=start, kept=kept, final=final,
                    rows=prep.metric.rows,
                )  # fmt: skip
                for c, i in enumerate(chunk):
                    part = logits[c * b : (c + 1) * b]
                    values[i] = scalar(prep.metric(part, prep.tokens), prep.metric.name)
                bar.update(len(chunk))
    finally:
        bar.close()
    return [values[i] for i in range(len(masks))]

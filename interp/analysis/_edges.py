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
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from interp.analysis._sweep import (
    blocks_of,
    clean_block_inputs,
    repeat_copies,
    skipping_blocks,
)
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


# Verdicts kept per live module / model (weakly: a new object never inherits an old one's).
_NORM_OK: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def model_eps(model: Any) -> float:
    """The epsilon of the model's norms (``cfg.eps``)."""
    return float(getattr(model.cfg, "eps", 1e-5) or 1e-5)


def _norm(module: Any, x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The norm ``module`` applied to ``x`` (any leading dims): LayerNorm and RMSNorm in
    closed form (checked once per module against the module itself, which is used
    throughout when they differ: another formula, an offset weight)."""
    if module is None:
        return x
    key = (eps, tuple(x.shape[-1:]))
    verdicts = _NORM_OK.setdefault(module, {})
    if key not in verdicts:
        probe = x.reshape(-1, x.shape[-1])[:4]
        mine = _closed_norm(module, probe, eps)
        verdicts[key] = mine is not None and torch.allclose(
            mine, module(probe).float(), atol=1e-5, rtol=1e-5
        )
    if verdicts[key]:
        return _closed_norm(module, x, eps).to(x.dtype)
    return module(x)


def _norm_params(module: Any) -> tuple[Any, Any]:
    found = []
    for names in (("weight", "w"), ("bias", "b")):
        value = None
        for n in names:
            v = getattr(module, n, None)
            if isinstance(v, torch.Tensor):
                value = v.detach().float()
                break
        found.append(value)
    return found[0], found[1]


def _closed_norm(module: Any, x: torch.Tensor, eps: float) -> Any:
    weight, bias = _norm_params(module)
    if weight is None:
        return None
    xf = x.float()
    if "rms" not in type(module).__name__.lower():
        xf = xf - xf.mean(-1, keepdim=True)
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight
    return out if bias is None or "rms" in type(module).__name__.lower() else out + bias


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
    rows: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: every sender's output ``[sender, batch, pos, d_model]`` and the
    logits (on bridges only at ``rows`` when given: the pass is for its senders)."""
    index = Index.of(graph)
    parts = parts or [layer_parts(model, l) for l in range(graph.n_layers)]
    b, n = tokens.shape
    d = int(model.cfg.d_model)
    out = torch.empty(len(graph.senders), b, n, d, device=tokens.device)  # each filled once
    seen: set[int] = set()

    def store(s: int, x: torch.Tensor) -> None:
        out[s] = x.detach().float()
        seen.add(s)

    with torch.no_grad():
        logits = model.run_with_hooks(
            tokens,
            fwd_hooks=[*sender_hooks(graph, index, parts, store), *extra_hooks],
            **keep_rows(model, None if rows is None else [r % n for r in rows]),
        )
    _check_filled(seen, graph)
    return out, logits


def _check_filled(seen: set[int], graph: Any) -> None:
    if len(seen) != len(graph.senders):
        missing = [graph.senders[i] for i in range(len(graph.senders)) if i not in seen][:5]
        raise InterpError(
            f"edge engine: the outputs of {missing} were never seen in the forward pass; this "
            "model's hooks do not fire as its graph says"
        )


def metric_logits(model: Any, tokens: torch.Tensor, rows: Sequence[int] | None) -> torch.Tensor:
    """Plain logits ``[batch, pos, d_vocab]``, on bridges unembedded only at ``rows`` (the
    positions a metric reads; other rows 0), exactly as :func:`run` unembeds them."""
    n = tokens.shape[1]
    keep = None if rows is None else sorted({r % n for r in rows})
    with torch.no_grad():
        logits = model(tokens, **keep_rows(model, keep))
    return _full_rows(logits, keep, n)


def keep_rows(model: Any, rows: Sequence[int] | None) -> dict[str, Any]:
    """``logits_to_keep`` for a bridge whose model takes it (only these rows unembedded)."""
    hf = getattr(model, "interp_hf_model", None)
    if rows is None or hf is None:
        return {}
    import inspect

    if "logits_to_keep" not in inspect.signature(hf.forward).parameters:
        return {}
    return {"logits_to_keep": torch.tensor(sorted(set(rows)), dtype=torch.long)}


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
    carry ``alt - ref``, or ``[k, sender, receiver, pos]`` with one edge per position
    (``positions="each"``); ``positions`` (a ``[pos]`` bool mask) restricts the edits."""

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
        *,
        eps: float,
    ):
        self.eps = eps  # the norms' epsilon (cfg.eps)
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

    # ----------------------------------------------------------------- the edit
    def edited(self, receivers: Sequence[int]) -> torch.Tensor:
        """``[k, receiver]`` bool: which of these receivers any edge of each copy edits."""
        m = self.masks[:, :, receivers]
        return (m.flatten(3).any(-1) if self.by_pos else m).any(1)

    def delta(self, receivers: Sequence[int], n_senders: int) -> torch.Tensor | None:
        """``[k, receiver, batch, pos, d_model]`` added to these receivers' inputs, or None.

        Summed over whichever is fewer: the edited edges, or the unedited ones subtracted
        from the edit of every edge (``sum over all s < n of (alt_s - ref_s)``, one prefix
        sum). A circuit of a few edges then costs a few edges' work per receiver, not the
        whole graph's, and so does editing nearly every edge."""
        m = self.masks[:, :n_senders][:, :, receivers]  # [k, sender, receiver]
        edited = int(torch.count_nonzero(m))
        if edited == 0:
            return None
        if edited <= m.numel() - edited:
            out = self._sum(m)
        else:
            total = self._all_edited(n_senders)  # [k, batch, pos, d_model]
            out = total[:, None].expand(m.shape[0], m.shape[2], *total.shape[1:]).clone()
            rest = self._sum(1.0 - m)
            if rest is not None:
                out -= rest
        if self.pos is not None:
            out = out * self.pos.to(out.device)[:, None]
        return out

    def _sum(self, m: torch.Tensor) -> torch.Tensor | None:
        """``sum_s m[k, s, r] * (alt_s - ref_s)`` over the senders ``m`` covers, as matrix
        products that read each sender's output once. In a running pass the store already
        holds ``alt_s - running_s`` (one product per copy); with a fixed ``ref``, two products
        (no ``alt - ref`` is built)."""
        k, n, R = m.shape[:3]
        used = torch.nonzero(m.flatten(2).sum(dim=(0, 2)) != 0).flatten()
        if used.numel() == 0:
            return None
        few = used.numel() < n // 4  # a few senders: gather them; else read the prefix in place
        if few:
            m = m[:, used]
        if self.by_pos:
            return self._sum_by_position(m, used if few else None, n)
        mt = m.transpose(1, 2)  # [k, receiver, sender]
        if self.ref is None:  # this pass's differences, [sender, k, batch, pos, d_model]
            diff = self.running.index_select(0, used) if few else self.running[:n]
            shape = diff.shape[2:]
            mt = mt.to(diff.dtype)
            out = diff.new_empty((k, R, *shape))
            for c in range(k):
                out[c] = (mt[c] @ diff[:, c].reshape(diff.shape[0], -1)).view(R, *shape)
            return out
        alt = self.alt.index_select(0, used) if few else self.alt[:n]
        ref = self.ref.index_select(0, used) if few else self.ref[:n]
        shape = alt.shape[1:]  # [batch, pos, d_model]
        mt = mt.to(alt.dtype)
        out = (mt.reshape(k * R, -1) @ alt.reshape(alt.shape[0], -1)).view(k, R, *shape)
        out -= (mt.reshape(k * R, -1) @ ref.reshape(ref.shape[0], -1)).view(k, R, *shape)
        return out

    def _sum_by_position(self, m: torch.Tensor, used: torch.Tensor | None, n: int) -> Any:
        """``_sum`` for masks with a position axis: ``sum_s m[k, s, r, p] * (alt_s - ref_s)[p]``,
        one batched product over positions per copy."""
        if self.ref is None:
            diff = self.running.index_select(0, used) if used is not None else self.running[:n]
            mm = m.to(diff.dtype)
            return torch.stack(
                [torch.einsum("srp,sbpd->rbpd", mm[c], diff[:, c]) for c in range(m.shape[0])]
            )
        alt = self.alt.index_select(0, used) if used is not None else self.alt[:n]
        ref = self.ref.index_select(0, used) if used is not None else self.ref[:n]
        mm = m.to(alt.dtype)
        return torch.einsum("ksrp,sbpd->krbpd", mm, alt) - torch.einsum("ksrp,sbpd->krbpd", mm, ref)

    def _all_edited(self, n: int) -> torch.Tensor:
        """``sum over s < n of (alt_s - ref_s)``, ``[k, batch, pos, d_model]``."""
        alt = self._prefix("alt", self.alt, n)
        if self.ref is None:
            if self.n_stored != n:  # senders arrive in graph order; a hook fired out of it
                raise InterpError(f"edge engine: {self.n_stored} senders seen, {n} expected")
            return self.run_total
        return (alt - self._prefix("ref", self.ref, n))[None].expand(self.k, *alt.shape)

    def _prefix(self, key: str, x: torch.Tensor, n: int) -> torch.Tensor:
        if key not in self.cum:
            self.cum[key] = x.cumsum(0)  # [sender, batch, pos, d_model], once per run
        return self.cum[key][n - 1]

    # ----------------------------------------------------------------- hooks
    def hooks(self, start: int = 0) -> list[tuple[str, Callable]]:
        """The pass's hooks; ``start`` is the first block that runs (earlier ones are stubs)."""
        g, ix = self.graph, self.index
        hooks: list[tuple[str, Callable]] = []
        if self.ref is None:

            def store(s: int, x: torch.Tensor) -> None:
                x = x.float().view(self.k, self.b, *x.shape[1:])
                if self.running is None:
                    shape = (len(g.senders), *x.shape)
                    buf = self.cum.get("running buffer")  # reused across passes: no new pages
                    if buf is None or tuple(buf.shape) != shape or buf.dtype != x.dtype:
                        buf = self.cum["running buffer"] = x.new_empty(shape)
                    self.running = buf
                d = self.running[s]
                torch.sub(self.alt[s], x, out=d)  # alt_s - running_s, each copy
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
            inp = pre[:, None] + d.to(pre.dtype)  # [k, receiver, batch, pos, d_model]
            normed = _norm(part.ln1, inp, self.eps)
            new = torch.einsum("krbpd,rde->kbpre", normed, part.W[kind].to(normed.dtype))
            if part.b[kind] is not None:
                new = new + part.b[kind].to(new.dtype)
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
            inp = mid + d[:, 0].to(mid.dtype)
            new = _norm(self.parts[l].ln2, inp, self.eps).to(x.dtype)
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
    tokens_k = repeat_copies(tokens, k)
    hooks = edge_run.hooks(start)
    if callable(getattr(model, "forward_from", None)):
        if start == 0:
            return model.run_with_hooks(tokens_k, fwd_hooks=hooks)
        with model.hooks(fwd_hooks=hooks):
            return model.forward_from(repeat_copies(kept[start], k), start - 1)
    kwargs = {}
    hf = getattr(model, "interp_hf_model", None)
    if keep is not None and hf is not None:
        import inspect

        if "logits_to_keep" in inspect.signature(hf.forward).parameters:
            kwargs["logits_to_keep"] = keep.to(tokens.device)
    out = repeat_copies(kept[start], k) if start > 0 else None
    with skipping_blocks(blocks_of(model), start, out):
        logits = model.run_with_hooks(tokens_k, fwd_hooks=hooks, **kwargs)
    if kwargs:
        full = logits.new_zeros(logits.shape[0], n, logits.shape[-1])
        full[:, keep.to(logits.device)] = logits
        logits = full
    return logits


def clean_inputs(model: Any, tokens: torch.Tensor, layers: set[int]) -> tuple[Any, dict]:
    """The clean logits and the inputs of ``layers`` for resumed passes."""
    return clean_block_inputs(model, tokens, {l for l in layers if 0 < l < model.cfg.n_layers})


_EXACT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_exact(model: Any, graph: Any, parts: list[Layer], tokens: torch.Tensor) -> None:
    """Once per model: the per-receiver recomputation reproduces the model's own pass (every
    receiver edited by zero), and a pass editing every edge reproduces the corrupted run.

    Raises:
        InterpError: if this model's receivers cannot be given their own inputs exactly.
    """
    if model not in _EXACT:
        _EXACT[model] = _probe(model, graph, parts, tokens)
    ok, why = _EXACT[model]
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
            eps = model_eps(model)
            zero = EdgeRun(graph, parts, force, clean_out, clean_out, 1, eps=eps)  # alt - ref = 0
            got = run(model, probe, zero)
            # float32 rounding of a per-head einsum against the model's fused projection,
            # carried through every layer: about 1e-6 of the logits' size (2.7e-5 on SmolLM2)
            tol = 1e-5 * max(1.0, float(ref_logits.abs().max()))
            gap = float((got.float() - ref_logits.float()).abs().max())
            if gap > tol:
                return False, f"recomputed inputs change the logits by {gap:.2e}"
            every = EdgeRun(graph, parts, force, corr_out, None, 1, eps=eps)
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
    pass's fixed cost is then paid once for many copies; the replacement outputs are read
    once for all of them), fewer when the engine's own tensors (the senders' outputs per
    copy when ``running``, each layer's per-receiver inputs) would pass 2 GiB or a quarter
    of the free memory. On a CPU a running pass's store is read back by every receiver
    layer, so copies are packed only while the store of all of them stays under
    :data:`CPU_STORE_BYTES` (measured on SmolLM2, 32 x 15 tokens, a 20-circuit curve:
    33 s one copy a pass, 40 s two, 54 s four)."""
    from interp.analysis._sweep import CPU_TOKENS_PER_PASS
    from interp.protocol import available_memory

    store = len(graph.senders) * tokens.numel() * d_model * 4 if running else 0
    per_copy = store + max(graph.n_heads, 1) * tokens.numel() * d_model * 4 * 3
    by_tokens = -(-CPU_TOKENS_PER_PASS // tokens.numel())
    budget = min(2 << 30, available_memory(tokens.device) // 4)
    k = max(1, min(32, by_tokens, budget // max(1, per_copy)))
    if running and tokens.device.type == "cpu":
        k = max(1, min(k, CPU_STORE_BYTES // max(1, store)))
    return int(k)


CPU_STORE_BYTES = 64 << 20  # a running pass's sender store packed on a CPU, all copies


def as_tensor(mask: np.ndarray, device: Any = None) -> torch.Tensor:
    return torch.as_tensor(mask.astype(np.float32), device=device)


# ------------------------------------------------------------------ gradients at receivers
_VJP_OK: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def norm_vjp(module: Any, x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    """``[receiver, batch, pos, d_model]``: ``g`` (the gradient at the norm's output, one per
    receiver) carried back through the norm at input ``x`` (``[batch, pos, d_model]``).

    LayerNorm and RMSNorm have closed-form vector-Jacobian products (the mean and scale of
    ``x`` are shared by every receiver, so this costs a few elementwise passes); each
    module is checked once against autograd through the module itself, and a norm that
    does not match (another formula, an offset weight) uses autograd throughout."""
    if module is None:
        return g
    verdicts = _VJP_OK.setdefault(module, {})
    if eps not in verdicts:
        slice_x, slice_g = x[:1, :2], g[:2, :1, :2]
        want = _autograd_vjp(module, slice_x, slice_g)
        got = _closed_vjp(module, slice_x, slice_g, eps)
        verdicts[eps] = got is not None and torch.allclose(got, want, atol=1e-6, rtol=1e-4)
    if verdicts[eps]:
        return _closed_vjp(module, x, g, eps)
    return _autograd_vjp(module, x, g)


def _autograd_vjp(module: Any, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():
        leaf = x.detach()[None].expand(g.shape[0], *x.shape).clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(module(leaf), leaf, grad_outputs=g.to(leaf.dtype))
    return grad.float()


def _closed_vjp(module: Any, x: torch.Tensor, g: torch.Tensor, eps: float) -> Any:
    weight = None
    for name in ("weight", "w"):
        v = getattr(module, name, None)
        if isinstance(v, torch.Tensor):
            weight = v.detach().float()
            break
    if weight is None:
        return None
    centred = "rms" not in type(module).__name__.lower()
    xf = x.float()
    if centred:
        xf = xf - xf.mean(-1, keepdim=True)
    scale = (xf.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # [batch, pos, 1]
    xhat = xf / scale
    wg = g.float() * weight  # [receiver, batch, pos, d]
    out = wg - xhat * (wg * xhat).mean(-1, keepdim=True)
    if centred:
        out = out - wg.mean(-1, keepdim=True)
    return out / scale


@dataclasses.dataclass
class ReceiverGrads:
    """One backward pass's gradients at every receiver's read point (module docstring)."""

    value: float
    at: dict[tuple[str, int], torch.Tensor]  # ("q", l) [batch, pos, head, d_head] ...
    pre: dict[int, torch.Tensor]  # the stream entering each layer
    mid: dict[int, torch.Tensor]  # ... and each MLP
    senders: torch.Tensor | None  # [sender, batch, pos, d_model] of this pass
    eps: float = 1e-5  # the norms' epsilon (cfg.eps)

    def attention_inputs(self, parts: list[Layer], layer: int) -> torch.Tensor:
        """``[q heads + k heads + v heads, batch, pos, d_model]``: the gradient with respect to
        each of a layer's attention receivers' inputs, through the norm in one autograd call."""
        part = parts[layer]
        gs = [self.at[(k, layer)] for k in ("q", "k", "v")]  # [batch, pos, head, d_head]
        b, p = gs[0].shape[:2]
        d = part.W["q"].shape[1]
        g_norm = torch.empty(sum(g.shape[2] for g in gs), b, p, d, device=gs[0].device)
        lo = 0
        for k, g in zip(("q", "k", "v"), gs):  # each head's g @ W^T, written in place
            h, e = g.shape[2], g.shape[3]
            a = g.float().permute(2, 0, 1, 3).reshape(h, b * p, e)
            w = part.W[k].float().transpose(1, 2)  # [head, d_head, d_model]
            torch.bmm(a, w, out=g_norm[lo : lo + h].view(h, b * p, d))
            lo += h
        return norm_vjp(part.ln1, self.pre[layer], g_norm, self.eps)

    def inputs(self, parts: list[Layer], kind: str, layer: int) -> torch.Tensor:
        """The gradient with respect to each receiver's input: ``[receiver, batch, pos,
        d_model]`` for a layer's ``"q"``, ``"k"``, ``"v"`` or ``"mlp"``, or the logits'
        (``"logits"``, layer ignored), carried back through the head's weights and norm."""
        if kind == "logits":
            return self.at[("logits", 0)][None]
        part = parts[layer]
        g = self.at[(kind, layer)]
        if kind == "mlp":
            return norm_vjp(part.ln2, self.mid[layer], g[None], self.eps)
        g_norm = torch.einsum("bphe,hde->hbpd", g, part.W[kind].to(g.dtype))
        return norm_vjp(part.ln1, self.pre[layer], g_norm, self.eps)


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
    seen: set[int] = set()
    if keep_senders:  # each filled once by the pass (checked)
        senders = torch.empty(
            len(graph.senders), b, n, int(model.cfg.d_model), device=tokens.device
        )

    def store(s: int, x: torch.Tensor) -> None:
        if senders is not None:
            senders[s] = x.detach().float()
            seen.add(s)

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
    kwargs = {} if metric.rows is None else keep_rows(model, [r % n for r in metric.rows])
    with eval_mode(model), FrozenParams(model), torch.enable_grad():
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks, **kwargs)
        if kwargs:  # only the metric's rows were unembedded: put them where it reads them
            full = logits.new_zeros(logits.shape[0], n, logits.shape[-1])
            full[:, kwargs["logits_to_keep"].to(logits.device)] = logits
            logits = full
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
    if senders is not None:
        _check_filled(seen, graph)
    out = {
        k: (g if g is not None else torch.zeros_like(at[k])).detach().float()
        for k, g in zip(keys, grads)
    }
    return ReceiverGrads(
        value=scalar(value.detach(), metric.name),
        at=out,
        pre=pre,
        mid=mid,
        senders=senders,
        eps=model_eps(model),
    )


def receiver_gradient_matrix(
    graph: Any,
    parts: list[Layer],
    grads: ReceiverGrads,
    out: torch.Tensor | None = None,
    weight: float = 1.0,
) -> torch.Tensor:
    """``[receiver, batch * pos * d_model]``: every receiver's gradient, flattened, times
    ``weight``; added into ``out`` when given (integrated gradients sum their steps in place
    and score once: the score is linear in the gradient)."""
    index = Index.of(graph)
    g_logits = grads.inputs(parts, "logits", 0)
    fresh = out is None
    if out is None:  # every row is written below
        out = torch.empty(len(graph.receivers), g_logits.numel(), device=g_logits.device)

    def put(rows: list[int], g: torch.Tensor) -> None:
        if rows != list(range(rows[0], rows[0] + len(rows))):  # not one block of rows
            raise InterpError("edge engine: a layer's receivers are not contiguous")
        view = out[rows[0] : rows[0] + len(rows)]  # in place: no gathered copy
        g = g.reshape(view.shape).to(out.device, torch.float32)
        if fresh:
            view.copy_(g)
            if weight != 1.0:
                view.mul_(weight)
        else:
            view.add_(g, alpha=weight)

    for l in range(graph.n_layers):
        put(index.q[l] + index.k[l] + index.v[l], grads.attention_inputs(parts, l))
        if index.mlp[l] >= 0:
            put([index.mlp[l]], grads.inputs(parts, "mlp", l))
    put([index.logits], g_logits)
    return out


def score_edges(
    graph: Any, G: torch.Tensor, diff: torch.Tensor, *, each: bool = False
) -> torch.Tensor:
    """``[sender, receiver]``: ``sum over batch, positions and d_model of diff_s * grad_r``
    for every edge (0 elsewhere); ``diff`` is ``[sender, batch, pos, d_model]`` and ``G``
    the gathered gradients (:func:`receiver_gradient_matrix`).

    Every receiver's gradient is gathered first and multiplied by every sender's
    difference in one matrix product: done layer by layer the products are bound by
    memory (each reads every sender's difference again), not by arithmetic."""
    if each:  # [sender, receiver, pos]: the same sum, each position on its own
        S, b, P, d = diff.shape
        Gp = G.to(diff.device).view(G.shape[0], b, P, d)
        scores = torch.stack(
            [
                diff[:, :, p].reshape(S, -1).float() @ Gp[:, :, p].reshape(G.shape[0], -1).T
                for p in range(P)
            ],
            -1,
        ).cpu()
        return scores * torch.as_tensor(graph.valid, dtype=scores.dtype)[..., None]
    scores = (diff.flatten(1).float() @ G.to(diff.device).T).cpu()
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
    clean_out: torch.Tensor | None  # [sender, batch, pos, d_model]
    alt: torch.Tensor | None  # the replacement outputs: corrupted, zero or the batch mean
    clean_value: float
    positions: torch.Tensor | None
    clean_inputs: dict[str, torch.Tensor]  # every receiver layer's clean input (input_hooks)
    corrupted_value: float | None = None  # the metric of the corrupted run (ablation="patch")
    each: bool = False  # positions="each": one edge per position (masks [sender, receiver, pos])
    cum: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # shared prefix sums


def prepare(
    model: Any,
    tokens: Any,
    *,
    corrupted_tokens: Any,
    metric: Any,
    ablation: str,
    positions: Any,
    cache: Any = None,
    clean_pass: bool | Literal["metric"] = True,
    each_for: str | None = None,
) -> Prepared:
    """Check every input (before any forward pass), then run the clean (and corrupted) pass.

    ``positions="each"`` (edges per position) is accepted only when ``each_for`` names the
    calling function (those that read edges per position).

    ``clean_pass=False`` leaves the clean senders' outputs to the caller (edge attribution
    takes them from its own clean forward pass): ``clean_out`` is None, and so is ``alt``
    for zero and mean ablation (:func:`replacement` makes it). ``clean_pass="metric"``
    (circuit evaluation with a corrupted prompt, which reads only this pass's outputs) runs
    a plain clean forward for the clean metric. With ``ablation="patch"`` the corrupted
    pass also gives ``corrupted_value``: every edge replaced is the corrupted run.

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
    each = isinstance(positions, str) and positions == "each"
    if each and each_for is None:
        raise InterpError(
            "positions='each' (one edge per position) is for attribute_edges and "
            "evaluate_circuit; here pass None or a list of positions"
        )
    pos = None if each else position_mask(tokens.shape[1], positions)
    graph = circuit_graph(model)
    parts = [layer_parts(model, l) for l in range(graph.n_layers)]
    with eval_no_grad(model):
        check_cache(model, tokens, cache)  # a cache of other tokens is refused, as everywhere
        check_exact(model, graph, parts, tokens)
        clean_inputs: dict[str, torch.Tensor] = {}
        clean_out, clean_value = None, float("nan")
        if clean_pass == "metric" and ablation == "patch":
            clean_value = scalar(m(metric_logits(model, tokens, m.rows), tokens), m.name)
        elif clean_pass:
            clean_out, logits = sender_outputs(
                model,
                graph,
                tokens,
                parts=parts,
                extra_hooks=input_hooks(graph, clean_inputs),
                rows=m.rows,
            )
            clean_value = scalar(m(_full_rows(logits, m.rows, tokens.shape[1]), tokens), m.name)
        alt, corrupted_value = None, None
        if ablation == "patch":
            alt, logits = sender_outputs(model, graph, corrupted_tokens, parts=parts, rows=m.rows)
            corrupted_value = scalar(m(_full_rows(logits, m.rows, tokens.shape[1]), tokens), m.name)
        elif clean_out is not None:
            alt = replacement(ablation, clean_out)
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
        corrupted_value=corrupted_value,
        each=each,
    )


def _full_rows(logits: torch.Tensor, rows: Sequence[int] | None, n: int) -> torch.Tensor:
    """Logits of only some rows (a bridge's ``logits_to_keep``) back at their positions."""
    if rows is None or logits.shape[1] == n:
        return logits
    keep = torch.tensor(sorted({r % n for r in rows}), device=logits.device)
    full = logits.new_zeros(logits.shape[0], n, logits.shape[-1])
    full[:, keep] = logits
    return full


def replacement(ablation: str, clean_out: torch.Tensor) -> torch.Tensor:
    """The senders' replacement outputs for zero or mean ablation (of the clean outputs)."""
    if ablation == "zero":
        return torch.zeros_like(clean_out)
    return clean_out.mean(1, keepdim=True).expand_as(clean_out).contiguous()


def _prepared_run(
    model: Any, prep: Prepared, masks: torch.Tensor, *, ref: torch.Tensor | None
) -> EdgeRun:
    """The :class:`EdgeRun` of a prepared task for stacked ``masks``: ``ref=None`` edits
    against each pass's own sender outputs (circuits), ``prep.clean_out`` against the clean
    ones (edge patches)."""
    return EdgeRun(
        prep.graph,
        prep.parts,
        masks,
        prep.alt,
        ref,
        prep.tokens.shape[0],
        prep.positions,
        prep.cum,
        eps=model_eps(model),
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
                er = _prepared_run(model, prep, stacked, ref=None)
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
        cols = np.nonzero(m.any(0).reshape(m.shape[1], -1).any(1))[0]
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
                er = _prepared_run(model, prep, stacked, ref=prep.clean_out)
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

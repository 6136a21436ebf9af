"""Gradients at the engine's read points, for edge and head attribution, from one backward pass.

Edge attribution needs the metric's gradient with respect to every receiver's
own input. One ordinary backward pass gives the gradients at ``hook_q`` /
``hook_k`` / ``hook_v``, the MLP's input and the final residual stream;
:class:`ReceiverGrads` carries them back through each head's weights and its
layer's norm (:meth:`interp.runtime.Norm.vjp`) to the residual stream the
receiver reads, so nothing is recomputed in the forward pass.
:func:`score_edges` multiplies every sender's output difference by every
receiver's gradient in a few large products, blocks of receivers each reading
only the senders before them; :func:`edge_estimates` is edge attribution's
(EAP, EAP-IG) chunk of these passes.

Head attribution (:func:`head_gradients`) takes ``dM/dz`` at each head's
``hook_z`` (and ``dM/dA`` at attention patterns for AtP*'s QK fix) from the
same kind of pass; :func:`pattern_at` computes one layer's pattern for a given
residual stream, resumed at that layer and stopped at its pattern.

Example:
    >>> import torch
    >>> from interp.core.metrics import logit_diff_metric
    >>> from interp.models import load_model
    >>> from interp.engine.edges.run import layer_parts
    >>> from interp.engine.edges.graph import build_graph
    >>> from interp.runtime import runtime_of
    >>> model = load_model("induction-2l")
    >>> rt, graph = runtime_of(model), build_graph(model)
    >>> g = receiver_gradients(rt, graph, layer_parts(rt), torch.tensor([[0, 5, 6, 5]]),
    ...                        logit_diff_metric(6, 0))
    >>> tuple(receiver_gradient_matrix(graph, layer_parts(rt), g).shape)  # [receiver, b*p*d]
    (13, 512)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.metrics import differentiable, scalar
from interp.core.protocol import HookedModel
from interp.engine.cache import StopForward
from interp.engine.edges.graph import Index
from interp.engine.edges.run import check_filled, replacement_outputs, sender_hooks
from interp.runtime import Layer, Norm, Runtime


class FrozenParams:
    """Parameters stop requiring grad for the duration (only activation gradients are taken)."""

    def __init__(self, model: HookedModel):
        self.params = (
            [p for p in model.parameters() if p.requires_grad]
            if hasattr(model, "parameters")
            else []
        )

    def __enter__(self) -> None:
        for p in self.params:
            p.requires_grad_(False)

    def __exit__(self, *exc: Any) -> None:
        for p in self.params:
            p.requires_grad_(True)


def _vjp(
    norm: Norm | None, x: torch.Tensor, g: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    if norm is None:
        return g if out is None or out is g else out.copy_(g)
    return norm.vjp(x, g, out=out)


@dataclasses.dataclass
class ReceiverGrads:
    """One backward pass's gradients at every receiver's read point (module docstring)."""

    value: float
    at: dict[tuple[str, int], torch.Tensor]  # ("q", l) [batch, pos, head, d_head] ...
    pre: dict[int, torch.Tensor]  # the stream entering each layer
    mid: dict[int, torch.Tensor]  # ... and each MLP
    senders: torch.Tensor | None  # [sender, batch, pos, d_model] of this pass

    def attention_inputs(
        self, parts: list[Layer], layer: int, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[q heads + k heads + v heads, batch, pos, d_model]``: the gradient with respect to
        each of a layer's attention receivers' inputs, through the norm in place, written into
        ``out`` when given (float32, that shape: the rows of the gradient matrix)."""
        part = parts[layer]
        gs = [self.at[(k, layer)] for k in ("q", "k", "v")]  # [batch, pos, head, d_head]
        b, p = gs[0].shape[:2]
        d = part.W["q"].shape[1]
        g_norm = out
        if g_norm is None:
            g_norm = torch.empty(sum(g.shape[2] for g in gs), b, p, d, device=gs[0].device)
        lo = 0
        for k, g in zip(("q", "k", "v"), gs):  # each head's g @ W^T, written in place
            h, e = g.shape[2], g.shape[3]
            a = g.float().permute(2, 0, 1, 3).reshape(h, b * p, e)
            w = part.W[k].float().transpose(1, 2)  # [head, d_head, d_model]
            torch.bmm(a, w, out=g_norm[lo : lo + h].view(h, b * p, d))
            lo += h
        return _vjp(part.ln1, self.pre[layer], g_norm, out=g_norm)

    def inputs(self, parts: list[Layer], kind: str, layer: int) -> torch.Tensor:
        """The gradient with respect to each receiver's input: ``[receiver, batch, pos,
        d_model]`` for a layer's ``"q"``, ``"k"``, ``"v"`` or ``"mlp"``, or the logits'
        (``"logits"``, layer ignored), carried back through the head's weights and norm."""
        if kind == "logits":
            return self.at[("logits", 0)][None]
        part = parts[layer]
        g = self.at[(kind, layer)]
        if kind == "mlp":
            return _vjp(part.ln2, self.mid[layer], g[None])
        g_norm = torch.einsum("bphe,hde->hbpd", g, part.W[kind].to(g.dtype))
        return _vjp(part.ln1, self.pre[layer], g_norm)


def receiver_gradients(
    rt: Runtime,
    graph: Any,
    parts: list[Layer],
    tokens: torch.Tensor,
    metric: Any,
    *,
    embed: torch.Tensor | None = None,
    keep_senders: bool = False,
    score_tokens: torch.Tensor | None = None,
) -> ReceiverGrads:
    """One forward and one backward pass of ``metric`` on ``tokens`` (``embed`` replaces the
    token embedding: integrated gradients interpolate it; ``score_tokens``, default
    ``tokens``, are what the metric is scored against); parameters are not differentiated.
    The model is in the caller's eval mode (:func:`interp.core.protocol.eval_no_grad`, entered
    once around the whole run; the gradients are enabled here).

    Raises:
        InterpError: for a metric that is not one differentiable number.
    """
    index = Index.of(graph)
    frozen = FrozenParams(rt.model)  # only activation gradients are taken
    b, n = tokens.shape
    at: dict[tuple[str, int], torch.Tensor] = {}
    pre: dict[int, torch.Tensor] = {}
    mid: dict[int, torch.Tensor] = {}
    senders = None
    seen: set[int] = set()
    if keep_senders:  # each filled once by the pass (checked)
        senders = torch.empty(len(graph.senders), b, n, rt.d_model, device=tokens.device)

    def store(s: int, x: torch.Tensor) -> None:
        if senders is not None:
            senders[s] = x.detach().float()
            seen.add(s)

    def root(x: torch.Tensor, hook: Any) -> torch.Tensor:
        x = embed.to(x.device, x.dtype) if embed is not None else x
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
    with frozen, torch.enable_grad():
        logits = rt.run(tokens, hooks=hooks, rows=metric.rows)
        value = metric(logits, tokens if score_tokens is None else score_tokens)
        differentiable(value, metric.name, "edge attribution (EAP, EAP-IG)")
        keys = list(at)
        grads = torch.autograd.grad(value, [at[k] for k in keys], allow_unused=True)
    number = scalar(value.detach(), metric.name)
    if senders is not None:
        check_filled(seen, graph)
    out = {
        k: (g if g is not None else torch.zeros_like(at[k])).detach().float()
        for k, g in zip(keys, grads)
    }
    return ReceiverGrads(
        value=number,
        at=out,
        pre=pre,
        mid=mid,
        senders=senders,
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
        rows = index.q[l] + index.k[l] + index.v[l]
        if fresh and rows == list(range(rows[0], rows[0] + len(rows))):
            view = out[rows[0] : rows[0] + len(rows)]  # written in place: no layer-sized copy
            grads.attention_inputs(parts, l, out=view.view(len(rows), *g_logits.shape[1:]))
            if weight != 1.0:
                view.mul_(weight)
        else:
            put(rows, grads.attention_inputs(parts, l))
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

    Every receiver's gradient is gathered first and multiplied by the senders'
    differences in a few large products (:func:`_triangle_blocks`: each block of receivers
    reads only the senders before it): done receiver layer by layer the products would be
    bound by memory (each reads the senders' differences again), not by arithmetic."""
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
    valid = torch.as_tensor(graph.valid)
    flat, G = diff.flatten(1).float(), G.to(diff.device)
    scores = torch.zeros(valid.shape, dtype=torch.float32, device=diff.device)
    for lo, hi, n in _triangle_blocks(valid):  # each block's product reads only its senders
        scores[:n, lo:hi] = flat[:n] @ G[lo:hi].T
    return scores.cpu() * valid.to(torch.float32)


def edge_estimates(prep: Any, method: str, steps: int) -> torch.Tensor:
    """EAP or EAP-IG scores ``[sender, receiver]`` of a begun edge task
    (:func:`interp.engine.edges.task.begin_chunk` without its base pass: ``prep``), for
    :func:`interp.analysis.circuits.edge_attribution.attribute_edges`. The base pass (EAP's
    only one; EAP-IG's last point, all the way to the base embeddings) also gives the base
    senders' outputs,
    among them the base run's token embeddings (the ``embed`` sender's); the source run's are
    its ``embed`` sender's from the first passes (EAP-IG needs ``ablation="patch"``).

    Args:
        prep: The begun task (its ``alt`` holds the source run's senders' outputs, with
            ``ablation="patch"``).
        method: ``"eap"`` or ``"eap-ig"``.
        steps: EAP-IG's interpolation steps.

    Returns:
        ``[sender, receiver]`` scores (``[sender, receiver, pos]`` per position), on the CPU.

    Raises:
        InterpError: for a metric that is not one differentiable number.
    """
    alphas = [1.0] if method == "eap" else [k / steps for k in range(steps, 0, -1)]
    G, diff, ends = None, None, None  # ends: the token embeddings of the base and source runs
    for alpha in alphas:  # the base point first
        embed = None if alpha == 1.0 else ends[1] + alpha * (ends[0] - ends[1])
        grads = receiver_gradients(
            prep.rt, prep.graph, prep.parts, prep.base, prep.metric, embed=embed,
            keep_senders=diff is None, score_tokens=prep.tokens,
        )  # fmt: skip
        prep.cost.forward()
        prep.cost.backward()
        if diff is None:  # alpha = 1: the base run
            prep.base_out, prep.base_value = grads.senders, grads.value
            grads.senders = None
            if len(alphas) > 1:  # the embed sender's outputs: each run's token embeddings
                e = prep.graph.senders.index("embed")
                ends = prep.base_out[e].clone(), prep.alt[e].clone()
            if prep.ablation == "zero":  # no replacement to hold: the difference is -base
                diff = prep.base_out.neg_()
            else:
                if prep.alt is None:
                    prep.alt = replacement_outputs(prep, prep.base_out)
                diff = prep.alt.sub_(prep.base_out)  # in place: the outputs are not needed after
            prep.alt = prep.base_out = None  # [sender, batch, pos, d_model] held once, as diff
            if prep.positions is not None:
                diff.mul_(prep.positions.float()[None, None, :, None])
        # the mean gradient over the steps, then one product with the senders' differences
        G = receiver_gradient_matrix(prep.graph, prep.parts, grads, G, 1.0 / len(alphas))
        del grads
    return score_edges(prep.graph, G, diff, each=prep.each)


BLOCK_ROWS = 96  # receivers per product: fewer and the products are bound by memory


def _triangle_blocks(valid: torch.Tensor) -> list[tuple[int, int, int]]:
    """``(first receiver, stop, senders)`` blocks of receivers, each block multiplied by
    the prefix of senders its receivers read. A receiver reads only earlier senders, so
    with receivers in graph order the prefixes grow and the products skip the half of the
    ``[sender, receiver]`` matrix no edge is in; blocks of at least :data:`BLOCK_ROWS`
    receivers keep each product bound by arithmetic. Receivers whose prefixes do not grow
    (not graph order) are multiplied by every sender in one block."""
    S, R = valid.shape
    rows = torch.arange(1, S + 1)[:, None].expand(S, R)
    n = torch.where(valid, rows, 0).amax(0).tolist()  # each receiver's prefix of senders
    if any(b < a for a, b in zip(n, n[1:])):
        return [(0, R, S)]
    blocks, lo = [], 0
    for j in range(R):
        if j + 1 == R or (j + 1 - lo >= BLOCK_ROWS and n[j + 1] != n[j]):
            blocks.append((lo, j + 1, max(1, n[j])))
            lo = j + 1
    return blocks


def head_gradients(
    rt: Runtime,
    tokens: torch.Tensor,
    metric: Any,
    layers: Sequence[int],
    pattern_layers: Sequence[int] = (),
    *,
    score_tokens: torch.Tensor | None = None,
) -> tuple[float, dict[int, torch.Tensor], dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """One forward and one backward pass: the metric, ``z`` and ``dM/dz`` per layer
    (``[batch, pos, head, d_head]``), and ``dM/dA`` of the attention patterns of
    ``pattern_layers`` (``score_tokens``, default ``tokens``: what the metric is scored on).

    Raises:
        InterpError: for a metric that is not one differentiable number.
    """
    from interp.core.protocol import eval_mode

    zs: dict[int, torch.Tensor] = {}
    pats: dict[int, torch.Tensor] = {}

    def root(x: torch.Tensor) -> torch.Tensor:
        # The first hooked activation becomes a leaf that requires grad (parameters are
        # frozen); later ones depend on it, so each of them is in the graph.
        return x if x.requires_grad else x.detach().requires_grad_(True)

    def keep_z(z: torch.Tensor, hook: Any) -> torch.Tensor:
        zs[int(hook.name.split(".")[1])] = z = root(z)
        return z

    def keep_pattern(p: torch.Tensor, hook: Any) -> torch.Tensor:
        pats[int(hook.name.split(".")[1])] = p = root(p)
        return p

    layers, pattern_layers = list(layers), list(pattern_layers)
    hooks = [(hook_name("z", l), keep_z) for l in layers]
    hooks += [(hook_name("pattern", j), keep_pattern) for j in pattern_layers]
    with eval_mode(rt.model), FrozenParams(rt.model), torch.enable_grad():
        logits = rt.run(tokens, hooks=hooks, rows=getattr(metric, "rows", None))
        value = metric(logits, tokens if score_tokens is None else score_tokens)
        differentiable(value, metric.name, "attribution patching")
        inputs = [zs[l] for l in layers] + [pats[j] for j in pattern_layers]
        grads = torch.autograd.grad(value, inputs, allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, inputs)]
    g_z = dict(zip(layers, grads[: len(layers)]))
    g_p = dict(zip(pattern_layers, grads[len(layers) :]))
    return scalar(value.detach(), metric.name), {l: zs[l].detach() for l in layers}, g_z, g_p


def pattern_at(rt: Runtime, tokens: torch.Tensor, layer: int, resid: Any) -> torch.Tensor:
    """Layer ``layer``'s attention pattern ``[batch, head, q, k]`` for the residual ``resid``
    entering it, computed by the model itself (its normalisation, rotary embeddings,
    grouped keys) with every earlier block skipped and the pass stopped at the pattern.

    Raises:
        InterpError: if the layer's ``hook_pattern`` never fires.
    """

    def stop(p: torch.Tensor, hook: Any) -> None:
        raise StopForward(p)

    try:
        rt.run(tokens, hooks=[(hook_name("pattern", layer), stop)], start=layer, state=resid)
    except StopForward as done:
        return done.value
    raise InterpError(f"layer {layer}'s hook_pattern never fired")

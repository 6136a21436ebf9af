"""What the head atlas reads from forward passes of its probe, and the one function that runs them.

:func:`probe_pass` is the only place the atlas runs the model: every pass
goes through it, with the probe's tokens and a reader called once per layer
with that layer's activations (``hook_pattern`` and the head input: ``ln1``'s
output). Readers only *add* sums and counts (:class:`Sums`), so a probe split
into chunks of sequences gives the same means.

:class:`PatternReader` measures, per head, from the model's own patterns:
the stripe scores (interp convention), attention on the first token, entropy
and distance; and from each layer's queries and keys, recomputed from its
head input exactly as the layer computes them (QK-norms, rotation, scale,
soft cap, window; checked against the model's own patterns): each rotary
band's mean absolute share of the scores, and the same pattern measures for
the *control* heads, whose ``W_Q`` and ``W_K`` entries are shuffled (seeded;
:func:`shuffled`).

Example:
    >>> s = Sums()
    >>> s.add("sink", torch.tensor([1.0, 3.0]), 2)
    >>> s.mean("sink").tolist()
    [0.5, 1.5]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from interp.analysis.heads.stripes import STRIPES, stripe_mask
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.precision import worst
from interp.core.protocol import HookedModel
from interp.engine.batching import Cost
from interp.engine.cache import check_cache, run_until, with_batch
from interp.engine.cost import Flops, cache_pass_work
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry

PATTERN_RTOL = 1e-3  # recomputed patterns vs the model's: refused above this (float32 models)
MASKED = float("-inf")
Reader = Callable[[int, torch.Tensor, dict[str, torch.Tensor]], None]


def layer_hooks(model: HookedModel, layer: int) -> list[str]:
    """The hooks the atlas reads in ``layer``: its pattern and its heads' input."""
    return [hook_name("pattern", layer), runtime_of(model).head_input_hook(layer)]


def probe_pass(
    model: HookedModel,
    tokens: torch.Tensor,
    read: Reader,
    *,
    names: Callable[[int], list[str]],
    cost: Cost,
    cache: Any = None,
) -> None:
    """Run ``tokens`` once (or read ``cache``, checked against them), calling
    ``read(layer, tokens, acts)`` with each layer's activations ``names(layer)`` as soon as
    they exist; the pass stops after the last layer's. ``cost`` counts the work."""
    n_layers = int(model.cfg.n_layers)
    per_layer = {l: names(l) for l in range(n_layers)}
    checked = check_cache(model, tokens, cache, needs=[n for v in per_layer.values() for n in v])
    if checked is not None:
        for l, wanted in per_layer.items():
            read(l, tokens, {n: with_batch(checked[n], tokens) for n in wanted})
        cost.add(checked.work)
        return
    held: dict[int, dict[str, torch.Tensor]] = {l: {} for l in per_layer}

    def keeper(layer: int, name: str) -> Callable:
        def keep(x: torch.Tensor, hook: Any) -> None:
            held[layer][name] = x.detach()
            if len(held[layer]) == len(per_layer[layer]):
                read(layer, tokens, held.pop(layer))

        return keep

    hooks = [(n, keeper(l, n)) for l, wanted in per_layer.items() for n in wanted]
    last = max(hooks, key=lambda h: (int(h[0].split(".")[1]), "pattern" in h[0]))[0]
    run_until(model, tokens, hooks, last)
    cost.add(cache_pass_work(model, tokens.shape[1], [last]))  # stopped at its last hook
    if held:
        raise InterpError(f"the model never gave layer {min(held)}'s {per_layer[min(held)]}")


def reader_work(model: HookedModel, pos: int, draws: int) -> float:
    """The forward-equivalents (FLOPs over one plain pass, :mod:`interp.engine.cost`) of
    :class:`PatternReader` on a prompt of ``pos`` tokens: every layer's queries and keys
    recomputed, with ``draws`` shuffles of each head's (the control), their scores, and on
    a rotary model each band's share of the scores."""
    rt, fl = runtime_of(model), Flops.of(model)
    flops = 0.0
    for layer in range(fl.n_layers):
        W = rt.layer(layer).W
        h, d, dh = W["q"].shape
        kv = W["k"].shape[0]
        copies = 1 + draws  # the real heads, then the control's shuffles
        flops += copies * (2.0 * pos * d * dh * (h + kv) + 2.0 * h * pos * pos * dh)
        if rt.qk_geometry(layer).rotary is not None:  # [query, 2] @ [2, key] per pair
            flops += 2.0 * h * pos * pos * dh
    return flops / fl.plain(pos)


class Sums:
    """Per-head sums and their counts, added chunk by chunk; ``mean`` divides at the end."""

    def __init__(self) -> None:
        self.total: dict[str, torch.Tensor] = {}
        self.count: dict[str, float] = {}

    def add(self, key: str, value: torch.Tensor, count: float) -> None:
        v = value.detach().double().cpu()
        self.total[key] = self.total[key] + v if key in self.total else v
        self.count[key] = self.count.get(key, 0.0) + float(count)

    def mean(self, key: str) -> torch.Tensor:
        return self.total[key] / max(self.count[key], 1e-300)

    def __add__(self, other: Sums) -> Sums:
        """Both chunks' sums (each key's totals and counts added): the runner's ``sum`` rule
        over chunks and ranks."""
        out = Sums()
        for part in (self, other):
            for key, v in part.total.items():
                out.total[key] = out.total[key] + v if key in out.total else v
                out.count[key] = out.count.get(key, 0.0) + part.count[key]
        return out


def stripe_masks(tokens: torch.Tensor, *, causal: bool) -> dict[str, torch.Tensor]:
    """Each stripe's ``[batch, query, key]`` keys (interp convention: key 0 left out)."""
    return {s: stripe_mask(tokens, s, exclude_bos=True, causal=causal) for s in STRIPES}


def pattern_sums(
    sums: Sums, prefix: str, pattern: torch.Tensor, masks: dict[str, torch.Tensor]
) -> None:
    """Add one layer's per-head measures of ``pattern [batch, head, query, key]`` to ``sums``
    under ``prefix``: each stripe's mass over the rows that have it (``masks``: from
    :func:`stripe_masks`), attention on key 0, entropy (nats) and distance (positions), the
    last three over query rows ``1 ..``."""
    A = pattern.float()  # sums of at most batch x pos terms: float32 holds them to 1e-7
    b, _, n, _ = A.shape
    for stripe, mask in masks.items():
        mask = mask.to(A.device)
        rows = mask.any(-1)  # [batch, query]: rows that have this stripe
        mass = torch.einsum("bhqk,bqk->bhq", A, mask.float())
        sums.add(f"{prefix}{stripe}", (mass * rows[:, None]).sum((0, 2)), float(rows.sum()))
    rest = A[:, :, 1:]  # query rows 1..: row 0 of a causal head is all on key 0
    sums.add(f"{prefix}sink", rest[..., 0].sum((0, 2)), b * (n - 1))
    ent = -torch.xlogy(rest, rest).sum(-1)  # 0 log 0 = 0
    sums.add(f"{prefix}entropy", ent.sum((0, 2)), b * (n - 1))
    pos = torch.arange(n, device=A.device, dtype=A.dtype)
    dist = (pos[1:, None] - pos[None, :]).abs()  # [query 1.., key]
    sums.add(f"{prefix}distance", (rest * dist).sum(-1).sum((0, 2)), b * (n - 1))


def shuffled(W: torch.Tensor, seed: int) -> torch.Tensor:
    """``W`` with its entries permuted (seeded): the same values, none of the structure."""
    gen = torch.Generator().manual_seed(seed)
    flat = W.reshape(-1)
    return flat[torch.randperm(flat.numel(), generator=gen).to(flat.device)].reshape(W.shape)


def control_seed(seed: int, layer: int, draw: int, which: str) -> int:
    """The seed of one shuffle: distinct for every seed, layer, draw and weight."""
    return (seed * 1_000_003 + layer * 10_007 + draw * 101 + "QKV".index(which)) % (2**63)


class PatternReader:
    """The clean probe's reader (module docstring): patterns, bands and control heads."""

    def __init__(
        self, model: HookedModel, *, draws: int, seed: int, keep_first: bool, causal: bool
    ):
        self.model = model
        self.rt = runtime_of(model)
        self.draws, self.seed, self.causal = draws, seed, causal
        self.sums = Sums()
        self.keep_first = keep_first
        self.first: dict[int, torch.Tensor] = {}  # layer -> [head, query, key] of sequence 0
        self.gap = 0.0
        self._geometry: dict[int, Any] = {}

    def geometry(self, layer: int) -> Any:
        """The layer's :class:`~interp.runtime.attention.QKGeometry`, read once."""
        if layer not in self._geometry:
            self._geometry[layer] = self.rt.qk_geometry(layer)
        return self._geometry[layer]

    def chunk(self) -> tuple[Sums, dict[int, torch.Tensor], float]:
        """What the reader gathered since the last call (its sums, the first patterns it
        kept, its gap), then empty again: one chunk's partials."""
        out = (self.sums, self.first, self.gap)
        self.sums, self.first, self.gap = Sums(), {}, 0.0
        return out

    def __call__(self, layer: int, tokens: torch.Tensor, acts: dict[str, torch.Tensor]) -> None:
        pattern = acts[hook_name("pattern", layer)].float()
        x = acts[self.rt.head_input_hook(layer)].float()
        masks = stripe_masks(tokens, causal=self.causal)
        pattern_sums(self.sums, f"{layer}.", pattern, masks)
        if self.keep_first and layer not in self.first:  # the probe's first sequence
            self.first[layer] = pattern[0].cpu()
        lay = self.rt.layer(layer)
        geometry = self.geometry(layer)
        q, k = self.queries_keys(x, lay, geometry, lay.W["q"], lay.W["k"])
        mask = self.visible(x.shape[1], geometry, x.device)
        mine = self.pattern_of(q, k, geometry, mask)
        self.gap = worst([self.gap, float((mine - pattern).abs().max())])
        if geometry.rotary is not None:
            self.add_bands(layer, q, k, geometry, mask)
        Wq = torch.cat(
            [
                shuffled(lay.W["q"], control_seed(self.seed, layer, r, "Q"))
                for r in range(self.draws)
            ]
        )  # every shuffle's heads side by side: [draws * head, d_model, d_head]
        Wk = torch.cat(
            [
                shuffled(lay.W["k"], control_seed(self.seed, layer, r, "K"))
                for r in range(self.draws)
            ]
        )
        qc, kc = self.queries_keys(x, lay, geometry, Wq, Wk)
        control = self.pattern_of(qc, kc, geometry, mask)
        pattern_sums(self.sums, f"{layer}.control.", control, masks)

    def queries_keys(
        self, x: torch.Tensor, lay: Any, geometry: QKGeometry, W_q: torch.Tensor, W_k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated queries ``[batch, pos, head, d_head]`` and keys (one per query head) of the
        head input ``x [batch, pos, d_model]``, as the layer computes them."""
        out = []
        for side, W in (("q", W_q), ("k", W_k)):
            v = torch.einsum("bpm,hme->bphe", x, W.float())
            if lay.b[side] is not None:  # tiled over the stacked shuffles
                b = lay.b[side].float()
                v = v + b.repeat(W.shape[0] // b.shape[0], 1)
            norm = geometry.q_norm if side == "q" else geometry.k_norm
            if norm is not None:
                v = norm(v).float()
            if geometry.rotary is not None:
                v = geometry.rotary.rotate(v, torch.arange(x.shape[1]), pos_dim=1)
            out.append(v)
        ratio = out[0].shape[2] // out[1].shape[2]  # grouped keys: one per query head
        return out[0], out[1].repeat_interleave(ratio, dim=2)

    def visible(self, n: int, geometry: QKGeometry, device: Any) -> torch.Tensor:
        """``[query, key]`` bool: the keys each query may see (causal, sliding window)."""
        q = torch.arange(n, device=device)[:, None]
        k = torch.arange(n, device=device)[None, :]
        mask = (k <= q) if self.causal else torch.ones(n, n, dtype=torch.bool, device=device)
        if geometry.window:
            mask = mask & (k > q - geometry.window)
        return mask

    def pattern_of(
        self, q: torch.Tensor, k: torch.Tensor, geometry: QKGeometry, mask: torch.Tensor
    ) -> torch.Tensor:
        s = torch.einsum("bqhe,bkhe->bhqk", q, k) * geometry.scale
        if geometry.softcap:
            s = geometry.softcap * torch.tanh(s / geometry.softcap)
        return s.masked_fill(~mask, MASKED).softmax(-1)

    def add_bands(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, geometry: QKGeometry, mask: torch.Tensor
    ) -> None:
        """Each band's summed absolute share of the scores over the visible cells: a pair's
        share is ``q_a k_a + q_b k_b`` (a ``[query, 2] @ [2, key]`` product per sequence, head
        and pair), the unrotated dimensions' their dot product."""
        rot = geometry.rotary
        a, b = (i.to(q.device) for i in rot.pairs())
        rest = (rot.band_of_dims(q.shape[-1]) == rot.n_pairs).nonzero().flatten().to(q.device)
        batch, n, heads, _ = q.shape
        m = mask.to(q.dtype)
        total = torch.zeros(heads, rot.n_pairs + (1 if len(rest) else 0), dtype=torch.float64)
        for i in range(batch):  # one sequence at a time: [head * pair, query, key] at once
            qp = torch.stack([q[i][..., a], q[i][..., b]], -1)  # [pos, head, pair, 2]
            kp = torch.stack([k[i][..., a], k[i][..., b]], -1)
            qp = qp.permute(1, 2, 0, 3).reshape(-1, n, 2)
            kp = kp.permute(1, 2, 3, 0).reshape(-1, 2, n)
            part = torch.einsum("xqk,qk->x", torch.bmm(qp, kp).abs_(), m)
            total[:, : rot.n_pairs] += part.view(heads, rot.n_pairs).double().cpu()
            if len(rest):
                qr, kr = q[i][..., rest].transpose(0, 1), k[i][..., rest].transpose(0, 1)
                s = torch.bmm(qr, kr.transpose(1, 2)).abs_()  # [head, query, key]
                total[:, -1] += torch.einsum("hqk,qk->h", s, m).double().cpu()
        count = batch * float(m.sum())
        self.sums.add(f"bands{layer}", total * geometry.scale, count)


def sink_reader(sums: Sums) -> Reader:
    """The swapped probe's reader: only the attention on key 0 (as :func:`pattern_sums`)."""

    def read(layer: int, tokens: torch.Tensor, acts: dict[str, torch.Tensor]) -> None:
        A = acts[hook_name("pattern", layer)].float()[:, :, 1:, 0]  # [batch, head, query 1..]
        sums.add(f"sink{layer}", A.sum((0, 2)), A.shape[0] * A.shape[2])

    return read


def swap_first(tokens: torch.Tensor, seed: int) -> torch.Tensor:
    """``tokens`` with each sequence's first token replaced by an id drawn (seeded) from the
    probe's other tokens, never one that is first in any sequence.

    Raises:
        InterpError: for tokens whose later ids are all first tokens too.
    """
    firsts = set(tokens[:, 0].tolist())
    pool = torch.tensor(sorted(set(tokens[:, 1:].flatten().tolist()) - firsts), dtype=torch.long)
    if pool.numel() == 0:
        raise InterpError(
            "the probe has no token other than its first ones to put first; use more varied "
            "tokens (or tokens=None for the standard probe)"
        )
    gen = torch.Generator().manual_seed(seed)
    out = tokens.clone()
    out[:, 0] = pool[torch.randint(pool.numel(), (tokens.shape[0],), generator=gen)].to(out.device)
    return out


def stack_means(sums: Sums, keys: Sequence[str]) -> torch.Tensor:
    """``[len(keys), ...]``: the means of ``keys``."""
    return torch.stack([sums.mean(k) for k in keys])


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    return renamed(__name__, name)  # an old name warns and names the new one

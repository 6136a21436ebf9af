"""The engines' one cost model: FLOPs from the weights' shapes, counted in forward-equivalents.

A run's ``forward_equivalents`` are the FLOPs of its passes over the FLOPs of one plain
forward pass over its prompts, counted as ``torch.utils.flop_counter`` counts them (matrix
products and attention, forward and backward; ``tests/test_counted_flops.py`` holds every
analysis within 25% of that measurement). Per token of a ``pos``-token prompt, from the
model's own weights (:class:`Flops`):

* a block: twice the elements of its weight matrices (every tensor of two or more axes in
  it: projections, MLP, grouped-query key/value heads as they are stored), plus the
  attention term ``4 * n_heads * d_head * pos`` (scores and mixing, over every key);
* the readout: ``2 * d_model * d_vocab`` per row unembedded (a metric that reads one
  position unembeds one row where the runtime can).

So a pass that stops before the unembedding (a cache read up to a layer) costs its share of
the blocks only, one that unembeds one row far less than a plain pass on a large
vocabulary, and a logit lens that unembeds every layer more. A backward pass to the
activations (the weights' gradients not asked for) counts as its forward.

Example:
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> c = Cost.of(model, pos=12)
    >>> c.forward(); c.forward_equivalents
    1.0
    >>> c = Cost.of(model, pos=12)
    >>> c.forward(stop=1); c.forward_equivalents < 0.5  # half the blocks, no readout
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from interp.core.protocol import HookedModel

ALL_ROWS: Any = "all"  # a pass that unembeds every row


@dataclasses.dataclass(frozen=True)
class Flops:
    """A model's FLOPs per token (module docstring), from its weights' shapes.

    Attributes:
        n_layers: Its blocks.
        block: One block's weight matrices, per token (``2 x`` their elements; the mean
            block's).
        attention: One block's attention, per token per key (``4 * n_heads * d_head``).
        readout: The unembedding, per row (``2 * d_model * d_vocab``).
    """

    n_layers: int
    block: float
    attention: float
    readout: float

    @classmethod
    def of(cls, model: HookedModel) -> Flops:
        """The FLOPs of ``model``, read once from its weights (cached on its runtime)."""
        from interp.runtime import runtime_of

        rt = runtime_of(model)
        return rt.verdict("cost: flops", lambda: _measure(model, rt))

    def blocks(self, pos: int) -> float:
        """One prompt's blocks, all of them, in FLOPs."""
        return self.n_layers * pos * (self.block + pos * self.attention)

    def block_share(self, pos: int) -> float:
        """The blocks' share of a plain pass (a share of the blocks, in forward-equivalents)."""
        return self.blocks(pos) / self.plain(pos)

    def plain(self, pos: int) -> float:
        """One plain forward pass of one prompt (every block, every row unembedded)."""
        return self.blocks(pos) + pos * self.readout


def _measure(model: HookedModel, rt: Any) -> Flops:
    cfg = model.cfg
    L = int(rt.n_layers)
    blocks = getattr(model, "blocks", None)
    total = 0
    if blocks is not None:
        seen: set[int] = set()
        for b in list(blocks)[:L]:
            for p in b.parameters():
                if p.ndim >= 2 and id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel()
    d_model, d_vocab = int(cfg.d_model), int(cfg.d_vocab)
    n_heads, d_head = int(cfg.n_heads), int(cfg.d_head)
    if total == 0:  # no block modules to read: the attention projections alone
        total = L * 4 * n_heads * d_head * d_model
    return Flops(
        n_layers=L,
        block=2.0 * total / max(1, L),
        attention=4.0 * n_heads * d_head,
        readout=2.0 * d_model * d_vocab if getattr(cfg, "use_unembed", True) is not False else 0.0,
    )


class Cost:
    """Forward-equivalents of the passes a run made (module docstring): each pass counts the
    FLOPs of the blocks it ran and the rows it unembedded, times its copies of the batch,
    over one plain forward pass of the batch; a backward pass counts as its forward.

    ``Cost(n_layers)`` (no model) counts blocks only, a pass of every block as 1.
    """

    def __init__(
        self,
        n_layers: int,
        *,
        flops: Flops | None = None,
        pos: int = 1,
        rows: Sequence[int] | None = None,
        some_rows: bool = True,
    ) -> None:
        self.n_layers = max(1, int(n_layers))
        self.flops, self.pos = flops, max(1, int(pos))
        self.rows = rows  # the rows a full pass unembeds (None: every row)
        self.some_rows = some_rows  # whether the runtime unembeds only the rows asked for
        self.total = 0.0
        self.passes = 0
        if flops is None:
            self.block_share, self.row_share = 1.0, 0.0
        else:
            plain = flops.plain(self.pos)
            self.block_share = flops.blocks(self.pos) / plain
            self.row_share = flops.readout / plain

    @classmethod
    def of(cls, model: HookedModel, pos: int, rows: Sequence[int] | None = None) -> Cost:
        """The cost of a run on ``model`` over prompts of ``pos`` tokens whose full passes
        unembed ``rows`` (a metric's positions; None: every row), as the runtime unembeds
        them (:meth:`interp.runtime.base.Runtime.unembedded`)."""
        from interp.runtime import runtime_of

        fl = Flops.of(model)
        rt = runtime_of(model)
        return cls(
            fl.n_layers, flops=fl, pos=pos, rows=rt.unembedded(rows),
            some_rows=bool(rt.rows_supported),
        )  # fmt: skip

    def like(self) -> Cost:
        """A new, empty count of the same run (a chunk's own)."""
        return Cost(
            self.n_layers, flops=self.flops, pos=self.pos, rows=self.rows,
            some_rows=self.some_rows,
        )  # fmt: skip

    def _rows(self, rows: Any) -> int:
        if rows is not None and rows is not ALL_ROWS and not self.some_rows:
            rows = ALL_ROWS  # asked for some rows, the runtime unembeds every one
        rows = self.rows if rows is None else rows
        return self.pos if rows is None or rows is ALL_ROWS else len(rows)

    def forward(
        self, copies: float = 1, *, start: int = 0, stop: int | None = None, rows: Any = None
    ) -> None:
        """A pass of ``copies`` copies running blocks ``start .. stop - 1``, or, without
        ``stop``, the rest and then the unembedding of ``rows`` (the run's rows by default,
        :data:`ALL_ROWS` for a pass that unembeds every row)."""
        end = self.n_layers if stop is None else stop
        share = max(0, end - start) / self.n_layers * self.block_share
        if stop is None:  # a pass stopped at a block (a cache read) unembeds nothing
            share += self._rows(rows) * self.row_share
        self.total += copies * share
        self.passes += 1

    def per_token(self, flops: float, copies: float = 1) -> None:
        """Work outside the model's own modules: ``flops`` per token of each prompt (an
        engine's own product, such as heads' edits projected by ``W_O``)."""
        if self.flops is not None:
            self.total += copies * self.pos * flops / self.flops.plain(self.pos)

    def readout(self, copies: float = 1, *, rows: Any = ALL_ROWS) -> None:
        """An unembedding of ``rows`` outside a pass (a lens reading each layer)."""
        self.total += copies * self._rows(rows) * self.row_share

    def backward(self, copies: float = 1) -> None:
        """A backward pass through the whole model and the run's rows, for the gradients of
        activations only (``torch.autograd.grad`` to hooks, the weights' own gradients not
        asked for): one product per forward product, as torch counts it."""
        self.total += copies * (self.block_share + self._rows(None) * self.row_share)

    def add(self, other: Cost | float) -> None:
        """Add another count (or forward-equivalents)."""
        if isinstance(other, Cost):
            self.total += other.total
            self.passes += other.passes
        else:
            self.total += float(other)

    @property
    def forward_equivalents(self) -> float:
        return round(self.total, 3)

    def __repr__(self) -> str:
        return f"Cost({self.forward_equivalents} forward-equivalents, {self.passes} passes)"


def pass_equivalents(
    model: HookedModel,
    pos: int,
    *,
    start: int = 0,
    stop: int | None = None,
    rows: Any = None,
    copies: float = 1,
) -> float:
    """The forward-equivalents of one pass (:meth:`Cost.forward`), for an estimate.

    Example:
        >>> from interp.models import load_model
        >>> pass_equivalents(load_model("induction-2l"), 12)
        1.0
    """
    c = Cost.of(model, pos)
    c.forward(copies, start=start, stop=stop, rows=rows)
    return c.total


def work_of(model: HookedModel, pos: int, *, blocks: float = 1.0, rows: float = 0.0) -> float:
    """The forward-equivalents of running ``blocks`` of the model's blocks (a share: 1 is
    every block, as :func:`interp.engine.cache.pass_share` and ``cache_work`` count) and
    unembedding ``rows`` rows per prompt, over prompts of ``pos`` tokens.

    Example:
        >>> from interp.models import load_model
        >>> m = load_model("induction-2l")
        >>> work_of(m, 12, blocks=1.0, rows=12)  # a plain pass
        1.0
        >>> work_of(m, 12, blocks=0.5) < 0.5  # half the blocks, no readout
        True
    """
    c = Cost.of(model, pos)
    return blocks * c.block_share + rows * c.row_share


# How far into a block each hook fires: the block's attention projections (q, k, v), its
# attention (scores, then mixing), its output projection, then its MLP.
_QKV = ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_q_input", "hook_k_input",
        "hook_v_input", "hook_attn_in")  # fmt: skip
_SCORES = ("hook_attn_scores", "hook_pattern")
_MIXED = ("hook_z",)
_ATTN_OUT = ("hook_result", "hook_attn_out", "hook_resid_mid", "hook_mlp_in")


def cache_pass_work(model: HookedModel, pos: int, names: Sequence[str]) -> float:
    """The forward-equivalents of a pass stopped as soon as the last of ``names`` fires
    (:func:`interp.engine.cache.cache_of`): the blocks before it whole, and of its own block
    the part that runs before the hook (its q, k and v projections, its attention, its output
    projection, its MLP), with no unembedding.

    Example:
        >>> from interp.models import load_model
        >>> m = load_model("induction-2l")
        >>> a = cache_pass_work(m, 12, ["blocks.1.attn.hook_pattern"])
        >>> b = cache_pass_work(m, 12, ["blocks.1.hook_resid_post"])
        >>> 0.5 < a < b < 1.0
        True
    """
    from interp.engine.cache import blocks_before

    fl = Flops.of(model)
    L = fl.n_layers
    last = max(names, key=lambda n: (blocks_before(L, [n]), _into(n)), default=None)
    if last is None:
        return 0.0
    whole = blocks_before(L, [last])
    parts = last.split(".")
    inside = parts[0] == "blocks" and len(parts) > 2 and whole > int(parts[1])
    blocks = float(whole)
    if inside and _into(last) < 4:  # stopped inside its block: only the part before the hook
        blocks -= 1.0 - _block_part(model, fl, pos, _into(last))
    return blocks / L * fl.blocks(pos) / fl.plain(pos)


def _into(name: str) -> float:
    """How far into its block a hook fires: 0 its input, 1 after q/k/v, 2 at the scores, 3
    after the mixing, 3.5 after the output projection, 4 the whole block."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("hook_resid_pre", "hook_in"):
        return 0.0
    if "ln1" in name or leaf in _QKV:
        return 1.0
    if leaf in _SCORES:
        return 2.0
    if leaf in _MIXED:
        return 3.0
    if leaf in _ATTN_OUT:
        return 3.5
    return 4.0


def _block_part(model: HookedModel, fl: Flops, pos: int, stage: float) -> float:
    """The share of one block's FLOPs (at ``pos``) run before a hook at ``stage``."""
    cfg = model.cfg
    d, h, dh = int(cfg.d_model), int(cfg.n_heads), int(cfg.d_head)
    kv = int(getattr(cfg, "n_key_value_heads", None) or h)
    qkv = 2.0 * d * (h + 2 * kv) * dh
    out = 2.0 * h * dh * d
    attn = pos * fl.attention
    whole = fl.block + attn
    done = {0.0: 0.0, 1.0: qkv, 2.0: qkv + attn / 2, 3.0: qkv + attn, 3.5: qkv + attn + out}[stage]
    return min(1.0, done / whole)

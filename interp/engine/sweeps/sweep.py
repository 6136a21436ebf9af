"""Sweeps: a metric under many single-activation edits, exactly, in few forward passes.

A sweep evaluates a metric under many *edits* (:mod:`interp.engine.sweeps.sites`).
Every path gives what one ``run_with_hooks`` per edit gives (the "plain loop"),
and each is checked against that loop once per model (on a slice of the
tokens, to 1e-5; in float16 / bfloat16 to the precision's rule,
:mod:`interp.core.precision`) before it is trusted; the table says which path ran.

``resume-after-block`` (attention-only models, edits of one layer's ``hook_z``
only). A head's output enters the residual stream only as ``z_h @ W_O[l, h]``,
and an attention-only block adds nothing after its attention, so the edited
residual after block ``l`` is the base run's plus ``(z_new - z_h) @ W_O[l, h]``.
One hooked pass of the base run keeps ``hook_z`` and ``hook_resid_post`` of each edited
layer; each edit then runs only the blocks after ``l``.

``resume-blocks`` (any model whose runtime resumes). One base pass keeps what
enters each block; an edit starting in layer ``l`` then runs only blocks
``l ..`` (:meth:`interp.runtime.base.Runtime.run`).

``loop``: one ``run_with_hooks`` per edit, for models neither path fits, or
when a path's exactness check fails (the result's ``note`` says so).

Edits that start in the same layer share a pass (:mod:`interp.engine.batching`).
When the metric says which positions' logits it reads (``Metric.rows``), a
runtime that can unembeds only there.

Example:
    >>> import torch
    >>> from interp.core.metrics import loss_metric
    >>> from interp.models import load_model
    >>> from interp.engine.sweeps.sites import head_edits
    >>> model = load_model("induction-2l")
    >>> tokens = torch.tensor([[0, 5, 6, 7, 5, 6, 7]])
    >>> result = sweep(model, tokens, head_edits([(1, 1)]), loss_metric())
    >>> result.path, result.values[0] > result.base
    ('resume-after-block', True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.metrics import Metric, scalar
from interp.core.protocol import HookedModel
from interp.engine.batching import check_work, copies_per_pass, pack
from interp.engine.chunks import Footprint
from interp.engine.cost import ALL_ROWS, Cost
from interp.engine.sweeps.sites import Edit, edit_hooks, edit_start, site
from interp.runtime import Runtime, runtime_of

ATOL, RTOL = 1e-5, 1e-5  # a path must match the plain loop this closely to be used


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Metric values, one per edit in the order given; the unedited (base) run's value; which
    path ran. The base run is the run the edits edit: the clean run, or the corrupted one
    when denoising (:mod:`interp.engine.direction`)."""

    values: list[float]
    base: float
    path: str
    note: str = ""
    passes: int = 0
    cost: float = 0.0  # forward-equivalents (interp.engine.batching.Cost)


def sweep_copy_bytes(
    model: HookedModel, pos: int, edits: Sequence[Edit], rows: Sequence[int] | None = None
) -> int:
    """What one copy of one prompt adds to a pass (:mod:`interp.engine.batching`): a forward
    pass's transients, with the logits only at the metric's ``rows`` where the runtime
    unembeds only those (:func:`interp.core.memory.forward_bytes`), the state the pass resumes
    from, repeated per copy, and each edited activation's copy (the edit hooks clone it)."""
    from interp.core.memory import forward_bytes, stream_bytes

    rt = runtime_of(model)
    edited = max(  # the hooks of one edit clone their activations
        (
            sum(rt.activation_bytes(n, pos) for n in dict.fromkeys(st.hook for st in e))
            for e in edits
        ),
        default=0,
    )
    return (
        forward_bytes(model, 1, pos, rows=rt.unembedded(rows)) + stream_bytes(model, pos) + edited
    )


def footprint(
    model: HookedModel,
    pos: int,
    edits: Sequence[Edit],
    names: Sequence[str] = (),
    *,
    rows: Sequence[int] | None = None,
) -> Footprint:
    """The memory a sweep holds (:mod:`interp.engine.chunks`): per prompt, the residual
    stream entering each block an edit resumes at (the base pass keeps them) and the values
    spliced in at ``names`` (the source run's, a mean or a resample: none for zero
    ablation); per prompt of each copy of a pass, :func:`sweep_copy_bytes` (edits that resume at
    one block share passes as copies of the batch, as many as the rest of the budget holds:
    at most the most edits of one block)."""
    from collections import Counter

    from interp.core.memory import stream_bytes

    rt = runtime_of(model)
    starts = Counter(edit_start(e) for e in edits)
    kept = len(set(starts) - {0}) * stream_bytes(model, pos)
    values = sum(rt.activation_bytes(n, pos) for n in dict.fromkeys(names))
    return Footprint(
        fixed=0,
        per_prompt=kept + values,
        per_copy=sweep_copy_bytes(model, pos, edits, rows),
        most_copies=max(starts.values(), default=1),
    )


def sweep_copies(
    model: HookedModel,
    tokens: torch.Tensor,
    edits: Sequence[Edit],
    requested: Any,
    memory_budget: Any,
    rows: Sequence[int] | None = None,
) -> int:
    """How many edits share one forward pass (:func:`interp.engine.batching.copies_per_pass`,
    each copy :func:`sweep_copy_bytes` per prompt).

    Raises:
        InterpError: for a non-positive or non-integer ``batch_size`` or ``memory_budget``.
    """
    from interp.core.protocol import model_device

    b, pos = tokens.shape
    return copies_per_pass(
        tokens.numel(),
        model_device(model),
        per_copy=b * sweep_copy_bytes(model, pos, edits, rows),
        n=len(edits),
        requested=requested,
        memory_budget=memory_budget,
    )


# ------------------------------------------------------------------------------ the loop
def _loop_pass(rt: Runtime, tokens, chunk, values, cost: Cost | None = None) -> list:
    """One full forward pass per edit: the reference every faster path is checked against."""
    out = []
    for edit in chunk:
        out.append(rt.run(tokens, hooks=edit_hooks([edit], values, tokens.shape[0])))
        if cost is not None:
            cost.forward(rows=ALL_ROWS)  # a loop pass unembeds every row
    return out


# ------------------------------------------------------- resume after the edited block
class _AfterBlock:
    """``resume-after-block``: attention-only models, ``hook_z`` edits of one layer."""

    name = "resume-after-block"

    def __init__(self, rt: Runtime, tokens: torch.Tensor, layers: set[int], rows: Any = None):
        self.rt = rt
        self.tokens = tokens
        kept: dict[str, torch.Tensor] = {}

        def keep(x: torch.Tensor, hook: Any) -> None:
            kept[hook.name] = x

        names = [n for l in sorted(layers) for n in (hook_name("z", l), hook_name("resid_post", l))]
        self.base_logits = rt.run(tokens, hooks=[(n, keep) for n in names], rows=rows)
        self.kept = kept
        self.w_o = {l: rt.model.W_O[l].detach() for l in layers}

    @staticmethod
    def fits(edits: Sequence[Edit]) -> bool:
        """Only edits of whole heads' ``hook_z`` in a single layer."""
        return all(
            len({st.layer for st in e}) == 1
            and all(st.hook.endswith("attn.hook_z") and st.channels is None for st in e)
            for e in edits
        )

    def run(self, chunk, values, rows, cost: Cost | None = None) -> list[torch.Tensor]:
        k = len(chunk)
        layer = chunk[0][0].layer
        z = self.kept[hook_name("z", layer)]
        resid = self.kept[hook_name("resid_post", layer)]
        W = self.w_o[layer]  # [head, d_head, d_model]
        deltas = []
        for edit in chunk:
            new = z.clone()
            target = None if values is None else values[hook_name("z", layer)].to(z.dtype)
            for st in edit:
                sel = st.index(z.ndim, z.device)
                new[sel] = 0.0 if target is None else target[sel]
            diff = new - z  # [batch, pos, head, d_head]
            out = torch.einsum("bphe,hed->bpd", diff.float(), W.to(diff.device).float())
            deltas.append(resid + out.to(resid.dtype))  # accumulated in float32, rounded once
        state = torch.cat(deltas) if k > 1 else deltas[0]
        logits = self.rt.run(self.tokens, start=layer + 1, state=state, rows=rows)
        if cost is not None:
            cost.per_token(_projection(W), k)  # each edit's heads through W_O
            cost.forward(k, start=layer + 1)
        return list(logits.split(resid.shape[0])) if k > 1 else [logits]


# ----------------------------------------------------- resume at the first edited block
class _ResumeBlocks:
    """``resume-blocks``: skip the blocks before each edit's first layer (module docstring)."""

    name = "resume-blocks"

    def __init__(self, rt: Runtime, tokens: torch.Tensor, starts: set[int], rows: Any = None):
        self.rt = rt
        self.tokens = tokens
        self.base_logits, self.kept = rt.block_inputs(tokens, starts - {0}, rows=rows)

    def run(self, chunk, values, rows, cost: Cost | None = None) -> list[torch.Tensor]:
        k = len(chunk)
        b = self.tokens.shape[0]
        start = min(edit_start(edit) for edit in chunk)
        logits = self.rt.run(
            self.tokens,
            hooks=edit_hooks(chunk, values, b),
            rows=rows,
            start=start,
            state=self.kept.get(start),
            copies=k,
        )
        if cost is not None:
            cost.forward(k, start=start)
        return list(logits.split(b)) if k > 1 else [logits]


# ----------------------------------------------------------------------- choosing a path
def _probe(rt: Runtime, tokens: torch.Tensor, path_cls: Any, edit: Edit) -> tuple[bool, str]:
    """Does ``path_cls`` give the plain loop's logits for ``edit`` on a slice of ``tokens``?"""
    probe = tokens[:1, : min(tokens.shape[1], 8)]
    try:
        with torch.no_grad():
            layers = {st.layer for st in edit}
            engine = path_cls(rt, probe, layers if path_cls is _AfterBlock else {min(layers)})
            got = engine.run([edit], None, None)[0]
            ref = _loop_pass(rt, probe, [edit], None)[0]
        if got.shape != ref.shape:
            return False, f"{path_cls.name} gave logits of shape {tuple(got.shape)}"
        if not _agree(got, ref):
            diff = float((got.float() - ref.float()).abs().max())
            return False, f"{path_cls.name} differed from the plain loop by {diff:.2e}"
        return True, ""
    except Exception as exc:  # noqa: BLE001 - any failure means "this path does not apply"
        return False, f"{path_cls.name} failed its check ({type(exc).__name__}: {exc})"


def _agree(got: torch.Tensor, ref: torch.Tensor) -> bool:
    """A path's logits against the plain loop's: to :data:`ATOL` / :data:`RTOL` in float32, to
    the precision's rule (:mod:`interp.core.precision`, of the largest logit) in float16 /
    bfloat16."""
    from interp.core.precision import is_reduced, tolerance

    if not is_reduced(ref.dtype):
        return bool(torch.allclose(got.float(), ref.float(), atol=ATOL, rtol=RTOL))
    size = float(ref.float().abs().max())
    return float((got.float() - ref.float()).abs().max()) <= tolerance(
        ref.dtype, size, float32=RTOL
    )


def _faster_paths(rt: Runtime, edits: Sequence[Edit]) -> list[tuple[Any, str, Edit]]:
    """The faster paths that apply to ``edits``, fastest first: each with the name its
    exactness check is remembered under and the edit that check probes."""
    out: list[tuple[Any, str, Edit]] = []
    if rt.can_resume and rt.attention_only and _AfterBlock.fits(edits):
        out.append((_AfterBlock, "sweep: after-block", [site("z", 0, head=0)]))
    if rt.n_layers > 1 and rt.can_resume:
        last = rt.n_layers - 1
        out.append((_ResumeBlocks, "sweep: resume-blocks", [site("z", last, head=0)]))
    return out


def choose_path(model: HookedModel, tokens: torch.Tensor, edits: Sequence[Edit]) -> tuple[str, str]:
    """Which path :func:`sweep` will take for these edits, and why (if not the fastest)."""
    rt = runtime_of(model)
    why = ""
    for cls, check, probe_edit in _faster_paths(rt, edits):
        ok, note = rt.verdict(check, lambda c=cls, e=probe_edit: _probe(rt, tokens, c, e))
        if ok:
            return cls.name, why
        why = note
    return "loop", why or "no faster exact path for this model"


def sweep_outline(
    model: HookedModel, tokens: torch.Tensor, edits: Sequence[Edit], batch_size: Any = None
) -> dict:
    """What a sweep will do: ``path``, ``note``, ``edits``, ``edits_per_pass``, ``passes``."""
    path, note = choose_path(model, tokens, edits)
    k = sweep_copies(model, tokens, edits, batch_size, None)
    n_chunks = len(pack([edit_start(e) for e in edits], k, mixed=path == "loop"))
    return {
        "path": path,
        "note": note,
        "edits": len(edits),
        "edits_per_pass": k,
        "passes": n_chunks + 1,
    }


def likely_path(model: HookedModel, edits: Sequence[Edit]) -> str:
    """The path :func:`choose_path` takes for ``edits`` when its exactness check passes (as
    it does on every model kind the runtime reads), known without running the check: the
    path an estimate counts."""
    paths = _faster_paths(runtime_of(model), edits)
    return paths[0][0].name if paths else "loop"


def sweep_work(
    model: HookedModel,
    edits: Sequence[Edit],
    path: str | None = None,
    *,
    pos: int | None = None,
    rows: Sequence[int] | None = None,
) -> float:
    """The forward-equivalents a sweep of ``edits`` on ``path`` (default :func:`likely_path`)
    runs, as its :class:`~interp.engine.cost.Cost` counts them: the base pass, then per
    edit the blocks it reruns: those after its layer (``resume-after-block``), from its first
    layer on (``resume-blocks``), or every block (``loop``); each pass then unembeds the
    metric's ``rows`` (a loop pass every row). Without ``pos``, blocks only (a pass of every
    block is 1).

    Example:
        >>> from interp.models import load_model
        >>> from interp.engine.sweeps.sites import head_edits
        >>> sweep_work(load_model("induction-2l"), head_edits([(0, 0), (1, 0)]))  # 1 + 1/2 + 0
        1.5
    """
    rt = runtime_of(model)
    L = rt.n_layers
    path = likely_path(model, edits) if path is None else path
    cost = Cost(L) if pos is None else Cost.of(model, pos, rows)
    cost.forward()
    if path == "loop":
        cost.forward(len(edits), rows=ALL_ROWS)
        return cost.total
    after = 1 if path == _AfterBlock.name else 0
    for e in edits:
        if after:
            cost.per_token(_projection(rt.model.W_O[edit_start(e)]))
        cost.forward(start=min(L, edit_start(e) + after))
    return cost.total


def _projection(W_O: torch.Tensor) -> float:
    """FLOPs per token of projecting every head's ``z`` through ``W_O [head, d_head,
    d_model]`` (``resume-after-block``'s edit of one layer)."""
    return 2.0 * W_O.numel()


def check_sweep_work(
    model: HookedModel,
    edits: Sequence[Edit],
    *,
    also: float = 0.0,
    pos: int | None = None,
    rows: Sequence[int] | None = None,
    parts: Sequence[tuple[float, Sequence[int] | None]] | None = None,
) -> float:
    """The forward-equivalents of a sweep of ``edits`` (:func:`sweep_work`) and ``also`` (the
    caller's other passes: a source run, the values an ablation splices in), refused past the
    work limit before any pass; returns them. ``parts`` (a run in chunks): ``(share of the
    prompts, rows its metric reads)`` per chunk, each chunk's sweep unembedding its own rows.

    Raises:
        InterpError: past :func:`interp.engine.batching.work_limit`, with the estimate.
    """
    parts = [(1.0, rows)] if parts is None else parts
    sweeps = sum(share * sweep_work(model, edits, pos=pos, rows=r) for share, r in parts)
    return check_work(
        sweeps + also,
        what=f"an exact sweep of {len(edits):,} edits",
        fix="sweep fewer heads, components or positions, or estimate them first (attribute_heads)",
    )


def sweep(
    model: HookedModel,
    tokens: torch.Tensor,
    edits: Sequence[Edit],
    metric: Metric,
    *,
    values: dict[str, torch.Tensor] | None = None,
    batch_size: Any = None,
    memory_budget: Any = None,
    progress: bool = False,
    desc: str = "sweep",
    score_tokens: torch.Tensor | None = None,
) -> SweepResult:
    """Metric values, one per edit in the order given, and the unedited value.

    ``values[hook]`` (the full activation of that hook, batch first) supplies
    each edited slice; without ``values`` the slices are zeroed. The metric is
    scored against ``score_tokens`` (default ``tokens``). The caller runs this in
    eval mode under no_grad and has validated its inputs.

    Raises:
        InterpError: for an empty edit list, work past the work limit
            (:func:`interp.engine.batching.check_work`), a bad batch size or budget, or a
            metric that returns a non-scalar or non-finite value.
    """
    from tqdm.auto import tqdm

    if not edits:
        raise InterpError("nothing to sweep: no edits given")
    rt = runtime_of(model)
    starts = [edit_start(e) for e in edits]
    check_sweep_work(model, edits)
    rows = metric.rows
    k = sweep_copies(model, tokens, edits, batch_size, memory_budget, rows)
    path, note = choose_path(model, tokens, edits)
    chunks = pack(starts, k, mixed=path == "loop")
    cost = Cost.of(model, tokens.shape[1], rows)
    bar = tqdm(total=len(chunks) + 1, disable=not progress, desc=desc, unit="pass")
    results: dict[int, float] = {}
    try:
        if path == _AfterBlock.name:
            engine: Any = _AfterBlock(rt, tokens, set(starts), rows)
            base_logits, run = engine.base_logits, engine.run
        elif path == _ResumeBlocks.name:
            engine = _ResumeBlocks(rt, tokens, set(starts), rows)
            base_logits, run = engine.base_logits, engine.run
        else:
            base_logits = rt.run(tokens, rows=rows)

            def run(chunk, values, rows, cost):
                return _loop_pass(rt, tokens, chunk, values, cost)  # rows: every row

        cost.forward()
        scored = tokens if score_tokens is None else score_tokens
        base = scalar(metric(base_logits, scored), metric.name)
        if path != "loop":
            engine.base_logits = None  # the base run's logits are not held through the sweep
        del base_logits
        bar.update(1)
        for chunk in chunks:
            outs = run([edits[i] for i in chunk], values, rows, cost)
            for i in chunk:
                results[i] = scalar(metric(outs.pop(0), scored), metric.name)
            del outs  # a pass's logits are gone before the next pass makes its own
            bar.update(1)
    finally:
        bar.close()
    return SweepResult(
        values=[results[i] for i in range(len(edits))],
        base=base,
        path=path,
        note=note,
        passes=len(chunks) + 1,
        cost=cost.forward_equivalents,
    )


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    return renamed(__name__, name)  # an old name warns and names the new one

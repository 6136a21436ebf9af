"""The exact engine behind head ablations and activation patching.

A sweep evaluates a metric under many *edits*. An edit is a few :class:`Site`
s edited together; a site is a slice of one hooked activation (a head of
``hook_z``, ``hook_q``, ``hook_k``, ``hook_v`` or ``hook_pattern``, a
position of ``hook_resid_pre`` / ``hook_attn_out`` / ``hook_mlp_out``, a
group of MLP neurons ...), replaced by zero or by the same slice of a given
tensor (the clean run's activation, a mean, a resampled one). Every path gives
what one ``run_with_hooks`` per edit gives (the "plain loop"), and each is
checked against that loop once per model before it is trusted:

``resume-after-block`` (our attention-only models, edits of one layer's
``hook_z`` only). A
head's output enters the residual stream only as ``z_h @ W_O[l, h]``, and an
attention-only block adds nothing after its attention, so the edited residual
after block ``l`` is the clean one plus ``(z_new - z_h) @ W_O[l, h]``. One hooked
clean pass keeps ``hook_z`` and ``hook_resid_post`` of each edited layer; each
edit then runs only the blocks after ``l`` (``forward_from``).

``resume-blocks`` (TransformerBridge models, and our models for edits that
span layers). One clean pass keeps each block's output; an edit starting in
layer ``l`` then runs with blocks ``0..l-1`` replaced by stubs that return the
kept outputs, so only blocks ``l..`` compute (the embedding, position and mask
set-up of the wrapped Hugging Face model run as usual, so every block sees
exactly the arguments it sees in a plain run). Results equal the plain loop
bit for bit on the models tested.

``loop``: one ``run_with_hooks`` per edit, for models neither path fits, or
when a path's exactness check fails (the result's ``note`` says so).

Edits that start in the same layer can share a pass (batched copies of the
sequences). A pass has a fixed cost (reading every weight once, Python per
block) that small batches do not amortise: on SmolLM2 a plain forward costs
2.75 ms per token at 8 x 15 tokens and 1.8 ms at 360 and more, and resumed
passes, which do less arithmetic, gain more (patching all 270 heads on 12 x 15
tokens: 58 s at 512 tokens per pass, 43 s at 2048). So on CPUs a pass carries
enough edits to reach :data:`CPU_TOKENS_PER_PASS` tokens; on accelerators as
many as fit the memory budget.

When the metric says which positions' logits it reads (:class:`Metric.rows`),
the resumed passes of Hugging Face models compute the unembedding only there
(``logits_to_keep``); the rest of the logits tensor is zero.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from interp.analysis.metrics import Metric, scalar
from interp.errors import InterpError
from interp.hooks import hook_name


@dataclasses.dataclass(frozen=True)
class Site:
    """A slice of one hooked activation that an edit replaces.

    ``hook`` is the full hook name and ``layer`` the block it belongs to (a
    resumed pass must start there). ``head`` indexes the head axis
    (``head_dim``), ``positions`` the position axis (``pos_dim``; for an
    attention pattern, the query rows), ``channels`` a ``(start, stop)`` range
    of the last axis (MLP neurons); ``None`` means all of that axis.
    """

    hook: str
    layer: int
    head: int | None = None
    positions: tuple[int, ...] | None = None
    channels: tuple[int, int] | None = None
    head_dim: int = 2
    pos_dim: int = 1

    def index(self, ndim: int, device: Any = None) -> tuple:
        """The index of this slice in an activation with ``ndim`` axes (batch first)."""
        sel: list[Any] = [slice(None)] * ndim
        if self.head is not None:
            sel[self.head_dim] = self.head
        if self.positions is not None:
            sel[self.pos_dim] = torch.tensor(self.positions, device=device)
        if self.channels is not None:
            sel[-1] = slice(*self.channels)
        return tuple(sel)


Edit = Sequence[Site]
HEAD_KINDS = {"z", "q", "k", "v", "result"}


def site(kind: str, layer: int, *, head: int | None = None, positions: Any = None) -> Site:
    """The :class:`Site` of activation ``kind`` (``hook_name``'s kinds) in ``layer``.

    Example:
        >>> site("z", 1, head=2).hook, site("pattern", 0, head=1, positions=[3]).pos_dim
        ('blocks.1.attn.hook_z', 2)
    """
    pos = None if positions is None else tuple(int(p) for p in positions)
    if kind == "pattern" or kind == "attn_scores":
        return Site(hook_name(kind, layer), layer, head, pos, head_dim=1, pos_dim=2)
    return Site(hook_name(kind, layer), layer, head, pos)


def head_edits(heads: Sequence[tuple[int, int]], positions: Any = None) -> list[list[Site]]:
    """One edit per head: its ``hook_z`` (at ``positions``, a ``[pos]`` bool mask, if given)."""
    pos = None
    if positions is not None:
        pos = tuple(int(i) for i in torch.nonzero(positions.cpu()).flatten())
    return [[site("z", l, head=h, positions=pos)] for l, h in heads]


def edit_start(edit: Edit) -> int:
    """The first block an edit changes (a resumed pass starts there)."""
    return min(s.layer for s in edit)


_CHECKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
MAX_EDITS_PER_PASS = 32
CPU_TOKENS_PER_PASS = 2048
ATOL, RTOL = 1e-5, 1e-5  # a path must match the plain loop this closely to be used


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Metric values, one per edit in the order given; the unedited value; which path ran."""

    values: list[float]
    clean: float
    path: str
    note: str = ""
    passes: int = 0


def bytes_per_copy(model: Any, tokens: torch.Tensor) -> int:
    """Rough peak activation bytes of one forward copy of ``tokens`` (no grad)."""
    from interp.protocol import forward_bytes

    return forward_bytes(model, *tokens.shape)


def edits_per_pass(
    model: Any, tokens: torch.Tensor, n_edits: int, requested: Any, memory_budget: Any
) -> int:
    """How many edits share one forward pass.

    Raises:
        InterpError: for a non-positive or non-integer ``batch_size`` or ``memory_budget``.
    """
    from interp.protocol import available_memory, check_int, model_device

    if requested is not None:
        return min(check_int(requested, "batch_size", minimum=1), max(1, n_edits))
    if memory_budget is not None:
        budget = check_int(memory_budget, "memory_budget", minimum=1)
    else:
        budget = available_memory(model_device(model)) // 4
    by_memory = budget // max(1, bytes_per_copy(model, tokens))
    if model_device(model).type == "cpu" and memory_budget is None:
        by_tokens = -(-CPU_TOKENS_PER_PASS // tokens.numel())  # module docstring
        return max(1, min(n_edits, MAX_EDITS_PER_PASS, by_tokens, by_memory))
    return max(1, min(n_edits, MAX_EDITS_PER_PASS, by_memory))


def _checked(model: Any, name: str, check: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    """Run ``check()`` once per live model and remember its answer (weakly keyed)."""
    try:
        cached = _CHECKS.setdefault(model, {})
    except TypeError:  # pragma: no cover - model not weak-referenceable
        return check()
    if name not in cached:
        cached[name] = check()
    return cached[name]


# ------------------------------------------------------------------------- edits as hooks
def _edit_hooks(
    edits: Sequence[Edit], values: dict[str, torch.Tensor] | None, b: int
) -> list[tuple[str, Callable]]:
    """Hooks applying ``edits[i]`` to batch rows ``i*b .. (i+1)*b``: one hook per activation,
    replacing each site's slice by the same slice of ``values[hook]`` (zero without values)."""
    by_hook: dict[str, list[tuple[int, Site]]] = {}
    for i, edit in enumerate(edits):
        for st in edit:
            by_hook.setdefault(st.hook, []).append((i, st))

    def make(name: str, sites: list[tuple[int, Site]]) -> Callable:
        target_all = None if values is None else values[name]

        def hook(x: torch.Tensor, hook: Any) -> torch.Tensor:
            x = x.clone()
            for i, st in sites:
                sel = st.index(x.ndim, x.device)
                rows = x[i * b : (i + 1) * b]  # a view: writing into it writes into x
                if target_all is None:
                    rows[sel] = 0.0
                else:
                    rows[sel] = target_all[sel].to(x.dtype)
            return x

        return hook

    return [(name, make(name, sites)) for name, sites in by_hook.items()]


def repeat_copies(x: Any, k: int) -> Any:
    """``x`` (a tensor, or a tuple of them, as blocks return) repeated ``k`` times along the
    batch: the input of a pass that carries ``k`` copies; anything else is passed through."""
    if k == 1:
        return x
    if isinstance(x, torch.Tensor):
        return x.repeat(k, *([1] * (x.ndim - 1)))
    if isinstance(x, tuple):
        return tuple(repeat_copies(v, k) for v in x)
    return x


# ------------------------------------------------------------------------------ the loop
def _loop_pass(model, tokens, chunk, values) -> list[torch.Tensor]:
    """One full forward pass per edit: the reference every faster path is checked against."""
    out = []
    for edit in chunk:
        hooks = _edit_hooks([edit], values, tokens.shape[0])
        out.append(model.run_with_hooks(tokens, fwd_hooks=hooks))
    return out


# ------------------------------------------------------- resume after the edited block
class _AfterBlock:
    """``resume-after-block``: our attention-only models, ``hook_z`` edits of one layer."""

    name = "resume-after-block"

    def __init__(self, model: Any, tokens: torch.Tensor, layers: set[int]):
        self.model = model
        kept: dict[str, torch.Tensor] = {}

        def keep(x: torch.Tensor, hook: Any) -> None:
            kept[hook.name] = x

        names = [n for l in sorted(layers) for n in (hook_name("z", l), hook_name("resid_post", l))]
        self.clean_logits = model.run_with_hooks(tokens, fwd_hooks=[(n, keep) for n in names])
        self.kept = kept
        self.w_o = {l: model.W_O[l].detach() for l in layers}

    @staticmethod
    def fits(edits: Sequence[Edit]) -> bool:
        """Only edits of whole heads' ``hook_z`` in a single layer."""
        return all(
            len({st.layer for st in e}) == 1
            and all(st.hook.endswith("attn.hook_z") and st.channels is None for st in e)
            for e in edits
        )

    def run(self, chunk, values, rows) -> list[torch.Tensor]:
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
            deltas.append(
                resid + torch.einsum("bphe,hed->bpd", diff, W.to(z.dtype)).to(resid.dtype)
            )
        logits = self.model.forward_from(torch.cat(deltas) if k > 1 else deltas[0], layer)
        return list(logits.split(resid.shape[0])) if k > 1 else [logits]


# ----------------------------------------------------- resume at the first edited block
def blocks_of(model: Any) -> Any:
    blocks = getattr(model, "blocks", None)
    return blocks if isinstance(blocks, torch.nn.ModuleList) else None


@contextmanager
def skipping_blocks(blocks: Any, upto: int, output: Any) -> Iterator[None]:
    """Blocks ``0..upto-1`` return ``output`` (the clean output of block ``upto - 1``) unrun.

    ``object.__setattr__`` puts the stub in each block's instance dict, so
    ``Module.__call__`` finds it first; TransformerBridge components forward
    ordinary attribute writes to the wrapped module, which this avoids.
    """

    def stub(self: Any, *args: Any, **kwargs: Any) -> Any:
        return output

    patched = []
    try:
        for i in range(upto):
            object.__setattr__(blocks[i], "forward", types.MethodType(stub, blocks[i]))
            patched.append(blocks[i])
        yield
    finally:
        for blk in patched:
            object.__delattr__(blk, "forward")


def clean_block_inputs(
    model: Any, tokens: torch.Tensor, layers: set[int] | Sequence[int]
) -> tuple[Any, dict[int, Any]]:
    """One clean pass: its logits and, for each ``l`` in ``layers`` (all > 0), the residual
    stream entering block ``l`` as that block receives it (``hook_resid_pre`` on our
    models, the output of block ``l - 1`` on bridges), ready for :func:`skipping_blocks`
    or ``forward_from``."""
    kept: dict[int, Any] = {}
    if callable(getattr(model, "forward_from", None)):  # our models

        def keep(x: torch.Tensor, hook: Any) -> None:
            kept[int(hook.name.split(".")[1])] = x

        hooks = [(hook_name("resid_pre", l), keep) for l in sorted(layers)]
        return model.run_with_hooks(tokens, fwd_hooks=hooks), kept
    blocks = blocks_of(model)

    def grab(l: int) -> Callable:
        def hook(module: Any, args: Any, out: Any) -> None:
            kept[l] = out

        return hook

    handles = [blocks[l - 1].register_forward_hook(grab(l)) for l in sorted(layers)]
    try:
        return model(tokens), kept
    finally:
        for h in handles:
            h.remove()


class _ResumeBlocks:
    """``resume-blocks``: skip the blocks before each edit's first layer (module docstring)."""

    name = "resume-blocks"

    def __init__(self, model: Any, tokens: torch.Tensor, starts: set[int]):
        self.model = model
        self.tokens = tokens
        self.native = callable(getattr(model, "forward_from", None))
        self.clean_logits, self.kept = clean_block_inputs(model, tokens, starts - {0})
        hf = getattr(model, "interp_hf_model", None)
        params = inspect.signature(hf.forward).parameters if hf is not None else {}
        self.rows_ok = "logits_to_keep" in params

    def run(self, chunk, values, rows) -> list[torch.Tensor]:
        k = len(chunk)
        b, n = self.tokens.shape
        start = min(edit_start(edit) for edit in chunk)
        hooks = _edit_hooks(chunk, values, b)
        if self.native:
            with self.model.hooks(fwd_hooks=hooks):
                if start == 0:
                    logits = self.model(repeat_copies(self.tokens, k))
                else:
                    logits = self.model.forward_from(repeat_copies(self.kept[start], k), start - 1)
        else:
            kwargs = {}
            if rows is not None and self.rows_ok:
                kwargs["logits_to_keep"] = rows.to(self.tokens.device)
            out = repeat_copies(self.kept[start], k) if start > 0 else None
            with skipping_blocks(blocks_of(self.model), start, out):
                logits = self.model.run_with_hooks(
                    repeat_copies(self.tokens, k), fwd_hooks=hooks, **kwargs
                )
            if "logits_to_keep" in kwargs:  # scatter the kept rows back; other rows stay 0
                full = logits.new_zeros(logits.shape[0], n, logits.shape[-1])
                full[:, rows.to(logits.device)] = logits
                logits = full
        return list(logits.split(b)) if k > 1 else [logits]


# ----------------------------------------------------------------------- choosing a path
def _probe(model: Any, tokens: torch.Tensor, path_cls: Any, edit: Edit) -> tuple[bool, str]:
    """Does ``path_cls`` give the plain loop's logits for ``edit`` on a slice of ``tokens``?"""
    probe = tokens[:1, : min(tokens.shape[1], 8)]
    try:
        with torch.no_grad():
            layers = {st.layer for st in edit}
            engine = path_cls(model, probe, layers if path_cls is _AfterBlock else {min(layers)})
            got = engine.run([edit], None, None)[0]
            ref = _loop_pass(model, probe, [edit], None)[0]
        if got.shape != ref.shape:
            return False, f"{path_cls.name} gave logits of shape {tuple(got.shape)}"
        if not torch.allclose(got.float(), ref.float(), atol=ATOL, rtol=RTOL):
            diff = float((got.float() - ref.float()).abs().max())
            return False, f"{path_cls.name} differed from the plain loop by {diff:.2e}"
        return True, ""
    except Exception as exc:  # noqa: BLE001 - any failure means "this path does not apply"
        return False, f"{path_cls.name} failed its check ({type(exc).__name__}: {exc})"


def choose_path(model: Any, tokens: torch.Tensor, edits: Sequence[Edit]) -> tuple[str, str]:
    """Which path :func:`sweep` will take for these edits, and why (if not the fastest)."""
    cfg = model.cfg
    native = callable(getattr(model, "forward_from", None))
    last = cfg.n_layers - 1
    if native and getattr(cfg, "attn_only", False) and _AfterBlock.fits(edits):
        ok, why = _checked(
            model, "after-block", lambda: _probe(model, tokens, _AfterBlock, [site("z", 0, head=0)])
        )
        if ok:
            return _AfterBlock.name, ""
    else:
        why = ""
    if cfg.n_layers > 1 and (native or blocks_of(model) is not None):
        ok, why2 = _checked(
            model,
            "resume-blocks",
            lambda: _probe(model, tokens, _ResumeBlocks, [site("z", last, head=0)]),
        )
        if ok:
            return _ResumeBlocks.name, why
        why = why2
    return "loop", why or "no faster exact path for this model"


def plan(model: Any, tokens: torch.Tensor, edits: Sequence[Edit], batch_size: Any = None) -> dict:
    """What a sweep will do: ``path``, ``note``, ``edits``, ``edits_per_pass``, ``passes``."""
    path, note = choose_path(model, tokens, edits)
    k = edits_per_pass(model, tokens, len(edits), batch_size, None)
    n_chunks = len(_chunks(edits, k, path))
    return {
        "path": path,
        "note": note,
        "edits": len(edits),
        "edits_per_pass": k,
        "passes": n_chunks + 1,
    }


def _chunks(edits: Sequence[Edit], k: int, path: str) -> list[list[int]]:
    """Edit indices packed ``k`` per pass; a pass only holds edits that start in one layer."""
    order = sorted(range(len(edits)), key=lambda i: edit_start(edits[i]))
    chunks: list[list[int]] = []
    for i in order:
        start = edit_start(edits[i])
        same = chunks and edit_start(edits[chunks[-1][0]]) == start
        if chunks and len(chunks[-1]) < k and (same or path == "loop"):
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return chunks


def sweep(
    model: Any,
    tokens: torch.Tensor,
    edits: Sequence[Edit],
    metric: Metric,
    *,
    values: dict[str, torch.Tensor] | None = None,
    batch_size: Any = None,
    memory_budget: Any = None,
    progress: bool = False,
    desc: str = "sweep",
) -> SweepResult:
    """Metric values, one per edit in the order given, and the unedited value.

    ``values[hook]`` (the full activation of that hook, batch first) supplies
    each edited slice; without ``values`` the slices are zeroed. The caller
    runs this in eval mode under no_grad and has validated its inputs.

    Raises:
        InterpError: for an empty edit list, a bad batch size or budget, or a
            metric that returns a non-scalar or non-finite value.
    """
    from tqdm.auto import tqdm

    if not edits:
        raise InterpError("nothing to sweep: no edits given")
    k = edits_per_pass(model, tokens, len(edits), batch_size, memory_budget)
    path, note = choose_path(model, tokens, edits)
    n = tokens.shape[1]
    rows = None
    if metric.rows is not None:
        rows = torch.tensor(sorted({p % n for p in metric.rows}), dtype=torch.long)
    starts = {edit_start(e) for e in edits}
    chunks = _chunks(edits, k, path)
    bar = tqdm(total=len(chunks) + 1, disable=not progress, desc=desc, unit="pass")
    results: dict[int, float] = {}
    try:
        if path == _AfterBlock.name:
            engine: Any = _AfterBlock(model, tokens, starts)
            clean_logits, run = engine.clean_logits, engine.run
        elif path == _ResumeBlocks.name:
            engine = _ResumeBlocks(model, tokens, starts)
            clean_logits, run = engine.clean_logits, engine.run
        else:
            clean_logits = model(tokens)

            def run(chunk, values, rows):
                return _loop_pass(model, tokens, chunk, values)  # rows: every row

        clean = scalar(metric(clean_logits, tokens), metric.name)
        del clean_logits
        bar.update(1)
        for chunk in chunks:
            outs = run([edits[i] for i in chunk], values, rows)
            for i, logits in zip(chunk, outs):
                results[i] = scalar(metric(logits, tokens), metric.name)
            del outs
            bar.update(1)
    finally:
        bar.close()
    return SweepResult(
        values=[results[i] for i in range(len(edits))],
        clean=clean,
        path=path,
        note=note,
        passes=len(chunks) + 1,
    )


def logits_after(model: Any, tokens: torch.Tensor, resid: torch.Tensor, layer: int) -> torch.Tensor:
    """The logits of a forward pass whose residual stream after block ``layer`` is ``resid``.

    Only the blocks after ``layer`` (and the unembedding) run: our models
    resume with ``forward_from``; bridges run with blocks ``0..layer`` stubbed
    to return ``resid`` (:func:`skipping_blocks`), exactly as in a plain run.

    Raises:
        InterpError: for a model that can do neither.
    """
    if callable(getattr(model, "forward_from", None)):
        return model.forward_from(resid, layer)
    blocks = blocks_of(model)
    if blocks is None:
        raise InterpError(
            f"{type(model).__name__} cannot resume a forward pass from a cached residual; "
            "call it without cache="
        )
    with skipping_blocks(blocks, layer + 1, resid):
        return model(tokens)

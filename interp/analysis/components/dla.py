"""Direct logit attribution: what each component writes straight into the answer's logit.

The residual stream the unembedding reads is a sum of what every component
wrote: the token (and positional) embedding, each head's output
``z_h @ W_O[l, h]`` plus its layer's output bias, each MLP's output. The
final normalisation divides that sum by one scale per position; with the
scale *frozen* at its value in this run (the standard treatment,
TransformerLens's ``apply_ln_to_stack``; Elhage et al. 2021, Wang et al. 2022)
the readout is linear, so each component's share of
``logit[answer] - logit[wrong]`` (or of ``logit[answer]``) is

    (c - mean(c)) / scale . (w * (W_U[:, answer] - W_U[:, wrong]))

(no mean for RMSNorm; ``w`` is the norm's weight), and the shares, with one
``bias`` row for the norm's bias and ``b_U``, add up to the model's own
logit difference. Nothing is folded into the weights, so this is exact on
RMSNorm models and bridges as they are; TransformerLens's stacks are not
(they assume a folded norm: its DLA refuses a bridge outside compatibility
mode, and ``apply_ln_to_stack`` on an unfolded RMSNorm model leaves the norm's
weight out). Whatever an architecture adds that these pieces miss (a parallel
block's shared terms, a logit soft-cap) is an explicit ``remainder`` row,
recorded with its reason in ``df.attrs``, never a silent gap.

"Direct" means only the path straight to the logits: a head that moves
information for later heads writes little here and can still matter a lot
(path patching measures those paths).

Example:
    >>> from interp.models import load_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_model("induction-2l")
    >>> data = repeated_random_tokens(4, 10, d_vocab=64, seed=0)
    >>> answer = data.tokens[:, 12]  # the token after position 11's earlier copy
    >>> df = direct_logit_attribution(model, data.tokens[:, :12], answer=answer, wrong=0)
    >>> df.nlargest(1, "value")["label"].item(), round(float(df["value"].sum()), 3) == round(
    ...     df.attrs["total"], 3)
    ('L1H1', True)
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis.components._dla_rows import (  # noqa: F401  (REMAINDER_TOL, head_grid: public here)
    REMAINDER_TOL,
    head_grid,
    remainder_rows,
    table,
)
from interp.analysis.components._readout import (
    check_lm_head,
    final_resid_name,
    read_positions,
    token_ids,
)
from interp.core.checks import check_not_padding, check_tokens
from interp.core.errors import InterpError
from interp.core.glossary import retired_words
from interp.core.hooks import head_label, hook_name
from interp.core.protocol import HookedModel, check_model, eval_no_grad, hook_names
from interp.core.shapes import Tokens
from interp.engine.cache import cache_work, check_cache
from interp.engine.chunks import Estimate
from interp.engine.cost import work_of
from interp.engine.footprints import dla_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

By = Literal["head", "layer", "component"]
BYS: tuple[str, ...] = ("head", "layer", "component")


_CAPPED = (
    "logits are soft-capped ({cap:g} * tanh(x / {cap:g})) after the unembedding: the rows and "
    "the total are the logits before the cap"
)
_ONE_ROW = (-1,)  # the one logit row a pass unembeds when its logits are not read


def _names(model: HookedModel) -> dict[str, Any]:
    """The hooks a decomposition reads, for the hooks this model has."""
    have = hook_names(model)
    L = model.cfg.n_layers
    names = {
        "embed": hook_name("embed"),
        "final": final_resid_name(model),
        "scale": hook_name("ln_final_scale"),
        "z": [hook_name("z", l) for l in range(L)],
        "mlp_out": [hook_name("mlp_out", l) for l in range(L)],
    }
    post_mlp = [f"blocks.{l}.ln2_post.hook_out" for l in range(L)]  # Gemma-2's sandwich norm
    if all(name in have for name in post_mlp):
        names["mlp_out"] = post_mlp  # what the MLP writes into the stream: after that norm
    names["pos_embed"] = hook_name("pos_embed") if hook_name("pos_embed") in have else None
    if names["mlp_out"][0] not in have:
        names["mlp_out"] = []
    if names["scale"] not in have:
        names["scale"] = None
    return names


@retired_words(positions="at", unit="by")
def direct_logit_attribution(
    model: HookedModel,
    tokens: Tokens,
    *,
    answer: Any,
    wrong: Any = None,
    at: Any = -1,
    by: By = "head",
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Each component's direct share of ``logit[answer] - logit[wrong]`` (module docstring).

    With the final norm's scale frozen at its value in this run, each component ``c``'s share
    is ``(c - mean(c)) / scale . (w * (W_U[:, answer] - W_U[:, wrong]))`` (no mean for
    RMSNorm; ``w`` the norm's weight), and the shares, with one ``bias`` row, add up to the
    model's own logit difference; what they miss is an explicit ``remainder`` row. One
    forward pass, or a read of ``cache``; the prompts run in chunks under ``memory_budget``
    (:mod:`interp.engine.chunks`; the shares are per sequence, so chunks give the numbers of
    one batch).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), with a language-model head.
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        answer: The token(s) a metric, DLA or lens follows (one for all sequences or one per
            sequence): an int or a string of digits is a token id, any other string is text
            that must be one token.
        wrong: The other token(s) a metric, DLA or lens follows: the one whose logit is
            subtracted, in the same forms; ``None`` attributes ``logit[answer]`` alone.
        at: Where logits are *read*: an int or ints, negative from the end (default ``-1``,
            the last position).
        by: What a table's row is: ``'head'`` (default: one row per head, plus the
            embeddings, each layer's attention output bias where there is one, each MLP and
            the biases), ``'component'`` (each layer's attention and MLP) or ``'layer'``
            (each block's attention and MLP together).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per component: ``component, layer, head, label, value``, where
        ``value`` is the mean share over sequences and positions, in logits (before any
        final soft cap). ``attrs`` follow :data:`interp.outputs.frames.SCHEMA`, plus
        ``total`` (the model's own mean logit difference, which the rows sum to),
        ``sum_of_rows``, ``remainder``, ``remainder_tol`` (and ``remainder_reason`` when
        a remainder row is shown), ``final_norm``, ``softcap``, ``notes``, ``at``, ``by``
        and ``chunks``. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown ``by``, a model without an LM head (an
            encoder such as MiniLM) or whose output head is not its final norm and
            unembedding, a final norm without ``hook_scale``, answers that are not one
            token or do not fit the batch, ``wrong`` equal to ``answer``, positions out
            of range or on right padding, a cache of other tokens, a retired
            parameter name (``positions=``, ``unit=``), or logits (or a component's share)
            that are NaN or infinite.
    """
    cfg = check_model(model)
    if by not in BYS:
        raise InterpError(f"unknown by {by!r}; choose one of {', '.join(BYS)}")
    check_lm_head(model, "direct logit attribution")
    tokens = check_tokens(model, tokens, chunked=True)
    b, n = tokens.shape
    ans = token_ids(model, answer, b, "answer").to(tokens.device)
    bad = None if wrong is None else token_ids(model, wrong, b, "wrong").to(tokens.device)
    if bad is not None and bool((ans == bad).any()):
        raise InterpError("answer and wrong name the same token; the difference would be 0")
    pos = read_positions(at, n, default_all=False)
    check_not_padding(model, tokens, pos, "direct logit attribution")
    names = _names(model)
    if runtime_of(model).norm("final") is not None and names["scale"] is None:
        raise InterpError(
            "this model's final norm has no hook_scale, so its scale cannot be frozen and the "
            "shares would not add up; direct logit attribution needs a model that hooks it"
        )
    wanted = [names["embed"], names["final"], *names["z"], *names["mlp_out"]]
    wanted += [x for x in (names["pos_embed"], names["scale"]) if x]
    # a forward pass whose logits are not read (unembedded at one row where the runtime can)
    # and the hooks' activations at the positions read
    rows = runtime_of(model).unembedded(_ONE_ROW)
    # one pass, unembedding one row where the runtime can (every row where it cannot)
    work = round(work_of(model, n, blocks=1.0, rows=n if rows is None else len(rows)), 3)
    reads = len(wanted) * len(pos)
    foot = dla_footprint(model, n, reads=reads, rows=rows, cached=cache is not None)
    checked: dict[str, Any] = {}

    def prepare(chunks: list[slice]) -> float:
        runtime_of(model).check_readout("direct logit attribution")
        with eval_no_grad(model):
            checked["acts"] = check_cache(model, tokens, cache, needs=wanted)
        return 0.0  # the pass is counted below: one, or the cache's

    def chunk(c: Chunk) -> dict[str, Any]:
        sl, acts = c.rows, checked["acts"]
        with eval_no_grad(model):
            if acts is None:
                got, read = _at_positions(model, tokens[sl], wanted, pos), list(range(len(pos)))
            else:
                got, read = _Slice(acts, sl), pos
            part = _shares(model, got, names, tokens[sl], ans[sl], _rows(bad, sl), read)
        return {"parts": [part]}  # rows: the chunks' in order

    task = Task(
        "direct_logit_attribution", foot, work=work,
        chunk=chunk, combine={"parts": "rows"}, prepare=prepare, fix="use shorter prompts",
        desc="direct logit attribution", inputs=(tokens, answer, wrong, pos, by),
    )  # fmt: skip
    out = run(
        model, (b, n), task, memory_budget=memory_budget, estimate=estimate, progress=progress
    )
    if isinstance(out, Estimate):
        return out
    parts, acts = out.values["parts"], checked["acts"]
    rows, attrs = remainder_rows(parts, runtime_of(model).norm("final"))
    cap = runtime_of(model).final_softcap
    df = table(rows, by, cfg.n_layers)
    df.attrs.update(
        table_attrs(
            "direct_logit_attribution",
            description="each component's direct share of the logit (difference), the final "
            "norm's scale frozen from this run",
            method="exact",
            metric="logit[answer] - logit[wrong]" if bad is not None else "logit[answer]",
            unit="logits",
            model=model,
            forward_equivalents=work
            if cache is None
            else round(work_of(model, n, blocks=cache_work(acts)), 3),
            chunks=out.chunks,
            at=pos,
            by=by,
            sum_of_rows=float(df["value"].sum()),
            softcap=cap,
            notes=[] if cap is None else [_CAPPED.format(cap=cap)],
            **attrs,
        )
    )
    return df


def _at_positions(
    model: HookedModel, tokens: Tokens, names: list[str], pos: list[int]
) -> dict[str, torch.Tensor]:
    """One forward pass keeping each hook's activation at ``pos`` only (``[batch, P, ...]``):
    cheaper than a cache of every position, and all DLA reads."""
    kept: dict[str, torch.Tensor] = {}
    at = torch.tensor(pos, device=tokens.device)

    def keeper(name: str) -> Any:  # keyed by the name asked for (aliases fire as themselves)
        def keep(x: torch.Tensor, hook: Any) -> None:
            kept[name] = x.index_select(1, at.to(x.device))

        return keep

    runtime_of(model).run(tokens, hooks=[(n, keeper(n)) for n in names], rows=_ONE_ROW)
    return kept  # the logits are not read: unembedded at one row where the runtime can


def _shares(model: HookedModel, acts, names, tokens, ans, bad, pos):
    """The shares ``[batch, P]`` of every piece, the model's own total ``[batch, P]``, how
    much of the final stream the pieces miss, the stream's largest entry, the largest logit
    read and the logits' dtype. In float32 on the tokens' device (a model split over
    devices: each layer's activations at the read positions, and the weights it reads, are
    brought there)."""
    cfg = model.cfg
    dev = tokens.device

    def read(name: str) -> torch.Tensor:  # an activation at the read positions, float32
        x = acts[name]
        return x[:, torch.tensor(pos, device=x.device)].to(dev).float()

    final = read(names["final"])  # [batch, P, d_model]
    rt = runtime_of(model)
    W_U = model.W_U.detach()  # only the answers' columns are read (and made float32)

    def column(ids: torch.Tensor) -> torch.Tensor:  # [batch] ids -> [batch, d_model]
        return W_U[:, ids.to(W_U.device)].T.to(dev).float()

    direction = column(ans)
    if bad is not None:
        direction = direction - column(bad)
    norm = rt.norm("final")
    u = direction
    gain = None if norm is None else norm.gain  # weight, or Gemma's 1 + weight
    if gain is not None:
        u = u * gain.to(dev).float()
    if norm is not None and norm.centred:
        u = u - u.mean(-1, keepdim=True)  # (c - mean c) . w*d = c . (w*d - mean(w*d))
    if norm is None:
        scale = torch.ones(final.shape[:2] + (1,), device=final.device)
    else:  # its hook_scale was checked before the forward pass
        scale = read(names["scale"])  # [batch, P, 1]

    def share(vec: torch.Tensor) -> torch.Tensor:  # [batch, P, d_model] -> [batch, P]
        return torch.einsum("bpd,bd->bp", vec.float(), u) / scale[..., 0]

    rows: list[tuple[str, int | None, int | None, str, torch.Tensor]] = []
    built = torch.zeros_like(final)
    emb = read(names["embed"])
    rows.append(("embed", None, None, "embed", share(emb)))
    built += emb
    if names["pos_embed"] is not None and names["pos_embed"] in acts:
        pe = read(names["pos_embed"])
        if pe.shape == emb.shape:
            rows.append(("pos_embed", None, None, "pos_embed", share(pe)))
            built += pe
    b_O = rt.output_bias()
    for l in range(cfg.n_layers):
        W_O = rt.layer_weight("W_O", l).to(dev).float()  # [head, d_head, d_model]
        z = read(names["z"][l])  # [batch, P, head, d_head]
        has_bias = b_O is not None and bool(b_O[l].abs().max() > 0)
        bias = b_O[l].to(dev).float().expand_as(final) if has_bias else None
        post = rt.norm("ln1_post", l)
        if post is None:
            v = torch.einsum("hed,bd->bhe", W_O, u)  # each head's readout direction
            per_head = torch.einsum("bphe,bhe->bph", z, v) / scale  # [batch, P, head]
            built += torch.einsum("bphe,hed->bpd", z, W_O)
        else:  # a sandwich norm (Gemma-2): each head's write through it, its scale frozen
            writes = list(torch.einsum("bphe,hed->hbpd", z, W_O))
            writes = post.frozen(writes + ([] if bias is None else [bias]))
            bias = writes.pop() if bias is not None else None
            per_head = torch.stack([share(w) for w in writes], -1)
            built += sum(writes[1:], writes[0]) + (0 if bias is None else bias)
        for h in range(cfg.n_heads):
            rows.append(("head", l, h, head_label(l, h), per_head[..., h]))
        if bias is not None:
            rows.append(("attn_bias", l, None, f"L{l}.attn_bias", share(bias)))
            if post is None:
                built += bias
        if names["mlp_out"]:
            mlp = read(names["mlp_out"][l])
            rows.append(("mlp", l, None, f"L{l}.mlp", share(mlp)))
            built += mlp
    const = torch.zeros(final.shape[:2], device=final.device)
    if norm is not None and norm.bias is not None:
        const = const + (direction * norm.bias.to(dev).float()).sum(-1)[:, None]
    b_U = rt.unembed_bias()
    if b_U is not None:
        b_U = b_U.to(dev).float()
        gap = b_U[ans] - (0 if bad is None else b_U[bad])
        const = const + gap[:, None]
    rows.append(("bias", None, None, "bias", const))
    given = acts[names["final"]]
    # the logits before any final soft cap: the pieces sum to those (the cap is not linear)
    logits = rt.readout(given[:, torch.tensor(pos, device=given.device)], softcap=False).to(dev)
    dtype = logits.dtype  # the model's: its logits are rounded there
    logits = logits.float()  # [batch, P, d_vocab]

    def logit_of(ids: torch.Tensor) -> torch.Tensor:  # [batch] ids -> [batch, P] logits
        return logits.gather(-1, ids[:, None, None].expand(-1, len(pos), 1))[..., 0]

    read = [logit_of(ans)] + ([] if bad is None else [logit_of(bad)])
    total = read[0] if bad is None else read[0] - read[1]
    missing = (final - built).abs().max().item()
    size = max(float(x.abs().max()) for x in read)
    return rows, total, missing, float(final.abs().max()), size, dtype


def _rows(ids: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
    return None if ids is None else ids[sl]


class _Slice:
    """The prompts ``sl`` of a checked cache's activations."""

    def __init__(self, acts: Any, sl: slice):
        self.acts, self.sl = acts, sl

    def __contains__(self, name: str) -> bool:
        return name in self.acts

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.acts[name][self.sl]

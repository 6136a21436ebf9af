"""The logit lens: what the model would predict if it stopped after each block.

nostalgebraist (2020) read the residual stream after every layer through the
model's final norm and unembedding. Here stage 0 is the embeddings
(``blocks.0.hook_resid_pre``) and stage ``l + 1`` the stream after block ``l``
(``blocks.{l}.hook_resid_post``); the final norm is *recomputed* on each
stage's own residual by the model's own norm module, not applied with the final
stage's scale (the bug TransformerLens fixed with ``recompute_ln``, TL #1076),
and the last stage therefore reproduces the model's logits exactly.

Only the positions asked for are unembedded, in chunks of rows whose logits
take at most ``CHUNK_BYTES`` (64 MiB) each: a 30-layer lens over 256 positions
of SmolLM2 (49,152 tokens) would need 1.6 GB of logits at once; this one holds
a few chunks (a chunk's logits, its log-probabilities and the rank comparison),
which ``tests/test_pretrained.py`` keeps under 400 MiB above the cached stream.

Example:
    >>> from interp.models import load_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_model("induction-2l")
    >>> tokens = repeated_random_tokens(1, 10, d_vocab=64, seed=0).tokens
    >>> lens = logit_lens(model, tokens, at=[15], k=3)
    >>> lens["stage"].tolist(), lens["target_rank"].tolist()[-1]
    ([0, 1, 2], 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from interp.analysis.components._readout import (
    CHUNK_BYTES,
    check_lm_head,
    chunks,
    read_positions,
    token_ids,
)
from interp.core.checks import check_int, check_not_padding, check_tokens
from interp.core.errors import InterpError
from interp.core.glossary import retired_words
from interp.core.hooks import hook_name, stage_names
from interp.core.protocol import HookedModel, check_model, eval_no_grad
from interp.core.shapes import Tokens
from interp.engine.cache import cache_work, check_cache, pass_share, run_until
from interp.engine.chunks import Estimate
from interp.engine.cost import work_of
from interp.engine.footprints import lens_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

# what :func:`_read` gives for each row: top-k probabilities and ids, the target's log-prob, rank
_READ = ("top_p", "top_i", "target_logp", "target_rank")


def _labels(model: HookedModel, ids: list[int]) -> list[str]:
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return [str(i) for i in ids]
    return [tok.decode([i]) for i in ids]


@retired_words(positions="at")
def logit_lens(
    model: HookedModel,
    tokens: Tokens,
    *,
    at: Any = None,
    k: int = 5,
    target: Any = None,
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """One row per sequence, stage and position: the top ``k`` tokens, and the target's fate.

    Stage 0 is the embeddings (``blocks.0.hook_resid_pre``) and stage ``l + 1`` the stream
    after block ``l``; each is read through the model's final norm, *recomputed* on that
    stage's own residual, and its unembedding (nostalgebraist 2020), so the last stage
    reproduces the model's logits exactly. Only the positions asked for are unembedded. One
    forward pass stopped before the unembedding, or a read of ``cache``; the prompts run in
    chunks under ``memory_budget`` (:mod:`interp.engine.chunks`; rows are per sequence, so
    chunks give the rows of one batch).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), with a language-model head.
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        at: Where logits are *read*: an int or ints, negative from the end; ``None`` (default)
            is every position.
        k: How many top tokens to show per row (at least 1, at most the vocabulary).
        target: The token(s) the lens follows (one for all sequences or one per sequence):
            an int or a string of digits is a token id, any other string is text that must
            be one token; ``None`` is each position's next token (none at the last
            position).
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
        A table with one row per (sequence, stage, position): ``sequence, stage,
        stage_name, position, token`` (the input token there), ``top1 .. top{k}`` (token
        strings, ids without a tokenizer) with ``p1 .. p{k}`` (probabilities), then
        ``target_id, target, target_p, target_logp, target_rank`` (rank 1 = top; NA where
        there is no target). ``attrs`` follow :data:`interp.outputs.frames.SCHEMA`, plus
        ``at``, ``k``, ``chunk_bytes`` and ``chunks``. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for a model without an LM head (or whose output head is not its final
            norm and unembedding), ``k`` out of range, a target that is not one token or
            does not fit the batch, positions out of range or on right padding, a cache of
            other tokens, or a retired parameter name (``positions=``).
    """
    cfg = check_model(model)
    check_lm_head(model, "the logit lens")
    tokens = check_tokens(model, tokens, chunked=True)
    b, n = tokens.shape
    d_vocab = int(getattr(cfg, "d_vocab_out", None) or cfg.d_vocab)
    k = check_int(k, "k", minimum=1)
    if k > d_vocab:
        raise InterpError(f"k={k} is more than the vocabulary's {d_vocab} tokens")
    pos = read_positions(at, n, default_all=True)
    check_not_padding(model, tokens, pos, "the logit lens")
    if target is None:
        tgt = torch.full((b, len(pos)), -1, dtype=torch.long)
        for j, p in enumerate(pos):
            if p + 1 < n:
                tgt[:, j] = tokens[:, p + 1].cpu()
    else:
        tgt = token_ids(model, target, b, "target")[:, None].expand(b, len(pos)).clone()
    L = cfg.n_layers
    names = [hook_name("resid_pre", 0), *(hook_name("resid_post", l) for l in range(L))]
    rt = runtime_of(model)
    # per prompt: every stage's stream at the positions read (one tensor, filled by a pass
    # stopped before the unembedding: a block's transients); fixed: a chunk of readout rows,
    # its logits and log-probabilities at once, then the log-probabilities beside the
    # comparison with the target's (bool) and its int32 count: 2.25 chunks
    chunk = min(CHUNK_BYTES, b * len(names) * len(pos) * d_vocab * 4)
    checked: dict[str, Any] = {}
    reads = len(names) * len(pos)  # rows unembedded per prompt: each stage at each position
    foot = lens_footprint(model, n, reads=reads, readout=chunk, cached=cache is not None)

    def prepare(chunks: list[slice]) -> float:
        rt.check_readout("the logit lens")
        with eval_no_grad(model):
            checked["acts"] = check_cache(model, tokens, cache, needs=names)
        return 0.0  # counted below: the pass stopped after the last stage, or the cache's

    def read(c: Chunk) -> dict[str, Any]:
        sl, acts = c.rows, checked["acts"]
        with eval_no_grad(model):
            if acts is None:
                streams = _streams(model, tokens[sl], names, pos)
            else:
                streams = torch.stack([acts[nm][sl][:, pos] for nm in names])
            got = _read(rt, streams, tgt[sl], k)  # [stage, batch, P, d_model] read
        # each [stage * batch * P, ...] as [batch, stage, P, ...]: rows, prompt by prompt
        return {
            key: x.view(L + 1, -1, len(pos), *x.shape[1:]).movedim(1, 0)
            for key, x in zip(_READ, got)
        }

    planned = work_of(model, n, blocks=pass_share(L, names), rows=reads)
    task = Task(
        "logit_lens", foot, work=planned, chunk=read,
        combine=dict.fromkeys(_READ, "rows"), prepare=prepare,
        fix="read fewer positions (at=) or use shorter prompts", desc="logit lens",
        inputs=(tokens, pos, k, tgt),
    )  # fmt: skip
    out = run(
        model, (b, n), task, memory_budget=memory_budget, estimate=estimate, progress=progress
    )
    if isinstance(out, Estimate):
        return out
    acts = checked["acts"]
    blocks = pass_share(L, names) if acts is None else cache_work(acts)
    work = round(work_of(model, n, blocks=blocks, rows=reads), 3)
    top_p_all, top_i_all, logp_all, rank_all = (
        out.values[key].movedim(0, 1).flatten(0, 2) for key in _READ
    )
    stages = torch.arange(L + 1)[:, None, None].expand(L + 1, b, len(pos)).reshape(-1)
    seqs = torch.arange(b)[None, :, None].expand(L + 1, b, len(pos)).reshape(-1)
    ps = torch.tensor(pos)[None, None, :].expand(L + 1, b, len(pos)).reshape(-1)
    names_of = stage_names(L)
    ids_at = tokens.cpu()
    cols: dict[str, Any] = {
        "sequence": seqs.numpy(),
        "stage": stages.numpy(),
        "stage_name": [names_of[s] for s in stages.tolist()],
        "position": ps.numpy(),
        "token": _labels(model, ids_at[seqs, ps].tolist()),
    }
    for j in range(k):
        cols[f"top{j + 1}"] = _labels(model, top_i_all[:, j].tolist())
        cols[f"p{j + 1}"] = top_p_all[:, j].numpy()
    t_ids = tgt[None].expand(L + 1, b, len(pos)).reshape(-1)
    has = t_ids >= 0
    # nullable ids and ranks, built from their arrays (a Python loop per row cost a pass)
    cols["target_id"] = pd.arrays.IntegerArray(t_ids.numpy().astype(np.int64), ~has.numpy())
    cols["target"] = [
        lab if h else "" for lab, h in zip(_labels(model, t_ids.clamp(min=0).tolist()), has)
    ]
    cols["target_p"] = logp_all.exp().numpy()
    cols["target_logp"] = logp_all.numpy()
    ranks = rank_all.numpy().astype(np.int64)
    cols["target_rank"] = pd.arrays.IntegerArray(ranks, ranks <= 0)
    df = pd.DataFrame(cols)
    df.attrs.update(
        table_attrs(
            "logit_lens",
            description="what the model would predict after each block: the final norm "
            "recomputed on each stage's residual, then unembedded",
            method="exact",
            metric="next token" if target is None else "given target",
            unit="probability",
            model=model,
            forward_equivalents=work,
            at=pos,
            k=k,
            chunk_bytes=CHUNK_BYTES,
            chunks=out.chunks,
        )
    )
    return df


def _streams(model: HookedModel, tokens: torch.Tensor, names: list[str], pos: list[int]) -> Any:
    """``[stage, batch, P, d_model]``: each hook's residual stream at the positions ``pos``,
    copied into one tensor made before the pass (one pass, stopped after the last hook), so
    no block's stream is held between the next blocks' transients (they would pin the
    allocator's heap, which would then grow block by block)."""
    at = torch.tensor(pos, device=tokens.device)
    shape = (len(names), tokens.shape[0], len(pos), int(model.cfg.d_model))
    kept: dict[str, torch.Tensor] = {}  # "out": made at the first hook, in its dtype
    slot = {nm: i for i, nm in enumerate(names)}
    seen: set[str] = set()

    def keeper(name: str) -> Any:
        def keep(x: torch.Tensor, hook: Any) -> None:
            if "out" not in kept:
                kept["out"] = torch.empty(shape, dtype=x.dtype, device=x.device)
            kept["out"][slot[name]].copy_(x.detach().index_select(1, at.to(x.device)))
            seen.add(name)

        return keep

    try:  # one pass through the engine, stopped right after the last stage
        run_until(model, tokens, [(nm, keeper(nm)) for nm in names], names[-1])
    except InterpError:
        pass  # the first stage it never fired is named below
    missing = [nm for nm in names if nm not in seen]
    if missing:
        raise InterpError(f"the logit lens read {missing[0]}, which this model never fired")
    return kept["out"]


def _read(rt: Any, stack: torch.Tensor, tgt: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """Top-``k`` probabilities and ids, the target's log-probability and rank, of every row of
    ``stack`` (``[stage, batch, P, d_model]``) through the final norm and unembedding, flat
    ``[stage * batch * P, ...]``, unembedding at most ``CHUNK_BYTES`` of logits at a time."""
    S, b, P, _ = stack.shape
    flat = stack.reshape(-1, stack.shape[-1])
    tgt_flat = tgt[None].expand(S, b, P).reshape(-1).to(flat.device)
    d_vocab = int(getattr(rt.cfg, "d_vocab_out", None) or rt.cfg.d_vocab)
    n = flat.shape[0]  # the results are made first: nothing a chunk leaves pins the heap
    top_p, top_i = torch.empty(n, k), torch.empty(n, k, dtype=torch.long)
    t_logp, t_rank = torch.empty(n), torch.empty(n, dtype=torch.long)
    for part in chunks(n, d_vocab):
        logp = F.log_softmax(rt.readout(flat[part]).float(), dim=-1)  # [rows, d_vocab]
        v, i = logp.topk(k, dim=-1)
        top_p[part] = v.exp().cpu()
        top_i[part] = i.cpu()
        t = tgt_flat[part]
        safe = t.clamp(min=0)
        lp = logp.gather(-1, safe[:, None])[:, 0]
        # int32: a bool sum in int64 makes a hidden copy of 8 bytes per logit
        rank = (logp > lp[:, None]).sum(-1, dtype=torch.int32) + 1
        t_logp[part] = torch.where(t >= 0, lp, torch.nan).cpu()
        t_rank[part] = torch.where(t >= 0, rank, -1).cpu()
        del logp, v, i, lp, rank
    return top_p, top_i, t_logp, t_rank

"""Which heads move attention from an ambiguous word to its disambiguating clue word?

For each sentence the query is the word's last token; each head's
``clue_attention`` is the attention mass on the clue's tokens, averaged over
sentences. Because some heads attend to everything near, the table also
gives ``other_per_token``: the mean attention per *other* ordinary token the
query can see (not the first token, which is a BOS/CLS attention sink, not
special tokens, not the word itself, not the clue), and ``lift`` =
clue attention per clue token / other attention per token. A lift well
above 1 says the head singles out the clue.

This is the article's bank head, found in a real model. It names a
candidate; whether the head *carries* the sense is an intervention question
(ablate it and measure the word's state, as the pretrained lab does).

Example:
    >>> from interp.models.hf import random_gpt2
    >>> from interp.analysis.senses.words import encode_word
    >>> model = random_gpt2(2, vocab=30)
    >>> items = [encode_word(model, "t5 t7 t9 t3", word="t3", clue="t7")]
    >>> table = clue_attention(model, items)
    >>> list(table.columns)
    ['layer', 'head', 'label', 'clue_attention', 'other_per_token', 'lift']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from interp.analysis.senses.states import batches_by_length
from interp.analysis.senses.words import WordTokens
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel, check_model, eval_no_grad, is_causal, model_device
from interp.engine.cache import cache_work, check_cache, run_until
from interp.engine.cost import Flops, cache_pass_work, work_of
from interp.outputs.frames import described, head_frame


def _key_masks(model: HookedModel, item: WordTokens, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n]`` bool masks of the clue keys and the other ordinary keys for the word's query.

    ``n`` is the batch's length (the item's own: batches hold equal lengths).
    """
    q = item.word_pos
    visible = torch.arange(n) <= q if is_causal(model) else torch.ones(n, dtype=torch.bool)
    clue = torch.zeros(n, dtype=torch.bool)
    clue[list(item.clue_pos)] = True
    other = visible & ~clue
    other[0] = False
    other[list(item.word_positions)] = False
    special = set(getattr(model.tokenizer, "all_special_ids", []) or [])
    ids = item.tokens[0].tolist()
    other &= torch.tensor([t not in special for t in ids])
    return clue, other


def clue_attention(
    model: HookedModel, items: Sequence[WordTokens], *, cache: Any = None
) -> pd.DataFrame:
    """One row per head: ``clue_attention``, ``other_per_token`` and ``lift`` (module docstring).

    For each sentence the query is the word's last token; ``clue_attention`` is the
    attention mass on the clue's tokens, ``other_per_token`` the mean attention per *other*
    ordinary token the query can see (not the first token, not special tokens, not the
    word, not the clue), both averaged over sentences, and ``lift`` the clue attention per
    clue token over the other attention per token: well above 1, the head singles out the
    clue. Sentences of equal length run together, one forward pass per length stopped after
    the last pattern, or a read of ``cache``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        items: The sentences, each encoded with a clue (:func:`interp.analysis.encode_word`
            with ``clue=``).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. Here ``tokens`` are all items' tokens stacked,
            so the items must share one length.

    Returns:
        A table with one row per head: ``layer, head, label, clue_attention,
        other_per_token, lift``. ``attrs`` follow :data:`interp.outputs.frames.SCHEMA`.

    Raises:
        InterpError: for no items, an item encoded without a clue, or a cache
            for items of different lengths or of other tokens.
    """
    cfg = check_model(model)
    if not items:
        raise InterpError("no sentences given")
    missing = [it.text for it in items if not it.clue_pos]
    if missing:
        raise InterpError(f"encode each sentence with clue=...: none given for {missing[0]!r}")
    L, H = cfg.n_layers, cfg.n_heads
    clue_sum = torch.zeros(L, H)
    # FLOPs (interp.engine.cost): each length's pass stopped at the last pattern, over one
    # plain pass of every item
    fl = Flops.of(model)
    plain = sum(fl.plain(it.n_tokens) for it in items)
    work = 0.0
    other_sum = torch.zeros(L, H)
    per_clue_token = torch.zeros(L, H)
    with eval_no_grad(model):
        if cache is not None:
            if len({it.n_tokens for it in items}) != 1:
                raise InterpError("cache= needs items of one length (the cache of their tokens)")
            batches = [(list(range(len(items))), torch.cat([it.tokens for it in items]))]
        else:
            batches = [
                (idx, torch.cat([items[i].tokens for i in idx]).to(model_device(model)))
                for idx in batches_by_length(items).values()
            ]
        for idx, tokens in batches:
            pos = torch.tensor([items[i].word_pos for i in idx])
            masks = [_key_masks(model, items[i], tokens.shape[1]) for i in idx]
            clue_m = torch.stack([m[0] for m in masks]).float()  # [batch, key]
            other_m = torch.stack([m[1] for m in masks]).float()
            n_other = other_m.sum(-1).clamp(min=1)  # [batch]

            def add(layer: int, pattern: torch.Tensor, pos=pos, c=clue_m, o=other_m, n=n_other):
                at = torch.arange(len(pos), device=pattern.device)
                rows = pattern[at, :, pos.to(pattern.device)].float().cpu()  # [batch, head, key]
                on_clue = torch.einsum("bhk,bk->bh", rows, c)
                clue_sum[layer] += on_clue.sum(0)
                per_clue_token[layer] += (on_clue / c.sum(-1)[:, None]).sum(0)
                other_sum[layer] += (torch.einsum("bhk,bk->bh", rows, o) / n[:, None]).sum(0)

            if cache is not None:
                if len(idx) != len(items):
                    raise InterpError(
                        "cache= needs items of one length (the cache of their tokens)"
                    )
                names = [hook_name("pattern", l) for l in range(L)]
                checked = check_cache(model, tokens.to(model_device(model)), cache, needs=names)
                for l, name in enumerate(names):
                    add(l, checked[name])
                work = work_of(model, tokens.shape[1], blocks=cache_work(checked))
                continue

            def grab(pattern: torch.Tensor, hook: Any, add=add) -> None:
                add(int(hook.name.split(".")[1]), pattern)

            hooks = [(hook_name("pattern", l), grab) for l in range(L)]
            run_until(model, tokens, hooks, hooks[-1][0])  # nothing after the last pattern
            n = tokens.shape[1]
            work += cache_pass_work(model, n, [hooks[-1][0]]) * len(idx) * fl.plain(n) / plain
    clue_mean = clue_sum / len(items)
    other_mean = other_sum / len(items)
    lift = (per_clue_token / len(items)) / other_mean.clamp(min=1e-12)
    return described(
        head_frame(
            {"clue_attention": clue_mean, "other_per_token": other_mean, "lift": lift}, L, H
        ),
        "clue_attention",
        description="the attention each head puts from an ambiguous word to its clue words",
        method="exact",
        unit="share of a query row's attention",
        model=model,
        forward_equivalents=work,  # every item's passes, in passes over all the items
    )

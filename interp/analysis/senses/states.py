"""How a word's hidden state changes with its context, layer by layer.

For each sentence, :func:`word_states` reads the target word's vector at its
last token: stage 0 is the **token embedding** (the row of ``W_E``, which is
the same in every context), stage ``l + 1`` the residual stream after block
``l`` (``blocks.{l}.hook_resid_post``). :func:`sense_similarity` then compares
the word across sentences: the mean cosine between uses of a word in
*different* senses, and between two uses in the *same* sense (the control: a
context change alone also lowers the cosine), raw and centred (the mean
vector over all sentences at that stage is subtracted first, because the
residual streams of real models share large common directions that push
every raw cosine towards 1).

Stage 0 is 1.0 by construction when a word tokenizes the same way in every
sentence; what the falling curve shows is that context enters the word's
vector. It does not show *which* component moved it, or that the model
uses the difference.

Example:
    >>> import torch
    >>> states = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]],
    ...                        [[1.0, 0.0], [1.0, 0.1]], [[1.0, 0.0], [0.1, 1.0]]])
    >>> table = sense_similarity(states, words=["bank"] * 4, senses=["river", "money"] * 2)
    >>> table[["stage", "stage_name", "cross_sense", "same_sense"]].round(2).values.tolist()
    [[0, 'token embedding', 1.0, 1.0], [1, 'L0', 0.1, 1.0]]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import combinations, product
from typing import Any

import pandas as pd
import torch

from interp.analysis.senses.words import WordTokens
from interp.core.errors import InterpError
from interp.core.hooks import hook_name, stage_names
from interp.core.protocol import HookedModel, check_model, eval_no_grad, is_causal, model_device
from interp.engine.cache import check_cache, run_until
from interp.outputs.frames import described


def state_names(n_layers: int) -> list[str]:
    """``["token embedding", "L0", ...]``: the rows of :func:`word_states` (stage ``l + 1`` is
    the word's vector after block ``l``; :func:`interp.core.hooks.stage_names`)."""
    return stage_names(n_layers, first="token embedding")


def batches_by_length(items: Sequence[WordTokens], *, causal: bool = False) -> dict[int, list[int]]:
    """Indices of ``items`` grouped by the tokens a pass needs, so each batch needs no padding:
    every token, or (``causal``) those up to the word's last token, since no later token can
    change a causal model's state there."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        groups[item.word_pos + 1 if causal else item.n_tokens].append(i)
    return dict(groups)


def word_states(
    model: HookedModel,
    items: Sequence[WordTokens],
    *,
    fwd_hooks: Sequence[tuple[str, Callable]] = (),
    cache: Any = None,
) -> torch.Tensor:
    """``[sentence, n_layers + 1, d_model]``: each item's word vector at every stage.

    Stage 0 is the word's **token embedding** (its row of ``W_E``, the same in every
    context), stage ``l + 1`` the residual stream after block ``l``
    (``blocks.{l}.hook_resid_post``), read at the word's last token. Sentences of equal
    length run together (no padding, so bidirectional models see exactly their own
    sentence), each batch one forward pass stopped before the unembedding; a causal model
    runs each sentence only up to the word's last token (later tokens cannot reach it).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        items: The sentences, as :func:`interp.analysis.encode_word` gives them.
        fwd_hooks: ``(hook name, hook)`` pairs applied to every run (e.g.
            :func:`interp.analysis.components.ablation.zero_head_hooks`); not with ``cache``.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. Here ``tokens`` are all items' tokens stacked,
            so the items must share one length.

    Returns:
        ``[sentence, n_layers + 1, d_model]`` float32 states, one row per item in order.

    Raises:
        InterpError: for no items, a model without ``W_E``, a cache for items
            of different lengths or of other tokens, or a cache together with
            ``fwd_hooks``.
    """
    cfg = check_model(model)
    if not items:
        raise InterpError("no sentences given")
    W_E = getattr(model, "W_E", None)
    if W_E is None:
        raise InterpError("this model has no W_E token embedding")
    L = cfg.n_layers
    out = torch.zeros(len(items), L + 1, W_E.shape[-1])
    if cache is not None:
        return _states_from_cache(model, items, cache, fwd_hooks, out)
    with eval_no_grad(model):
        for n, idx in batches_by_length(items, causal=is_causal(model)).items():
            tokens = torch.cat([items[i].tokens[:, :n] for i in idx]).to(model_device(model))
            pos = torch.tensor([items[i].word_pos for i in idx], device=tokens.device)
            rows = torch.arange(len(idx), device=tokens.device)
            out[idx, 0] = W_E[tokens[rows, pos].to(W_E.device)].detach().float().cpu()

            def grab(resid: torch.Tensor, hook: Any, idx=idx, pos=pos, rows=rows) -> None:
                layer = int(hook.name.split(".")[1])
                out[idx, layer + 1] = resid[rows, pos].detach().float().cpu()  # [batch, pos, d]

            hooks = [(hook_name("resid_post", l), grab) for l in range(L)]
            run_until(model, tokens, [*fwd_hooks, *hooks], hooks[-1][0])  # no unembedding
    return out


def _states_from_cache(model: HookedModel, items, cache, fwd_hooks, out) -> torch.Tensor:
    if fwd_hooks:
        raise InterpError("a cache holds one unedited run; pass fwd_hooks or cache, not both")
    if len({it.n_tokens for it in items}) != 1:
        raise InterpError("cache= needs items of one length (the cache of their stacked tokens)")
    tokens = torch.cat([it.tokens for it in items])
    tokens = tokens.to(model.W_E.device)
    pos = torch.tensor([it.word_pos for it in items], device=tokens.device)
    rows = torch.arange(len(items), device=tokens.device)
    out[:, 0] = model.W_E[tokens[rows, pos]].detach().float().cpu()
    names = [hook_name("resid_post", l) for l in range(model.cfg.n_layers)]
    with eval_no_grad(model):
        checked = check_cache(model, tokens, cache, needs=names)
    for l, name in enumerate(names):
        out[:, l + 1] = checked[name][rows, pos].detach().float().cpu()
    return out


def check_labels(states: torch.Tensor, words: Sequence[str], senses: Sequence[str]) -> None:
    if states.ndim != 3:
        raise InterpError(f"states must be [sentence, stage, d_model], got {tuple(states.shape)}")
    if not len(words) == len(senses) == states.shape[0]:
        raise InterpError(
            f"{states.shape[0]} states but {len(words)} words and {len(senses)} senses; "
            "pass one word and one sense label per sentence"
        )


def by_word_sense(words: Sequence[str], senses: Sequence[str]) -> dict[str, dict[str, list[int]]]:
    """``{word: {sense: [sentence indices]}}``.

    Raises:
        InterpError: for a word with a single sense.
    """
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, (w, s) in enumerate(zip(words, senses)):
        table[w][s].append(i)
    for w, by_sense in table.items():
        if len(by_sense) < 2:
            raise InterpError(f"the word {w!r} has only one sense in the data; give it two")
    return table


def _pairs(words: Sequence[str], senses: Sequence[str]) -> tuple[list, list]:
    """Index pairs (i, j) of the same word in different senses, and in the same sense."""
    cross, same = [], []
    for by_sense in by_word_sense(words, senses).values():
        for a, b in combinations(sorted(by_sense), 2):
            cross += list(product(by_sense[a], by_sense[b]))
        for ids in by_sense.values():
            same += list(combinations(ids, 2))
    return cross, same


def _mean_cos(x: torch.Tensor, pairs: list) -> float:
    # x [sentence, d]
    if not pairs:
        return float("nan")
    i, j = (torch.tensor(p) for p in zip(*pairs))
    return float(torch.cosine_similarity(x[i], x[j], dim=-1).mean())


def sense_similarity(
    states: torch.Tensor,
    *,
    words: Sequence[str],
    senses: Sequence[str],
    by_word: bool = False,
) -> pd.DataFrame:
    """Cosine between a word's uses in different senses (and in the same sense), per stage.

    The mean cosine between uses of a word in *different* senses, and between two uses in
    the *same* sense (the control: a context change alone also lowers the cosine), raw and
    centred (the mean vector over all sentences at that stage subtracted first, because the
    residual streams of real models share large common directions that push every raw
    cosine towards 1). No model runs.

    Args:
        states: ``[sentence, stage, d_model]``, as :func:`word_states` gives them.
        words: The word of each sentence, one per row of ``states``.
        senses: The sense label of each sentence, one per row; each word needs at least two
            senses.
        by_word: One row per word and stage instead of one per stage (default ``False``).

    Returns:
        A table with one row per stage (or per word and stage, a ``word`` column first):
        ``stage`` (0 = token embedding, ``l + 1`` = after block ``l``), ``stage_name``,
        ``cross_sense`` and ``same_sense`` (mean raw cosine), the same two ``_centred``,
        and ``gap_centred`` = same minus cross (how far the senses have separated beyond
        what a change of context does). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (``model`` is ``None``).

    Raises:
        InterpError: for mismatched labels or a word with a single sense.
    """
    check_labels(states, words, senses)
    n_stages = states.shape[1]
    names = state_names(n_stages - 1)
    groups = {"all": list(range(len(words)))}
    if by_word:
        groups = defaultdict(list)
        for i, w in enumerate(words):
            groups[w].append(i)
    rows = []
    centred = states - states.mean(0, keepdim=True)
    for w, idx in groups.items():
        cross, same = _pairs([words[i] for i in idx], [senses[i] for i in idx])
        for s in range(n_stages):
            raw, cen = states[idx, s], centred[idx, s]
            row = {"word": w} if by_word else {}
            row.update(
                stage=s,
                stage_name=names[s],
                cross_sense=_mean_cos(raw, cross),
                same_sense=_mean_cos(raw, same),
                cross_sense_centred=_mean_cos(cen, cross),
                same_sense_centred=_mean_cos(cen, same),
            )
            row["gap_centred"] = row["same_sense_centred"] - row["cross_sense_centred"]
            rows.append(row)
    return described(
        pd.DataFrame(rows),
        "sense_similarity",
        description="cosine similarity of a word's states within and across its senses, by stage",
        method="exact",
        unit="cosine",
        model=None,
        forward_equivalents=0.0,
    )

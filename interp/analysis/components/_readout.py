"""Reading the residual stream out as logits: answer ids, the positions read, unembedding chunks.

Shared by :mod:`interp.analysis.components.dla` (the final norm's scale frozen
from the clean run, so each component's share is linear) and
:mod:`interp.analysis.components.lens` (the norm recomputed on each stage's own
residual); the norm and the unembedding themselves are the runtime's
(:meth:`interp.runtime.base.Runtime.readout`). Private to the package.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from interp.core.checks import position_mask, token_id
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel, logits_meaningful

# Rows of logits unembedded at once: at most this many bytes of logits per chunk.
CHUNK_BYTES = 64 << 20


def check_lm_head(model: HookedModel, what: str) -> None:
    """Refuse a model whose logits mean nothing (an encoder saved without its LM head).

    Raises:
        InterpError: naming ``what`` needs the head.
    """
    if not logits_meaningful(model):
        raise InterpError(
            f"{what} reads the model's unembedding, but this model's logits are meaningless "
            "(its checkpoint has no language-model head)"
        )
    if getattr(model, "W_U", None) is None:
        raise InterpError(f"{what} needs an unembedding (W_U); this model has none")


def token_ids(model: HookedModel, value: Any, batch: int, name: str) -> torch.Tensor:
    """``value`` as ``[batch]`` token ids: one for every sequence or one per sequence (a
    list, or a ``[batch]`` tensor); each an id or one token by the one rule of
    :func:`interp.core.checks.token_id` (a string of digits is an id).

    Raises:
        InterpError: for a string that is not one token (its pieces are named),
            a string without a tokenizer, ids outside the vocabulary, or the
            wrong number of ids.
    """
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype == torch.bool or value.ndim > 1:
            raise InterpError(f"{name} must be token ids: an int, a string, or [batch] ids")
        items = value.reshape(-1).tolist()
    elif isinstance(value, (str, int)) or hasattr(value, "__index__"):
        items = [value]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise InterpError(f"{name} must be token ids or single-token strings, got {value!r}")
    if len(items) == 1:
        items = items * batch
    if len(items) != batch:
        raise InterpError(f"{name} has {len(items)} entries but there are {batch} sequences")
    tok = getattr(model, "tokenizer", None)
    ids = [token_id(v, tok, name=name) for v in items]
    d_vocab = int(getattr(model.cfg, "d_vocab_out", None) or model.cfg.d_vocab)
    bad = [i for i in ids if not 0 <= i < d_vocab]
    if bad:
        raise InterpError(f"{name} token id {bad[0]} is outside the vocabulary [0, {d_vocab})")
    return torch.tensor(ids, dtype=torch.long)


def read_positions(at: Any, n: int, *, default_all: bool) -> list[int]:
    """``at`` (an int, ints, a ``[pos]`` bool mask, ``None``) as sorted non-negative ints:
    the positions whose logits are read.

    Raises:
        InterpError: as :func:`interp.core.checks.position_mask`.
    """
    if at is None:
        return list(range(n)) if default_all else [n - 1]
    mask = position_mask(n, at, name="at")
    return [int(i) for i in torch.nonzero(mask).flatten()]


def chunks(n_rows: int, d_vocab: int, budget: int = CHUNK_BYTES) -> Iterator[slice]:
    """Row ranges whose float32 logits take at most ``budget`` bytes each."""
    step = max(1, budget // max(1, 4 * d_vocab))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


def final_resid_name(model: HookedModel) -> str:
    """The hook holding the residual stream the final norm reads."""
    return hook_name("resid_post", model.cfg.n_layers - 1)

"""Reading a feature: where it fires, how often, and what it writes into the logits.

For a dictionary ``D`` at a hook and a token set, one streamed pass (the prompts in chunks
planned under ``memory_budget``, each pass cut off after the hook, as training does) gives,
for every feature ``f``:

* its **top-activating contexts**: the ``top`` positions of largest ``acts[f]`` over the
  token set (ties: the earlier position), each with a ``window`` of tokens around it and
  the feature's activation on each of them;
* its **activation density**: the share of positions where ``acts[f] > 0``, and its mean
  activation where active;
* its **logit effects** (:func:`feature_logit_effects`): the decoder row ``W_dec[f]``
  read out through the final norm and the unembedding, ``(centre(W_dec[f]) * gain) @
  W_U`` (the runtime's norm rule: centred for LayerNorm, not for RMSNorm; its gain,
  ``1 + weight`` on Gemma). The norm's per-position scale divides every logit of a
  position alike, so it is taken as 1: the numbers rank a feature's tokens, per unit of
  activation, and are comparable across features only up to that scale. A dictionary on a
  layer's ``hook_z`` is read through that layer's ``W_O`` first.

Leading ``skip_columns`` (a BOS column, whose norm dwarfs the rest in pretrained models)
are left out of the contexts and the densities.

Example:
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> from interp.datasets import repeated_tokens
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=16, architecture="topk", k=2,
    ...                       hook_name="blocks.1.hook_resid_pre")
    >>> tokens = repeated_tokens(4, d_vocab=64, seq_len=48, seed=0).tokens
    >>> r = read_features(model, tokens, dictionary=D, top=3)
    >>> list(r.features.columns[:3]), len(r.contexts) <= 16 * 3
    (['feature', 'density', 'n_active'], True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, check_model
from interp.dictionaries.activations import hook_activations
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.logit_effects import (  # noqa: F401 (importable from here too)
    LOGIT_BLOCK,
    check_feature_ids,
    feature_logit_effects,
    token_strings,
)
from interp.dictionaries.splice import check_dictionary
from interp.dictionaries.top import Best, chunk_top, copies, merged_best
from interp.engine.cache import cache_rows, check_cache
from interp.engine.chunks import Estimate
from interp.engine.cost import Flops, cache_pass_work
from interp.engine.footprints import feature_reading_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import table_attrs


@dataclasses.dataclass(frozen=True)
class FeatureReading:
    """What a token set shows of a dictionary's features (module docstring).

    Attributes:
        features: one row per feature read: ``feature``, ``density``, ``n_active``,
            ``mean_activation`` (where active), ``max_activation``.
        contexts: one row per (feature, rank): ``feature``, ``rank`` (0 = largest),
            ``sequence``, ``pos``, ``activation``, ``token_id``, ``token``, ``context`` (the
            window's text, the token itself in ``[[ ]]``); features with fewer active
            positions than ``top`` have fewer rows.
        window_ids: ``[len(contexts), window]`` token ids around each context (``-1``
            beyond the sequence), row by row with ``contexts``.
        window_acts: ``[len(contexts), window]`` the feature's activation on them.
        offsets: the window's offsets from the context's position.
        logits: :func:`feature_logit_effects`' table, or ``None`` (no meaningful logits,
            or a hook that does not write into the stream: ``features.attrs['logits']``
            says which).
        token_text: each id in the windows as text.
    """

    features: pd.DataFrame
    contexts: pd.DataFrame
    window_ids: np.ndarray
    window_acts: np.ndarray
    offsets: tuple[int, ...]
    logits: pd.DataFrame | None
    token_text: dict[int, str]

    def window(self, row: int) -> list[tuple[int, int, float]]:
        """One context's window as ``(offset, token id, activation)``, inside the sequence.

        Args:
            row: the context's row number in :attr:`contexts`.

        Returns:
            The window's positions that exist, in order.
        """
        ids, acts = self.window_ids[row], self.window_acts[row]
        return [(o, int(i), float(a)) for o, i, a in zip(self.offsets, ids, acts) if i >= 0]


def read_features(
    model: HookedModel,
    tokens: torch.Tensor,
    *,
    dictionary: Dictionary,
    features: Any = None,
    top: int = 10,
    window: tuple[int, int] = (8, 4),
    skip_columns: int = 0,
    logits: int = 10,
    cache: Any = None,
    memory_budget: int | None = None,
    estimate: bool = False,
    progress: bool = False,
) -> FeatureReading | Estimate:
    """Each feature's top contexts, density and logit effects on ``tokens`` (module docstring).

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids: the token set.
        dictionary: the :class:`Dictionary` read (at a hook of ``model``).
        features: feature ids (``None``: every feature).
        top: contexts kept per feature.
        window: tokens shown before and after each context, ``(before, after)``.
        skip_columns: leading columns left out (a BOS column).
        logits: tokens kept per feature and side in the logit table (0: no table).
        cache: an ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it
            lacks are computed by one forward pass.
        memory_budget: The bytes an analysis may hold beyond the model's weights: the
            sequences run in chunks to stay under it; ``None`` is a quarter of the memory
            free on the model's device.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes, forward-equivalents)
            instead of running.
        progress: show a progress bar over the chunks.

    Returns:
        A :class:`FeatureReading` (or an ``Estimate``).

    Raises:
        InterpError: no model, bad tokens, a dictionary the model cannot hold, bad feature
            ids, ``top``, ``window``, ``skip_columns`` or ``logits``, a cache of other tokens,
            or a budget one prompt does not fit.
    """
    check_model(model)
    D = dictionary
    check_dictionary(model, D)
    tokens = check_tokens(model, tokens, chunked=True)
    feats = check_feature_ids(features, D.d_sae)
    top = check_int(top, "top", minimum=1)
    n_logits = check_int(logits, "logits", minimum=0)
    if not (isinstance(window, (tuple, list)) and len(window) == 2):
        raise InterpError(f"window must be (before, after), two counts, got {window!r}")
    before = check_int(window[0], "window[0]", minimum=0)
    after = check_int(window[1], "window[1]", minimum=0)
    skip = check_int(skip_columns, "skip_columns", minimum=0)
    batch, pos = tokens.shape
    if skip >= pos:
        raise InterpError(f"skip_columns={skip} leaves none of the {pos} columns to read")
    n_f, W = len(feats), before + after + 1
    # held: the running top contexts twice while merging (in a process group also every
    # rank's, gathered: interp.dictionaries.top.copies)
    foot = feature_reading_footprint(
        model, pos, d_in=D.d_in, d_sae=D.d_sae, features=n_f, top=top, window=W,
        copies=copies(), cached=cache is not None,
    )  # fmt: skip
    # FLOPs (interp.engine.cost): the pass up to the hook, the encoder on every position,
    # and once, each feature's decoder row through the unembedding (its logit effects)
    fl = Flops.of(model)
    encode = pos * 2.0 * D.d_in * D.d_sae / fl.plain(pos)
    effects = 2.0 * n_f * int(model.cfg.d_model) * int(model.cfg.d_vocab) if n_logits else 0.0
    work = encode + effects / (batch * fl.plain(pos))
    work += cache_pass_work(model, pos, [D.hook_name]) if cache is None else 0.0
    shared: dict[str, Any] = {}
    offsets = torch.arange(-before, after + 1)
    fd = feats.to(D.device)

    def prepare(chunks: list[slice]) -> float:
        shared["cache"] = check_cache(model, tokens, cache, needs=[D.hook_name])
        shared["best"] = Best(n_f, W)
        return 0.0  # the passes are the task's work; the cache's check counts below

    def chunk(c: Chunk) -> dict[str, Any]:
        rows, t = c.rows, tokens[c.rows]
        part = cache_rows(shared["cache"], rows)
        if part is None:
            x = hook_activations(model, t, D.hook_name)
        else:
            x = part[D.hook_name]
            x = x.reshape(*x.shape[:2], -1) if x.ndim > 3 else x
        with torch.no_grad():
            acts = D.encode(x.to(D.device))[..., fd].float().cpu()  # [b, pos, n_f]
        read = acts[:, skip:].reshape(-1, n_f)  # [b * (pos - skip), n_f]
        k = min(top, read.shape[0])
        v, i = chunk_top(read, k)  # [k, n_f], ties: the earlier position
        seq, at = i // (pos - skip), skip + i % (pos - skip)
        where = at[..., None] + offsets  # [k, n_f, W]
        inside = (where >= 0) & (where < pos)
        where = where.clamp(0, pos - 1)
        s3 = seq[..., None].expand_as(where)
        ids = torch.where(inside, t.cpu()[s3, where], -1)
        f3 = torch.arange(n_f)[None, :, None].expand_as(where)
        wa = torch.where(inside, acts[s3, where, f3], 0.0)
        flat = (rows.start + seq) * pos + at  # a place in the whole token set
        shared["best"].merge(v, flat, ids, wa, top)
        return {
            "n_active": (read > 0).sum(0), "total": read.double().sum(0),
            "peak": read.max(0).values[None],
        }  # fmt: skip

    task = Task(
        "read_features", foot, work=work, chunk=chunk,
        combine={"n_active": "sum", "total": "sum", "peak": "rows"}, prepare=prepare,
        desc="read features", inputs=(tokens, D, feats, top, n_logits, before, after, skip),
    )  # fmt: skip
    out = run(model, (batch, pos), task, memory_budget=memory_budget, estimate=estimate,
              progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    # each rank's running best, merged (its chunks' candidates merged as they came)
    checked, best = shared["cache"], merged_best(shared["best"], top)
    peak = torch.maximum(torch.zeros(n_f), out.values["peak"].max(0).values)
    n_read = batch * (pos - skip)
    return _reading(
        model, D, feats, best.v, best.i, best.ids, best.acts, out.values["n_active"],
        out.values["total"], peak, n_read, offsets=tuple(offsets.tolist()), pos=pos,
        skip=skip, n_logits=n_logits, chunks=out.chunks,
        work=round(work + (0.0 if checked is None else checked.work * fl.block_share(pos)), 3),
    )  # fmt: skip


def _reading(
    model: HookedModel,
    D: Dictionary,
    feats: torch.Tensor,
    best_v: torch.Tensor,
    best_i: torch.Tensor,
    best_ids: torch.Tensor,
    best_acts: torch.Tensor,
    n_active: torch.Tensor,
    total: torch.Tensor,
    peak: torch.Tensor,
    n_read: int,
    *,
    offsets: tuple[int, ...],
    pos: int,
    skip: int,
    n_logits: int,
    work: float,
    chunks: int,
) -> FeatureReading:
    """The tables of a streamed pass's running figures."""
    common = dict(
        method="exact", model=model, forward_equivalents=work, hook=D.hook_name,
        architecture=D.architecture, d_sae=D.d_sae, n_positions=n_read, skip_columns=skip,
        chunks=chunks,
    )  # fmt: skip
    count = n_active.numpy()
    features = pd.DataFrame(
        {
            "feature": feats.numpy(),
            "density": count / max(1, n_read),
            "n_active": count,
            "mean_activation": np.where(count > 0, total.numpy() / np.maximum(count, 1), 0.0),
            "max_activation": np.maximum(peak.numpy(), 0.0),
        }
    )
    features.attrs.update(
        table_attrs(
            "read_features",
            description="each feature's activation density (the share of "
            "positions where it is active) and its mean and largest activation",
            unit="share of positions",
            **common,
        )  # fmt: skip
    )
    keep = best_v > 0  # [top, n_f]: a context is a position where the feature is active
    fi, rk = keep.T.nonzero(as_tuple=True)  # feature-major: rows grouped by feature, by rank
    v, place = best_v[rk, fi], best_i[rk, fi]
    ids, acts = best_ids[rk, fi].numpy(), best_acts[rk, fi].numpy()  # [n, W]
    centre = offsets.index(0)
    wanted = sorted({int(i) for i in np.unique(ids) if i >= 0})
    text = dict(zip(wanted, token_strings(model, wanted)))
    contexts = pd.DataFrame(
        {
            "feature": feats[fi].numpy(),
            "rank": rk.numpy(),
            "sequence": (place // pos).numpy(),
            "pos": (place % pos).numpy(),
            "activation": v.numpy(),
            "token_id": ids[:, centre],
        }
    )
    contexts["token"] = [text[int(i)] for i in contexts["token_id"]]
    contexts["context"] = [
        "".join(
            f"[[{text[int(i)]}]]" if o == 0 else text[int(i)]
            for o, i in zip(offsets, row)
            if i >= 0
        )
        for row in ids
    ]
    contexts.attrs.update(
        table_attrs(
            "read_features",
            description="each feature's top-activating positions over the "
            "token set (ties: the earlier position), with the window of text around them",
            unit="feature activation",
            window=[-offsets[0], offsets[-1]],
            **common,
        )  # fmt: skip
    )
    table, why = None, "not asked for (logits=0)"
    if n_logits:
        try:
            table = feature_logit_effects(model, dictionary=D, features=feats, top=n_logits)
            why = "read"
        except InterpError as e:  # no LM head, or a hook that does not write into the stream
            why = str(e)
    features.attrs["logits"] = why
    return FeatureReading(features, contexts, ids, acts, offsets, table, text)

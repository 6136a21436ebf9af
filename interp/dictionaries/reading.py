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
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.memory import forward_bytes
from interp.core.protocol import HookedModel, check_model, logits_meaningful
from interp.dictionaries.activations import hook_activations
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.splice import check_dictionary
from interp.engine.cache import cache_rows, check_cache, pass_share
from interp.engine.chunks import Estimate, Footprint, chunk_bar, plan
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

LOGIT_BLOCK = 256  # features unembedded at once: [LOGIT_BLOCK, d_vocab] float32 at a time


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


def token_strings(model: HookedModel, ids: Sequence[int]) -> list[str]:
    """Each id's text (``model.to_str_tokens``), or the id itself without a tokenizer.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        ids: token ids.

    Returns:
        One string per id.
    """
    ids = [int(i) for i in ids]
    if not ids:
        return []
    fn = getattr(model, "to_str_tokens", None)
    if fn is None or getattr(model, "tokenizer", None) is None and not hasattr(model.cfg, "vocab"):
        return [str(i) for i in ids]
    out = fn(torch.tensor(ids))
    return [str(s) for s in (out[0] if out and isinstance(out[0], list) else out)]


def _check_features(features: Any, d_sae: int) -> torch.Tensor:
    if features is None:
        return torch.arange(d_sae)
    if isinstance(features, (list, tuple)) and not features:
        raise InterpError("features is empty: pass feature ids, or None for every feature")
    try:
        ids = torch.as_tensor(features).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise InterpError(f"features must be feature ids (ints), got {features!r}") from None
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise InterpError(f"features must be integer feature ids, got dtype {ids.dtype}")
    if ids.numel() == 0:
        raise InterpError("features is empty: pass feature ids, or None for every feature")
    bad = ids[(ids < 0) | (ids >= d_sae)]
    if bad.numel():
        raise InterpError(
            f"feature {int(bad[0])} is not one of this dictionary's features 0..{d_sae - 1}"
        )
    if len(set(ids.tolist())) != ids.numel():
        raise InterpError("features lists a feature twice: pass each once")
    return ids.long()


def _decoder_in_stream(model: HookedModel, D: Dictionary, feats: torch.Tensor) -> torch.Tensor:
    """``[n, d_model]``: what each feature's decoder row adds to the residual stream."""
    cfg = model.cfg
    d_model = int(cfg.d_model)
    rows = D.W_dec.detach()[feats].float()
    leaf = D.hook_name.rsplit(".", 1)[-1]
    if leaf == "hook_z":
        layer = int(D.hook_name.split(".")[1])
        W_O = runtime_of(model).layer_weight("W_O", layer).float()  # [head, d_head, d_model]
        z = rows.view(len(feats), W_O.shape[0], W_O.shape[1]).to(W_O.device)
        return torch.einsum("fhd,hdm->fm", z, W_O)
    if D.d_in != d_model or leaf in ("hook_q", "hook_k", "hook_v", "hook_pre", "hook_post"):
        raise InterpError(
            f"the dictionary at {D.hook_name} (width {D.d_in}) does not write into the "
            f"residual stream (width {d_model}) directly, so it has no logit effects here: "
            "read logits of a residual-stream or hook_z dictionary"
        )
    return rows


def feature_logit_effects(
    model: HookedModel,
    *,
    dictionary: Dictionary,
    features: Any = None,
    top: int = 10,
) -> pd.DataFrame:
    """Each feature's top and bottom logit effects: ``(centre(W_dec[f]) * gain) @ W_U``.

    The final norm's scale is taken as 1 (module docstring); no forward pass runs.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        dictionary: the :class:`Dictionary` (at a residual-stream hook or a ``hook_z``).
        features: feature ids (``None``: every feature).
        top: tokens kept per feature and side.

    Returns:
        One row per (feature, side, rank): ``feature``, ``side`` (``'top'``: largest,
        ``'bottom'``: most negative), ``rank``, ``token_id``, ``token``, ``value`` (logits
        per unit of activation).

    Raises:
        InterpError: no model, a model without meaningful logits or an unembedding, a
            dictionary the model cannot hold, a hook that does not write into the residual
            stream, bad feature ids or ``top``.
    """
    check_model(model)
    check_dictionary(model, dictionary)
    feats = _check_features(features, dictionary.d_sae)
    top = check_int(top, "top", minimum=1)
    if not logits_meaningful(model) or getattr(model, "W_U", None) is None:
        raise InterpError(
            "feature_logit_effects reads the unembedding, but this model's logits mean nothing "
            "(no language-model head): read contexts and densities only"
        )
    W_U = model.W_U.detach().float()  # [d_model, d_vocab]
    top = min(top, int(W_U.shape[1]))
    norm = runtime_of(model).norm("final")
    parts = []
    for lo in range(0, len(feats), LOGIT_BLOCK):
        block = feats[lo : lo + LOGIT_BLOCK]
        d = _decoder_in_stream(model, dictionary, block).to(W_U.device)
        if norm is not None:
            gain = norm.gain
            d = norm.centre(d) * (1.0 if gain is None else gain.to(d.device))
        logits = d @ W_U  # [block, d_vocab]
        for side, largest in (("top", True), ("bottom", False)):
            v, i = logits.topk(top, dim=-1, largest=largest)
            parts.append((side, block, v.cpu(), i.cpu()))
    ids = sorted({int(t) for _, _, _, i in parts for t in i.flatten().tolist()})
    text = dict(zip(ids, token_strings(model, ids)))
    cols: dict[str, list] = {k: [] for k in ("feature", "side", "rank", "token_id", "value")}
    for side, block, v, i in parts:
        n = len(block)
        cols["feature"] += np.repeat(block.numpy(), top).tolist()
        cols["side"] += [side] * (n * top)
        cols["rank"] += list(range(top)) * n
        cols["token_id"] += i.flatten().tolist()
        cols["value"] += v.flatten().tolist()
    df = pd.DataFrame(cols)
    df.insert(4, "token", [text[t] for t in df["token_id"]])
    df = df.sort_values(["feature", "side", "rank"], ascending=[True, False, True])
    df = df.reset_index(drop=True)
    df.attrs.update(
        table_attrs(
            "feature_logit_effects",
            description="each feature's decoder row read out through the final norm (its "
            "scale taken as 1) and the unembedding: the logits one unit of activation adds",
            method="exact",
            model=model,
            unit="logits per unit of activation",
            forward_equivalents=0.0,
            hook=dictionary.hook_name,
            final_norm=None if norm is None else norm.kind,
            d_sae=dictionary.d_sae,
        )  # fmt: skip
    )
    return df


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
    feats = _check_features(features, D.d_sae)
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
    # held: the running top contexts (values, places, windows) twice while merging
    fixed = 2 * n_f * top * (4 + 8 + W * 12)
    per = pos * (4 * D.d_in + 3 * 4 * D.d_sae)
    if cache is None:
        per += forward_bytes(model, 1, pos, rows=())
    work = pass_share(int(model.cfg.n_layers), [D.hook_name]) if cache is None else 0.0
    run = plan(
        model, batch, pos, Footprint(fixed=fixed, per_prompt=per), memory_budget=memory_budget,
        analysis="read_features", forward_equivalents=work, estimate=estimate,
        progress=progress,
    )  # fmt: skip
    if estimate:
        return run.estimate
    checked = check_cache(model, tokens, cache, needs=[D.hook_name])
    offsets = torch.arange(-before, after + 1)
    fd = feats.to(D.device)
    best_v = torch.full((0, n_f), float("-inf"))
    best_i = torch.zeros((0, n_f), dtype=torch.long)
    best_ids = torch.zeros((0, n_f, W), dtype=torch.long)
    best_acts = torch.zeros((0, n_f, W))
    n_active = torch.zeros(n_f, dtype=torch.long)
    total = torch.zeros(n_f, dtype=torch.float64)
    peak = torch.zeros(n_f)
    for rows in chunk_bar(run.chunks, progress=progress, desc="read features"):
        t = tokens[rows]
        part = cache_rows(checked, rows)
        if part is None:
            x = hook_activations(model, t, D.hook_name)
        else:
            x = part[D.hook_name]
            x = x.reshape(*x.shape[:2], -1) if x.ndim > 3 else x
        with torch.no_grad():
            acts = D.encode(x.to(D.device))[..., fd].float().cpu()  # [b, pos, n_f]
        read = acts[:, skip:].reshape(-1, n_f)  # [b * (pos - skip), n_f]
        on = read > 0
        n_active += on.sum(0)
        total += read.double().sum(0)
        peak = torch.maximum(peak, read.max(0).values)
        k = min(top, read.shape[0])
        v, i = read.topk(k, dim=0)  # [k, n_f]
        seq, at = i // (pos - skip), skip + i % (pos - skip)
        where = at[..., None] + offsets  # [k, n_f, W]
        inside = (where >= 0) & (where < pos)
        where = where.clamp(0, pos - 1)
        s3 = seq[..., None].expand_as(where)
        ids = torch.where(inside, t.cpu()[s3, where], -1)
        f3 = torch.arange(n_f)[None, :, None].expand_as(where)
        wa = torch.where(inside, acts[s3, where, f3], 0.0)
        flat = (rows.start + seq) * pos + at  # a place in the whole token set
        best_v, order = torch.cat([best_v, v]).sort(dim=0, descending=True, stable=True)
        order = order[:top]
        best_v = best_v[:top]
        best_i = torch.cat([best_i, flat]).gather(0, order)
        g3 = order[..., None].expand(-1, -1, W)
        best_ids = torch.cat([best_ids, ids]).gather(0, g3)
        best_acts = torch.cat([best_acts, wa]).gather(0, g3)
    n_read = batch * (pos - skip)
    return _reading(
        model, D, feats, best_v, best_i, best_ids, best_acts, n_active, total, peak, n_read,
        offsets=tuple(offsets.tolist()), pos=pos, skip=skip, n_logits=n_logits,
        work=work + (0.0 if checked is None else checked.work), chunks=len(run.chunks),
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

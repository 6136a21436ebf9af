"""What heads move, in features: a dictionary feature's pre-activation split over heads.

A dictionary's encoder is affine before its nonlinearity,
``pre_f = (x - b_dec * apply_b_dec_to_input) . W_enc[:, f] + b_enc[f]``, so wherever
``x`` is a sum, ``pre_f`` splits exactly over its terms:

* **a dictionary on a layer's concatenated ``hook_z``** (``d_in = n_heads * d_head``;
  Kissane et al. 2024, "Interpreting Attention Layer Outputs with Sparse Autoencoders"):
  ``z[p, h] = sum_s A_h[p, s] v_h[s]``, so ``pre_f`` is a sum over (head ``h``, source
  position ``s``) of ``A_h[p, s] v_h[s] . W_enc[h, :, f]``, plus the encoder's ``bias``
  (``b_enc[f] - b_dec . W_enc[:, f]`` where ``b_dec`` is subtracted first);
* **a residual dictionary downstream** (``blocks.l.hook_resid_pre``): the stream is what
  every earlier component wrote (:func:`interp.analysis.heads.qk.inputs.residual_pieces`,
  sandwich norms frozen at this run's scale), so ``pre_f`` is a sum over the heads
  upstream (their direct path), a ``rest`` row (the embeddings, MLPs, output biases and
  any remainder: so the rows sum exactly) and the ``bias``; with ``upstream=`` writer
  dictionaries (:mod:`interp.analysis.heads.qk.writers`), the stream's pieces are the
  tokens' embeddings, the writers' active features, errors and decoder biases, and the
  heads and MLPs without a dictionary.

The split is of the pre-activation; the nonlinearity (relu, topk, jumprelu) comes after it,
and ``attrs["nonlinearity"]`` says which. Every call checks the rows against the
dictionary's own ``pre_activations`` of the model's activation (``pre_gap``).

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=64, d_sae=16, architecture="topk", k=2,
    ...                       hook_name="blocks.1.attn.hook_z")
    >>> df = feature_head_attribution(model, torch.tensor([[0, 5, 6, 5, 6]]), dictionary=D)
    >>> df.attrs["pre_gap"] < 1e-4, sorted(df["label"].unique())[:2]
    (True, ['L1H0', 'L1H1'])
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.analysis.heads.qk.cells import read_positions
from interp.analysis.heads.qk.inputs import head_inputs, residual_pieces
from interp.analysis.heads.qk.stream import Split, split_stream
from interp.analysis.heads.qk.writers import PAD, Writer, check_writers
from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.hooks import head_label, hook_name
from interp.core.precision import FROM_MODEL, check_finite_values, within, worst
from interp.core.protocol import HookedModel, check_model, eval_no_grad
from interp.core.shapes import Tokens
from interp.dictionaries import Dictionary, check_dictionary
from interp.engine.batching import Cost
from interp.engine.cache import cache_of, cache_work, check_cache
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

CHECK_RTOL = 1e-4  # rows vs the encoder's own pre-activation, over the largest (float32)


def feature_head_attribution(
    model: HookedModel,
    tokens: Tokens,
    *,
    dictionary: Dictionary,
    query_positions: Any = -1,
    features: Any = None,
    cache: Any = None,
    upstream: Dictionary | list[Dictionary] | None = None,
) -> pd.DataFrame:
    """Each feature's pre-activation split exactly over the heads that wrote its input.

    For a dictionary on ``blocks.l.attn.hook_z`` the rows are (head of layer ``l``, source
    position): what each head moved from each position into the feature; for one on
    ``blocks.l.hook_resid_pre`` they are the heads of layers below ``l`` (their direct
    path), plus ``rest`` (every other writer) and the encoder's ``bias`` (module
    docstring). One forward pass, stopped at the dictionary's layer, or a read of ``cache``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        dictionary: A sparse dictionary (:class:`interp.dictionaries.Dictionary`) on a
            layer's ``hook_z`` (``d_in = n_heads * d_head``) or its ``hook_resid_pre``
            (``blocks.l.hook_resid_post`` is the same stream as ``blocks.{l+1}.hook_resid_pre``
            and is split as it, below the last layer).
        query_positions: The attending positions of a head's scores, where each feature is
            read (ints, negative from the end, for every sequence); read, not edited.
            Default ``-1``, the last.
        features: Feature indices to split at every position; ``None`` (default) is the
            features active at each position (so the rows do not grow with the width).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.
        upstream: For a residual dictionary: writer dictionaries (one or a list, as
            :func:`~interp.analysis.qk_attribution` takes them:
            :mod:`interp.analysis.heads.qk.writers`) that split its input further: the rows
            are then the tokens' embeddings (``embed:<token>``), the positional embedding,
            each writer's active features, ``error`` and ``b_dec``, the heads and MLPs
            without a dictionary, any ``remainder``, and ``bias``.

    Returns:
        A table with one row per (sequence, query position, feature, piece): ``layer, head,
        label`` (the head; ``<NA>`` and ``bias`` / ``rest`` for the rows that are no head),
        ``sequence, query_position, feature``, ``key_position`` (the source position; a z
        dictionary only; ``<NA>`` for ``bias``), ``value`` (the piece's share of the
        pre-activation) and ``activation`` (the feature's activation there, after the
        nonlinearity; the same on every row of a feature). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``dictionary`` (hook, architecture,
        width), ``nonlinearity``, ``pre_gap`` (the largest gap between the rows' sum and
        the encoder's pre-activation, over the largest) and ``check_rtol``.

    Raises:
        InterpError: for no model, a dictionary that does not fit (another width or
            model, a hook that is neither a layer's ``hook_z`` nor a ``hook_resid_pre``
            after the first layer or ``hook_resid_post`` before the last), positions out
            of range, features out of range, ``upstream`` beside a z dictionary or one that
            :func:`~interp.analysis.heads.qk.writers.check_writers` refuses, or rows
            that do not reproduce the encoder's pre-activation (above :data:`CHECK_RTOL`),
            or a model activation or pre-activation that is NaN or infinite.
    """
    check_model(model)
    D = check_dictionary(model, dictionary)
    kind, layer = _where(D)
    if kind == "resid" and layer == 0:
        raise InterpError(
            f"{D.hook_name!r} is the first layer's input: no head wrote it; use a dictionary "
            "at a later blocks.l.hook_resid_pre, or a z dictionary (blocks.l.attn.hook_z)"
        )
    if kind == "resid" and layer >= model.cfg.n_layers:
        raise InterpError(
            f"{D.hook_name!r} is the last layer's output, which no later head reads: split a "
            "dictionary at a blocks.l.hook_resid_pre (or an earlier layer's hook_resid_post)"
        )
    writers: tuple[Writer, ...] = ()
    if upstream is not None:
        if kind == "z":
            raise InterpError(
                "upstream= splits a residual dictionary's input over its writers' features; a z "
                "dictionary's is split over heads and source positions: drop upstream"
            )
        writers = check_writers(model, upstream, layer=layer, side="upstream")
    tokens = check_tokens(model, tokens)
    bsz, n = tokens.shape
    qs = read_positions(query_positions, n, "query_positions")
    chosen = None if features is None else _features(features, D.d_sae)
    cost = Cost(model.cfg.n_layers)
    with eval_no_grad(model):
        if kind == "z":
            names = [hook_name(x, layer) for x in ("z", "v", "pattern")]
            acts = check_cache(model, tokens, cache, needs=names)
            if acts is None:
                acts = cache_of(model, tokens, names)
                cost.forward(stop=layer + 1)
            else:
                cost.add(cache_work(acts))
            x = acts[names[0]].float().flatten(2)  # [batch, pos, head * d_head]
        else:
            extra = tuple(w.dictionary.hook_name for w in writers)
            acts, cost = head_inputs(model, tokens, cache, layer, extra=extra)
            x = acts[hook_name("resid_pre", layer)].float()  # = blocks.{layer-1}.hook_resid_post
        check_finite_values(
            x,
            f"the model's activation at {D.hook_name}",
            f"{FROM_MODEL}; no split of a non-finite activation is returned",
        )
        pre = D.pre_activations(x).float()  # [batch, pos, d_sae]
        check_finite_values(
            pre,
            f"the dictionary's pre-activations at {D.hook_name} (its encoder on finite "
            "activations)",
            "its encoder overflows float32 on them (weights far too large) or holds NaN; check "
            "the dictionary's W_enc, b_enc and b_dec",
        )
        post = D.activate(pre)
        rows = []
        for b in range(bsz):
            for p in qs:
                feats = chosen if chosen is not None else torch.nonzero(post[b, p] > 0).flatten()
                if len(feats):
                    rows.append((b, p, feats.tolist()))
        if writers:
            sp = split_stream(model, acts, tokens, writers, residual_pieces(model, acts, layer),
                              layer=layer, by="head")  # fmt: skip
            table, gap, size = _split_upstream(sp, D, rows, pre, post)
        else:
            split = _split_z if kind == "z" else _split_resid
            table, gap, size = split(model, D, acts, layer, rows, pre, post)
    check = CHECK_RTOL
    if not within(gap, check):  # NaN fails
        raise InterpError(
            f"the pieces reproduce the encoder's pre-activations only to {gap:.2g} (above "
            f"{check:g}); this architecture computes {D.hook_name} in a way the split does not "
            "read, so no rows are returned"
        )
    table.attrs.update(
        table_attrs(
            "feature_head_attribution",
            description="each dictionary feature's pre-activation split exactly over the heads "
            "(and source positions) that wrote its input",
            method="exact",
            unit="encoder pre-activation",
            model=model,
            forward_equivalents=cost.forward_equivalents,
            dictionary={
                "hook_name": D.hook_name,
                "architecture": D.architecture,
                "d_sae": D.d_sae,
                "k": D.k,
            },  # fmt: skip
            nonlinearity=_nonlinearity(D),
            pre_gap=gap,
            pre_scale=size,
            check_rtol=check,
            frozen=None if kind == "z" else "the sandwich norms' scales, where a model has them",
        )
    )
    return table


def _where(D: Dictionary) -> tuple[str, int]:
    parts = D.hook_name.split(".")
    if len(parts) >= 3 and parts[0] == "blocks" and parts[1].isdigit():
        if parts[2:] == ["attn", "hook_z"]:
            return "z", int(parts[1])
        if parts[2:] == ["hook_resid_pre"]:
            return "resid", int(parts[1])
        if parts[2:] == ["hook_resid_post"]:  # the same stream as the next layer's input
            return "resid", int(parts[1]) + 1
    raise InterpError(
        f"the dictionary reads {D.hook_name!r}; feature_head_attribution splits a dictionary on "
        "a layer's concatenated z (blocks.l.attn.hook_z) or on the residual stream "
        "(blocks.l.hook_resid_pre, or blocks.l.hook_resid_post below the last layer)"
    )


def _features(features: Any, d_sae: int) -> torch.Tensor:
    items = [features] if isinstance(features, int) else list(features)
    if not items:
        raise InterpError("features is empty; give feature indices, or None for the active ones")
    out = []
    for f in items:
        f = check_int(f, "features", minimum=0)
        if f >= d_sae:
            raise InterpError(f"feature {f} is out of range: the dictionary has {d_sae} features")
        out.append(f)
    return torch.tensor(list(dict.fromkeys(out)))


def _nonlinearity(D: Dictionary) -> str:
    if D.architecture == "topk":
        return f"topk (k={D.k}): relu of the pre-activation if among the k largest, else 0"
    if D.architecture == "jumprelu":
        return "jumprelu: the pre-activation where above its threshold, else 0"
    return "relu: max(pre-activation, 0)"


def _bias(D: Dictionary, feats: list[int]) -> torch.Tensor:
    """``[feature]``: the pre-activation's constant, ``b_enc - b_dec . W_enc`` (sae-lens'
    ``apply_b_dec_to_input``) or ``b_enc``."""
    W = D.W_enc.detach().float()[:, feats]
    b = D.b_enc.detach().float()[feats]
    return b - D.b_dec.detach().float() @ W if D.apply_b_dec_to_input else b


def _split_z(
    model: HookedModel, D: Dictionary, acts: Any, layer: int, rows: Any, pre: Any, post: Any
) -> tuple[pd.DataFrame, float, float]:
    """(head, source position) rows of a z dictionary's features."""
    rt = runtime_of(model)
    n_heads = int(model.cfg.n_heads)
    v = acts[hook_name("v", layer)].float()  # [batch, pos, kv_head, d_head]
    A = acts[hook_name("pattern", layer)].float()  # [batch, head, query_pos, key_pos]
    kv = torch.arange(n_heads) // max(1, n_heads // rt.n_kv_heads)
    v = v[:, :, kv]  # [batch, pos, head, d_head]
    d_head = v.shape[-1]
    n = v.shape[1]
    out, gap, size = [], 0.0, float(pre.abs().max().clamp(min=1e-12))
    for b, p, feats in rows:
        W = D.W_enc.detach().float()[:, feats].view(n_heads, d_head, len(feats))
        vw = torch.einsum("shd,hdf->hsf", v[b], W)  # [head, key_pos, feature]
        share = A[b, :, p, :, None] * vw  # [head, key_pos, feature]
        bias = _bias(D, feats)
        miss = float((share.sum((0, 1)) + bias - pre[b, p, feats]).abs().max())
        gap = worst([gap, miss / size])
        h, s = np.meshgrid(np.arange(n_heads), np.arange(n), indexing="ij")
        for j, f in enumerate(feats):
            a = float(post[b, p, f])
            out.append(_frame(b, p, f, a, layer, h.ravel(), s.ravel(), share[..., j].reshape(-1)))
            out.append(_extra(b, p, f, a, "bias", float(bias[j]), key=True))
    return _concat(out), gap, size


def _split_resid(
    model: HookedModel, D: Dictionary, acts: Any, layer: int, rows: Any, pre: Any, post: Any
) -> tuple[pd.DataFrame, float, float]:
    """Upstream heads, ``rest`` and ``bias`` rows of a residual dictionary's features."""
    terms = residual_pieces(model, acts, layer, by="head")
    heads = [t for t in terms if t[1] == "head"]
    rest = sum(t[3] for t in terms if t[1] != "head")
    out, gap, size = [], 0.0, float(pre.abs().max().clamp(min=1e-12))
    for b, p, feats in rows:
        W = D.W_enc.detach().float()[:, feats]  # [d_model, feature]
        share = torch.stack([t[3][b, p] for t in heads]) @ W  # [head, feature]
        r = rest[b, p] @ W
        bias = _bias(D, feats)
        miss = float((share.sum(0) + r + bias - pre[b, p, feats]).abs().max())
        gap = worst([gap, miss / size])
        lh = np.array([[t[2], int(t[0].split("H")[1])] for t in heads])
        for j, f in enumerate(feats):
            a = float(post[b, p, f])
            out.append(_frame(b, p, f, a, None, lh, None, share[:, j]))
            out.append(_extra(b, p, f, a, "rest", float(r[j]), key=False))
            out.append(_extra(b, p, f, a, "bias", float(bias[j]), key=False))
    return _concat(out), gap, size


def _split_upstream(
    sp: Split, D: Dictionary, rows: Any, pre: Any, post: Any
) -> tuple[pd.DataFrame, float, float]:
    """Rows of a residual dictionary's features over the pieces of ``sp`` (its writers'
    features, the tokens' embeddings, components) and ``bias``."""
    codes, writes, fixed = sp.codes(), sp.writes(), torch.stack(sp.fixed)
    out, gap, size = [], 0.0, float(pre.abs().max().clamp(min=1e-12))
    for b, p, feats in rows:
        W = D.W_enc.detach().float()[:, feats]  # [d_model, feature]
        on = codes[b, p] != PAD
        names = [sp.code_name(int(c)) for c in codes[b, p][on]] + sp.names
        share = torch.cat([writes[b, p][on], fixed[:, b, p]]) @ W  # [piece, feature]
        bias = _bias(D, feats)
        miss = float((share.sum(0) + bias - pre[b, p, feats]).abs().max())
        gap = worst([gap, miss / size])
        heads = [re.fullmatch(r"L(\d+)H(\d+)", x) for x in names]
        lh = [(int(m[1]), int(m[2])) if m else (None, None) for m in heads]
        for j, f in enumerate(feats):
            a = float(post[b, p, f])
            out.append(
                pd.DataFrame(
                    {
                        "layer": pd.array([x[0] for x in lh], dtype="Int64"),
                        "head": pd.array([x[1] for x in lh], dtype="Int64"),
                        "label": names,
                        "sequence": b,
                        "query_position": p,
                        "feature": f,
                        "value": share[:, j].double().numpy(),
                        "activation": a,
                    }
                )
            )
            out.append(_extra(b, p, f, a, "bias", float(bias[j]), key=False))
    return _concat(out), gap, size


def _frame(b, p, f, a, layer, heads, keys, values) -> pd.DataFrame:
    """Rows of one feature's head pieces: ``heads`` are head indices of ``layer`` (with
    ``keys``, the source positions) or ``[layer, head]`` pairs."""
    if layer is None:
        ls, hs = heads[:, 0], heads[:, 1]
    else:
        ls, hs = np.full(len(heads), layer), heads
    data: dict[str, Any] = {
        "layer": pd.array(ls, dtype="Int64"),
        "head": pd.array(hs, dtype="Int64"),
        "label": [head_label(int(l), int(h)) for l, h in zip(ls, hs, strict=True)],
        "sequence": b,
        "query_position": p,
        "feature": f,
    }
    if keys is not None:
        data["key_position"] = pd.array(keys, dtype="Int64")
    data["value"] = values.double().numpy()
    data["activation"] = a
    return pd.DataFrame(data)


def _extra(b, p, f, a, name, value, *, key: bool) -> pd.DataFrame:
    """The one row of a piece that is no head (``bias``, ``rest``)."""
    data: dict[str, Any] = {
        "layer": pd.array([None], dtype="Int64"),
        "head": pd.array([None], dtype="Int64"),
        "label": [name],
        "sequence": b,
        "query_position": p,
        "feature": f,
    }
    if key:
        data["key_position"] = pd.array([None], dtype="Int64")
    data["value"], data["activation"] = [value], a
    return pd.DataFrame(data)


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame(
            columns=["layer", "head", "label", "sequence", "query_position", "feature", "value"]
        )
    return pd.concat(parts, ignore_index=True)

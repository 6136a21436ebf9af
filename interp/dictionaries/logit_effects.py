"""What a feature writes into the logits, and the text of token ids.

:func:`feature_logit_effects` reads each feature's decoder row ``W_dec[f]`` out through the
final norm and the unembedding, ``(centre(W_dec[f]) * gain) @ W_U`` (the runtime's norm
rule: centred for LayerNorm, not for RMSNorm; its gain, ``1 + weight`` on Gemma). The
norm's per-position scale divides every logit of a position alike, so it is taken as 1:
the numbers rank a feature's tokens, per unit of activation, and are comparable across
features only up to that scale. A dictionary on a layer's ``hook_z`` is read through that
layer's ``W_O`` first. No forward pass runs. :func:`interp.dictionaries.read_features`
puts this table beside the contexts and densities it streams.

Example:
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=16, architecture="topk", k=2,
    ...                       hook_name="blocks.1.hook_resid_pre")
    >>> df = feature_logit_effects(model, dictionary=D, features=[0, 3], top=2)
    >>> len(df), sorted(set(df["side"]))
    (8, ['bottom', 'top'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, check_model, logits_meaningful
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.splice import check_dictionary
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

LOGIT_BLOCK = 256  # features unembedded at once: [LOGIT_BLOCK, d_vocab] float32 at a time


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


def check_feature_ids(features: Any, d_sae: int) -> torch.Tensor:
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
    feats = check_feature_ids(features, dictionary.d_sae)
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

"""The analyses :mod:`scale` measures, each as a call on a seeded random task: its
function and arguments, its own estimate, and the difference of two of its tables.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

ANALYSES = (
    "load", "forward", "dla", "lens", "heads", "eap", "eap-ig", "evaluate", "patch", "path",
    "ablate", "qk",
)  # fmt: skip
CIRCUIT_EDGES = 2000


def _task(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Seeded clean / corrupted random tokens and random answer / wrong ids per sequence."""
    import torch

    from interp.core.metrics import logit_diff_metric
    from interp.core.protocol import model_device

    vocab = int(model.cfg.d_vocab)
    gen = torch.Generator().manual_seed(0)
    shape = (spec["batch"], spec["pos"])
    clean = torch.randint(2, vocab, shape, generator=gen)
    corrupted = torch.randint(2, vocab, shape, generator=gen)
    clean[:, 0] = corrupted[:, 0] = 0  # BOS
    answer = torch.randint(2, vocab, (spec["batch"],), generator=gen)
    wrong = (answer + torch.randint(1, vocab - 2, (spec["batch"],), generator=gen) - 2) % (
        vocab - 2
    ) + 2  # never equal to answer
    device = model_device(model)
    return {
        "clean": clean.to(device),
        "corrupted": corrupted.to(device),
        "answer": answer,
        "wrong": wrong,
        "metric": logit_diff_metric(answer, wrong),
    }


def _circuit_edges(model: Any, folder: Path) -> tuple[Any, str]:
    """The top edges of this folder's EAP run, else seeded random edges of the graph."""
    import numpy as np

    from interp.analysis import build_graph

    saved = folder / "eap-top-edges.json"
    if saved.is_file():
        return json.loads(saved.read_text()), "eap top"
    valid = build_graph(model).valid
    where = np.flatnonzero(valid)
    pick = np.random.default_rng(0).choice(where, min(CIRCUIT_EDGES, len(where)), replace=False)
    mask = np.zeros(valid.shape, dtype=bool)
    mask.flat[pick] = True
    return mask, "random"


def _call(name: str, model: Any, task: dict[str, Any], folder: Path) -> tuple[Any, Any, dict]:
    """The analysis ``name`` as a function and its arguments (after ``model, tokens``)."""
    from interp import analysis as A

    corrupted, metric = task["corrupted"], task["metric"]
    L, H = int(model.cfg.n_layers), int(model.cfg.n_heads)
    pair = dict(corrupted_tokens=corrupted, metric=metric)
    info: dict[str, Any] = {}
    if name == "dla":
        return A.direct_logit_attribution, dict(answer=task["answer"], wrong=task["wrong"]), info
    if name == "lens":
        return A.logit_lens, {}, info
    if name == "heads":
        return A.attribute_heads, dict(ablation="patch", **pair), info
    if name == "eap":
        return A.attribute_edges, pair, info
    if name == "eap-ig":
        return A.attribute_edges, dict(method="eap-ig", steps=5, **pair), info
    if name == "evaluate":
        edges, info["edges_from"] = _circuit_edges(model, folder)
        return A.evaluate_circuit, dict(edges=edges, **pair), info
    if name == "patch":
        return A.patch_components, dict(component="resid_pre", by="layer", **pair), info
    if name == "path":
        info["senders"] = f"L{L // 2}H0..{H - 1} -> logits"
        senders = [f"L{L // 2}H{h}" for h in range(H)]
        return A.path_patch, dict(senders=senders, **pair), info
    if name == "ablate":
        info["heads"] = f"L{L // 2}H0..{H - 1}, zero"
        heads = [(L // 2, h) for h in range(H)]
        return A.ablate_heads, dict(ablation="zero", metric=metric, heads=heads), info
    if name == "qk":
        info["head"] = f"L{L // 2}H0, last query, every key"
        return A.qk_attribution, dict(layer=L // 2, head=0), info
    raise ValueError(name)


def _accepts(fn: Any, keyword: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False
    return keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _estimate(fn: Any, model: Any, clean: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The analysis's own estimate (``estimate=True``), or None where it has none yet."""
    try:
        est = fn(model, clean, estimate=True, **kwargs)
    except TypeError as exc:
        if "estimate" in str(exc):
            return None
        raise
    fields = ("peak_bytes", "forward_equivalents", "chunks", "prompts_per_chunk")
    return {f: getattr(est, f, None) for f in fields}


def _difference(a: Any, b: Any) -> float:
    """The largest absolute difference between the numeric columns of two tables."""
    import numpy as np
    import pandas as pd

    if not isinstance(a, pd.DataFrame) or a.shape != b.shape:
        return float("nan")
    cols = [c for c in a.columns if pd.api.types.is_numeric_dtype(a[c])]
    if not cols:
        return 0.0
    x, y = a[cols].to_numpy(dtype=float), b[cols].to_numpy(dtype=float)
    both = np.isnan(x) & np.isnan(y)
    return float(np.nanmax(np.where(both, 0.0, np.abs(x - y)), initial=0.0))

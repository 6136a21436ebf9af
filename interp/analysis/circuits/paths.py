"""Exact path patching: a sender's output from the source run reaching only some receivers.

Path patching (Wang et al. 2022; Goldowsky-Dill et al. 2023) asks how much
of a sender's effect goes through particular receivers: the source run's
output of the sender is added to the named receivers' inputs (a head's query,
key or value separately, an MLP's input, or the logits) while every other
component keeps its base-run input; what the receivers then compute flows on
through the rest of the model as usual. With ``receivers=None`` the receiver
is the logits: the sender's *direct* effect. ``direction``
(:mod:`interp.engine.direction`): ``"noising"`` (the default, ARENA's) patches
the corrupted run's sender output into the clean run, ``"denoising"`` the clean
run's into the corrupted run.

For each sender ``s`` and every named receiver ``r``:
``input_r = base input_r + (source_s - base_s)``. ARENA's algorithm runs two
full passes per sender (freeze every head, patch the sender, read the
receivers' inputs; then patch those in); here each sender costs one pass
resumed at the first receiver's layer (or only the final norm and
unembedding, for the logits), with senders packed into shared passes, and
the same numbers (tested against a hooks-only computation of the definition).

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.core.metrics import logit_diff_metric
    >>> model = load_model("induction-2l")
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])
    >>> corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]])
    >>> df = path_patch(model, clean, corrupted_tokens=corrupted, senders=["embed", "L0H1"],
    ...                 receivers=["L1H1.v"], metric=logit_diff_metric(8, 9))
    >>> df.set_index("sender")["normalized"].abs().round(2).to_dict()  # the token, not L0H1
    {'embed': 0.96, 'L0H1': 0.0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from interp.core.errors import InterpError
from interp.core.metrics import Metric
from interp.core.precision import model_dtype
from interp.core.protocol import HookedModel, eval_no_grad, positions_label
from interp.core.shapes import Tokens
from interp.engine import runner
from interp.engine.batching import check_work
from interp.engine.chunks import Estimate
from interp.engine.direction import Direction, check_span, clean_first, effects, normalized
from interp.engine.edges.cost import edge_footprint, pass_shape, pass_work, patch_cost
from interp.engine.edges.passes import patch_edges
from interp.engine.edges.task import (
    begin_chunk,
    check_edge_task,
    edge_inputs,
    prepare_chunks,
)
from interp.outputs.frames import table_attrs


def path_patch(
    model: HookedModel,
    tokens: Tokens,
    *,
    corrupted_tokens: Tokens,
    metric: Metric | Any,
    direction: Direction = "noising",
    senders: Sequence[Any] | None = None,
    receivers: Sequence[str] | None = None,
    positions: Any = None,
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """One row per sender: the metric when its source-run output reaches only ``receivers``.

    ``effect = patched - m(base run)`` and ``normalized = effect / (m(source run) - m(base
    run))``: 1 means the path from the sender to the receivers carries the whole
    difference between the runs. Exact: two baselines and one resumed pass per sender
    (packed by layer); the prompts run in chunks under ``memory_budget``
    (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``.
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``.
        direction: Which run a patch edits: ``'noising'`` (the default: the corrupted run's
            outputs into the clean run) or ``'denoising'`` (the clean run's into the
            corrupted run).
        senders: Edge ends that send: labels (``"L0H1"``, ``"L3.mlp"``, ``"embed"``) or
            ``(layer, head)`` pairs; ``None`` is every sender that precedes all the receivers.
        receivers: Edge ends that receive: labels (``"L1H1.k"``; ``"L1H1"`` for its q, k and
            v; ``"L2.mlp"``; ``"logits"``); ``None`` is the logits.
        positions: Where an intervention *edits* (where the senders' outputs change): ints
            (negative from the end) or a ``[pos]`` bool mask; ``None`` is every position.
        cache: An ActivationCache of ``tokens`` (the clean run's); it is read only after its
            earliest token-dependent activation is recomputed on ``tokens`` and matches.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per sender: ``sender, receivers, clean, corrupted, patched,
        effect, normalized``. ``attrs`` follow :data:`interp.outputs.frames.SCHEMA` (the
        direction, metric), plus ``receivers`` and ``chunks``. With
        ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for unknown senders or receivers, a sender that does not
            precede a receiver, an unknown direction, tokens that do not pair up or are
            equal, clean and corrupted runs with the same metric, a metric that needs an LM
            head the model lacks, ``positions='each'`` (per-position edges are
            attribute_edges' and evaluate_circuit's), or a cache of other tokens.
    """
    if isinstance(positions, str) and positions == "each":
        raise InterpError(
            "positions='each' (one edge per position) is for attribute_edges and "
            "evaluate_circuit; path_patch patches a path at every position or at the positions "
            "you list: pass None or a list of positions"
        )
    task = check_edge_task(
        model, tokens, corrupted_tokens=corrupted_tokens, metric=metric, ablation="patch",
        positions=positions, direction=direction,
    )  # fmt: skip
    graph = task.graph
    names = ["logits"] if receivers is None else list(receivers)
    if isinstance(receivers, str):
        raise InterpError(f"receivers must be a list, e.g. [{receivers!r}]")
    if not names:
        raise InterpError("no receivers given; pass labels like ['L1H1.k'], or None for logits")
    r_idx = sorted({j for name in names for j in graph.receiver_indices(name)})
    if senders is None:
        s_idx = [i for i in range(len(graph.senders)) if graph.valid[i, r_idx].all()]
    else:
        if isinstance(senders, str):
            raise InterpError(f"senders must be a list, e.g. [{senders!r}]")
        s_idx = list(dict.fromkeys(graph.sender_index(s) for s in senders))
    if not s_idx:
        raise InterpError("no sender precedes every receiver")
    edits = []
    for s in s_idx:
        late = [graph.receivers[j] for j in r_idx if not graph.valid[s, j]]
        if late:
            raise InterpError(
                f"{graph.senders[s]} does not precede {late[0]}: it writes after the receiver reads"
            )
        edits.append([(s, j) for j in r_idx])
    task.senders = sorted(s_idx)  # the passes record these senders' outputs alone
    work = check_work(
        patch_cost(task, edits) + pass_work(task, 2),
        what=f"path patching {len(edits)} senders",
        fix="pass fewer senders",
    )
    dtype = model_dtype(model)  # runs equal to its rounding are refused (interp.core.precision)

    def chunk(c: runner.Chunk) -> dict[str, Any]:
        prep = begin_chunk(task, c)
        if not c.split:  # one batch: refuse equal runs before the senders' passes
            check_span(prep.base_value, float(prep.source_value), "the normalized column", dtype)
        values = patch_edges(prep, edits, progress=c.progress, desc="path patching")
        return {
            "base": prep.base_value, "source": float(prep.source_value),
            "patched": np.asarray(values, dtype=float), "cost": prep.cost.total,
        }  # fmt: skip

    spec = runner.Task(
        "path_patch", edge_footprint(task, "patch", **pass_shape(task, edits)), work=work,
        chunk=chunk, combine={"base": "mean", "source": "mean", "patched": "mean"},
        metric=task.metric, prepare=lambda chunks: prepare_chunks(task, chunks, cache=cache),
        fix="use shorter prompts", desc="paths", inputs=(edge_inputs(task), edits),
    )  # fmt: skip
    with eval_no_grad(model):  # every pass in eval mode without gradients, once
        out = runner.run(model, tuple(task.tokens.shape), spec, memory_budget=memory_budget,
                         estimate=estimate, progress=progress)  # fmt: skip
    if isinstance(out, Estimate):
        return out
    task.cost.add(out.forward_equivalents)
    base, source = float(out.values["base"]), float(out.values["source"])
    check_span(base, source, "the normalized column", dtype)
    patched = list(out.values["patched"])
    clean, corrupted = clean_first(task.direction, base, source)
    effect = effects(patched, base)
    df = pd.DataFrame(  # in one go: each inserted column costs as much as a small pass
        {
            "sender": [graph.senders[s] for s in s_idx],
            "receivers": ",".join(graph.receivers[j] for j in r_idx),
            "clean": clean,
            "corrupted": corrupted,
            "patched": patched,
            "effect": effect,
            "normalized": normalized(effect, base=base, source=source),
        }
    )
    df.attrs.update(
        table_attrs(
            "path_patch",
            description="the metric when each sender's source-run output reaches only the "
            f"receivers ({task.direction})",
            method="exact",
            ablation="patch",
            direction=task.direction,
            metric=task.metric,
            model=model,
            positions=positions_label(task.positions),
            forward_equivalents=task.cost.forward_equivalents,
            engine="edges",
            receivers=[graph.receivers[j] for j in r_idx],
            chunks=out.chunks,
        )
    )
    return df

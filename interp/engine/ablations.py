"""What replaces an activation: the ``ablation`` of every intervention.

One word for every engine and analysis (:data:`ABLATIONS`):

* ``"zero"``: the activation becomes 0;
* ``"mean"``: its mean over the batch (or over ``reference_tokens``), per position;
* ``"resample"``: each sequence's activation on another, randomly drawn (seeded)
  sequence: any row of ``reference_tokens``, or a *different* row of the batch;
* ``"patch"``: the same activation in another run (the source run of a patching
  direction: :mod:`interp.engine.direction`).

:func:`values_for` builds the replacement tensors of single-activation edits
(:mod:`interp.engine.sweeps.sweep`); the edge engine makes its own for sender outputs.

Example:
    >>> resample_index(4, None, seed=0).tolist()  # never a sequence's own row
    [3, 0, 3, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from interp.core.errors import InterpError
from interp.core.metrics import Metric, scalar
from interp.core.protocol import HookedModel
from interp.engine.batching import Cost
from interp.engine.cache import CheckedCache, blocks_before, cache_of

Ablation = Literal["zero", "mean", "resample", "patch"]
ABLATIONS: tuple[str, ...] = ("zero", "mean", "resample", "patch")


def check_ablation(ablation: Any, allowed: Sequence[str] = ABLATIONS) -> str:
    """``ablation`` if it is one of ``allowed``.

    Raises:
        InterpError: naming the choices.
    """
    if ablation not in allowed:
        raise InterpError(f"unknown ablation {ablation!r}; choose one of {', '.join(allowed)}")
    return str(ablation)


def resample_index(n: int, n_ref: int | None, seed: int, device: Any = None) -> torch.Tensor:
    """``[n]`` seeded draws: a row of a reference batch of ``n_ref`` rows, or (``n_ref=None``)
    a row of the same batch other than the sequence's own.

    Raises:
        InterpError: without a reference batch, for a batch of one sequence.
    """
    gen = torch.Generator().manual_seed(seed)
    if n_ref is not None:
        idx = torch.randint(n_ref, (n,), generator=gen)  # every reference row can be drawn
    else:
        if n < 2:
            raise InterpError(
                "resample ablation without reference_tokens draws another sequence of the batch, "
                "so it needs at least two sequences (or pass reference_tokens)"
            )
        idx = torch.randint(n - 1, (n,), generator=gen)
        idx = idx + (idx >= torch.arange(n)).long()  # skip the sequence itself, uniformly
    return idx.to(device) if device is not None else idx


def check_reference(
    model: HookedModel, tokens: torch.Tensor, ablation: str, reference_tokens: Any
) -> torch.Tensor | None:
    """``reference_tokens`` checked for ``ablation`` (``None`` stays ``None``).

    A mean over one sequence is refused: it is that sequence, so every effect
    would be 0. Resampling within the batch needs two sequences.

    Raises:
        InterpError: for reference tokens with zero ablation or patching, of
            another length than ``tokens``, mean ablation of one sequence
            without at least two reference sequences, a single reference
            sequence for a mean, or resampling one sequence without references.
    """
    from interp.core.checks import check_tokens

    if reference_tokens is not None:
        if ablation not in ("mean", "resample"):
            raise InterpError(
                f"reference_tokens are for mean and resample ablation, not {ablation}"
            )
        reference_tokens = check_tokens(model, reference_tokens, min_len=2, name="reference_tokens")
        if reference_tokens.shape[1] != tokens.shape[1]:
            raise InterpError(
                f"reference tokens have length {reference_tokens.shape[1]} but tokens have "
                f"{tokens.shape[1]}; mean and resample ablation need equal lengths"
            )
    if ablation == "resample" and reference_tokens is None and tokens.shape[0] < 2:
        resample_index(tokens.shape[0], None, 0)  # raises the explanation, before any pass
    if ablation != "mean":
        return reference_tokens
    if reference_tokens is None and tokens.shape[0] < 2:
        raise InterpError(
            "mean ablation of a batch of one sequence replaces each head by its own output (the "
            "mean of one sequence is the sequence), so every effect would be 0; pass at least two "
            "sequences, or reference_tokens (>= 2 sequences of the same length) to average over"
        )
    if reference_tokens is not None and reference_tokens.shape[0] < 2:
        raise InterpError(
            "mean ablation over one reference sequence is patching from that sequence, not a "
            "mean; pass at least two reference sequences (or use ablation='resample')"
        )
    return reference_tokens


def values_for(
    model: HookedModel,
    tokens: torch.Tensor,
    ablation: str,
    names: Sequence[str],
    *,
    reference_tokens: torch.Tensor | None,
    cache: CheckedCache | None,
    seed: int,
    cost: Cost | None = None,
) -> dict[str, torch.Tensor] | None:
    """Per hook in ``names``, the activation an ablation splices in (batch first).

    ``None`` for zero ablation; the mean over the batch (or the reference
    batch) for ``"mean"``; a seeded draw of another sequence for
    ``"resample"``. Reads the activations from ``cache`` (the checked cache
    of ``tokens``) when there is no reference batch. A pass it runs is added to ``cost``
    (one on the reference batch counts its size in batches of ``tokens``); completing
    ``cache`` is counted by the cache (:attr:`CheckedCache.work`).
    """
    if ablation == "zero":
        return None
    names = list(dict.fromkeys(names))
    if cache is not None and reference_tokens is None:
        ref, acts = tokens, cache.complete(names)
    else:
        ref = tokens if reference_tokens is None else reference_tokens
        acts = cache_of(model, ref, names)
        if cost is not None:
            stop = blocks_before(cost.n_layers, names)
            cost.forward(ref.shape[0] / tokens.shape[0], stop=stop)
    got = {n: acts[n] for n in names}
    if ablation == "mean":
        return {
            n: x.mean(0, keepdim=True).expand(tokens.shape[0], *x.shape[1:]) for n, x in got.items()
        }
    n_ref = None if reference_tokens is None else ref.shape[0]
    idx = resample_index(tokens.shape[0], n_ref, seed, device=tokens.device)
    return {n: x[idx.to(x.device)] for n, x in got.items()}  # each on its layer's device


def values_work(
    n_layers: int,
    tokens: torch.Tensor,
    ablation: str,
    names: Sequence[str],
    *,
    reference_tokens: torch.Tensor | None,
    cache: CheckedCache | None,
    split: bool,
) -> float:
    """The forward-equivalents of the passes :class:`Replacements` runs for ``names`` (in
    passes over ``tokens``): none for zero ablation or values read from ``cache`` (the cache
    counts its own, :func:`interp.engine.cache.cache_work`); else a pass stopped after the
    last of ``names`` over the batch, or over the reference batch (its size in batches of
    ``tokens``), except that resampling in chunks runs only the sequences drawn (one batch).

    Example:
        >>> import torch
        >>> t = torch.zeros(4, 5, dtype=torch.long)
        >>> values_work(2, t, "mean", ["blocks.0.attn.hook_z"], reference_tokens=t[:2],
        ...             cache=None, split=False)
        0.25
    """
    if ablation == "zero" or (cache is not None and reference_tokens is None):
        return 0.0
    share = blocks_before(n_layers, list(names)) / max(1, n_layers)
    if reference_tokens is None or (ablation == "resample" and split):
        return share
    return share * reference_tokens.shape[0] / tokens.shape[0]


class Replacements:
    """What an ablation splices in, chunk by chunk (:mod:`interp.engine.chunks`): built once
    for every prompt, so that chunks give the numbers of one batch.

    ``"zero"``: nothing (``None``); ``"mean"``: the mean over the whole batch (or the
    reference batch), computed once, a chunk of prompts at a time; ``"resample"``: one seeded
    draw for the whole batch, and each chunk's rows then run (or are read from the cache)
    on the sequences drawn for them. One chunk is :func:`values_for` exactly.
    """

    def __init__(
        self,
        model: HookedModel,
        tokens: torch.Tensor,
        ablation: str,
        names: Sequence[str],
        *,
        reference_tokens: torch.Tensor | None,
        cache: CheckedCache | None,
        seed: int,
        cost: Cost,
        chunks: Sequence[slice],
    ):
        self.model, self.tokens, self.ablation = model, tokens, ablation
        self.names = list(dict.fromkeys(names))
        self.reference, self.cache, self.cost = reference_tokens, cache, cost
        self.whole: dict[str, torch.Tensor] | None = None
        self.means: dict[str, torch.Tensor] = {}
        if len(chunks) == 1 or ablation == "zero":
            self.whole = values_for(
                model, tokens, ablation, self.names, reference_tokens=reference_tokens,
                cache=cache, seed=seed, cost=cost,
            ) if len(chunks) == 1 else None  # fmt: skip
            self.single = True
            return
        self.single = False
        source = tokens if reference_tokens is None else reference_tokens
        if ablation == "mean":
            if cache is not None and reference_tokens is None:
                got = cache.complete(self.names)
                self.means = {n: got[n].mean(0, keepdim=True) for n in self.names}
            else:
                self.means = self._mean(source, max(s.stop - s.start for s in chunks))
        else:
            n_ref = None if reference_tokens is None else source.shape[0]
            self.index = resample_index(tokens.shape[0], n_ref, seed, device=tokens.device)
            self.source = source

    def _mean(self, source: torch.Tensor, size: int) -> dict[str, torch.Tensor]:
        total: dict[str, torch.Tensor] = {}
        stop = blocks_before(self.cost.n_layers, self.names)
        for start in range(0, source.shape[0], size):
            acts = cache_of(self.model, source[start : start + size], self.names)
            for n in self.names:
                part = acts[n].double().sum(0, keepdim=True)
                total[n] = part if n not in total else total[n] + part
            self.cost.forward(min(size, source.shape[0] - start) / self.tokens.shape[0], stop=stop)
        dtype = {n: acts[n].dtype for n in self.names}
        return {n: (t / source.shape[0]).to(dtype[n]) for n, t in total.items()}

    def rows(self, rows: slice) -> dict[str, torch.Tensor] | None:
        """The replacement values of the prompts ``rows`` (batch first)."""
        if self.single or self.ablation == "zero":
            return self.whole
        n = rows.stop - rows.start
        if self.ablation == "mean":
            return {k: m.expand(n, *m.shape[1:]) for k, m in self.means.items()}
        idx = self.index[rows]
        if self.cache is not None and self.reference is None:
            got = self.cache.complete(self.names)
            return {k: got[k][idx] for k in self.names}
        acts = cache_of(self.model, self.source[idx], self.names)
        stop = blocks_before(self.cost.n_layers, self.names)
        self.cost.forward(n / self.tokens.shape[0], stop=stop)
        return {k: acts[k] for k in self.names}


def source_run(
    model: HookedModel,
    tokens: torch.Tensor,
    metric: Metric,
    names: Sequence[str],
    cache: CheckedCache | None,
    score_tokens: torch.Tensor | None = None,
) -> tuple[float, dict[str, torch.Tensor]]:
    """The metric of the run on ``tokens`` (scored against ``score_tokens``, default
    ``tokens``) and its activations at ``names`` (the values a patch splices into the other
    run), read from ``cache`` (already checked against ``tokens``) when given; the metric
    still needs one forward pass. Run under :func:`~interp.core.protocol.eval_no_grad`.

    Raises:
        InterpError: for a metric that returns a non-scalar.
    """
    from interp.runtime import runtime_of

    names = list(names)
    rt = runtime_of(model)
    if cache is None:  # the activations kept by hooks; logits only where the metric reads
        acts: dict[str, torch.Tensor] = {}

        def keeper(name: str) -> Any:  # keyed by the name asked for (bridges alias hooks)
            def keep(x: torch.Tensor, hook: Any) -> None:
                acts[name] = x.detach()

            return keep

        logits = rt.run(tokens, hooks=[(n, keeper(n)) for n in names], rows=metric.rows)
    else:
        logits, acts = rt.run(tokens, rows=metric.rows), cache.complete(names)
    value = scalar(metric(logits, tokens if score_tokens is None else score_tokens), metric.name)
    return value, {n: acts[n] for n in names}

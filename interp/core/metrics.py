"""Metrics: the scalar an ablation, patching or attribution run measures.

A metric is called as ``metric(logits, tokens)`` (logits ``[batch, pos,
d_vocab]``, tokens ``[batch, pos]``) and returns a scalar tensor. A
:class:`Metric` also says what it is, so analyses can check it against the
model *before* any forward pass:

* ``needs_lm_head``: it reads next-token logits, so a model whose logits are
  meaningless (an encoder without a language-model head) is refused;
* ``rows``: which positions' logits it reads (``None``: all), so an engine may
  skip the unembedding elsewhere;
* ``next_token``: it scores the prediction of the *next* token, which only
  means something on a causal model: an encoder sees the token it would
  "predict", so the next-token loss is refused there;
* :meth:`Metric.check` validates token ids and masks against the model and
  the tokens;
* :meth:`Metric.chunk`: the metric of a slice of the prompts and its weight,
  so that an analysis that splits its prompts into chunks (to stay under a
  memory budget, :mod:`interp.engine.chunks`) combines the chunks' values into
  exactly the value of one batch: ``m(all) = sum_c w_c m(c) / sum_c w_c``. The
  built-in metrics are means (over prompts, or over the predictions a loss mask
  counts); a metric of your own is combined only when it says it is a mean over
  prompts (``Metric(fn, mean_over_prompts=True)``), and is otherwise refused
  when the prompts must be split, never silently averaged.

Any plain callable ``metric(logits, tokens)`` is accepted too; it is wrapped
with ``needs_lm_head=False`` (it is the caller's metric).

Example:
    >>> import torch
    >>> m = logit_diff_metric(2, 0)
    >>> float(m(torch.tensor([[[0.0, 1.0, 3.0]]]), torch.tensor([[0]])))
    3.0
    >>> m.name, m.needs_lm_head
    ('logit_diff', True)
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from interp.core.checks import check_int, check_mask, check_not_padding
from interp.core.errors import InterpError
from interp.core.glossary import retired_words
from interp.core.protocol import HookedModel, is_causal, logits_meaningful

MetricFn = Callable[[torch.Tensor, torch.Tensor], Any]


@dataclasses.dataclass(frozen=True)
class Metric:
    """A named scalar of ``(logits, tokens)`` that declares what it reads (module docstring).

    Called as ``metric(logits, tokens)``; the declarations let analyses check it against the
    model before any forward pass (:meth:`check`) and combine its values over chunks of the
    prompts (:meth:`chunk`). Wrap a metric of your own as ``Metric(fn, name=...,
    mean_over_prompts=True)`` when it is a mean over the batch.

    Attributes:
        fn: The function ``fn(logits, tokens) -> scalar`` (logits ``[batch, pos, d_vocab]``,
            tokens ``[batch, pos]``).
        name: What tables and messages call it (default ``"metric"``).
        needs_lm_head: It reads next-token logits, so a model whose logits are meaningless
            is refused (default ``False``).
        rows: Which positions' logits it reads (negative from the end); ``None`` is all, and
            an engine may skip the unembedding elsewhere.
        checker: ``checker(model, tokens)`` that raises :class:`~interp.core.errors.InterpError`
            for ids or masks that do not fit (``None``: no check).
        next_token: It scores the prediction of the *next* token, so it is refused on an
            encoder (default ``False``).
        unit: What one unit of the value is, e.g. ``"nats"`` (exported tables say it).
        part: ``part(rows) -> (metric, weight)``: the metric of the prompts in a slice and its
            weight in the mean over every prompt (``None``: see ``mean_over_prompts``).
        mean_over_prompts: A caller's metric that is a plain mean over its prompts, so
            chunks combine by their sizes (default ``False``: refused when the prompts must
            be split).
        chunkable: Whether values on chunks of the prompts combine into the value on all.
        copies: ``copies(logits, tokens, k) -> [k]``: the metric of ``k`` edited copies of the
            prompts stacked along the batch (logits ``[k * batch, ...]``) in one call, each
            equal to ``fn`` on its copy (``None``: ``fn`` is called per copy;
            :meth:`of_copies`).
    """

    fn: MetricFn
    name: str = "metric"
    needs_lm_head: bool = False
    rows: tuple[int, ...] | None = None  # positions (negative from the end) whose logits it reads
    checker: Callable[[Any, torch.Tensor], None] | None = None
    next_token: bool = False
    unit: str = ""  # what one unit of the value is, e.g. "nats" (exported tables say it)
    # the metric of the prompts in a slice, and its weight in the mean over every prompt
    part: Callable[[slice], tuple[Metric, float]] | None = None
    mean_over_prompts: bool = False  # a caller's metric that is a plain mean over its prompts
    copies: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor] | None = None

    def __call__(self, logits: torch.Tensor, tokens: torch.Tensor) -> Any:
        return self.fn(logits, tokens)

    def check(self, model: HookedModel, tokens: torch.Tensor) -> None:
        """Raise before any forward pass if this metric cannot be measured on ``model``/``tokens``.

        Args:
            model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
                (``interp.core.protocol.HookedModel``). It is not run.
            tokens: ``[batch, pos]`` integer ids the metric will score.

        Raises:
            InterpError: for a metric that needs an LM head on a model without
                one, a next-token metric on an encoder, or ids / masks that do not fit the
                model or the tokens.
        """
        if self.needs_lm_head and not logits_meaningful(model):
            raise InterpError(
                f"the {self.name} metric reads next-token logits, but this model's logits are "
                "meaningless (its checkpoint has no language-model head); pass a metric of "
                "your own that reads what the model has"
            )
        if self.next_token and not is_causal(model):
            raise InterpError(
                f"the {self.name} metric is a next-token loss, which has no meaning on an encoder "
                "(bidirectional attention sees the token it would predict); pass a metric of your "
                "own, e.g. a masked-token logit difference"
            )
        if self.checker is not None:
            self.checker(model, tokens)

    def of_copies(self, logits: torch.Tensor, tokens: torch.Tensor, k: int) -> list[float]:
        """The metric of each of ``k`` edited copies of the prompts, as finite floats.

        The copies' logits are stacked along the batch (``[k * batch, ...]``, copy ``i`` in
        rows ``i * batch ..``): one call of :attr:`copies` where the metric has it, else
        ``fn`` per copy.

        Example:
            >>> m = loss_metric()
            >>> logits, tokens = torch.randn(6, 4, 5), torch.randint(0, 5, (2, 4))
            >>> got = m.of_copies(logits, tokens, 3)
            >>> ref = [float(m(x, tokens)) for x in logits.split(2)]
            >>> max(abs(a - b) for a, b in zip(got, ref)) < 1e-6
            True

        Args:
            logits: ``[k * batch, pos, d_vocab]``.
            tokens: ``[batch, pos]`` integer ids: the prompts the copies share.
            k: How many copies ``logits`` stacks.

        Returns:
            ``k`` values, in copy order.

        Raises:
            InterpError: as :func:`scalar`, for a value that is not one finite number.
        """
        if k > 1 and self.copies is not None:
            return [scalar(v, self.name) for v in self.copies(logits, tokens, k).tolist()]
        parts = logits.split(tokens.shape[0]) if k > 1 else [logits]
        return [scalar(self.fn(x, tokens), self.name) for x in parts]

    @property
    def chunkable(self) -> bool:
        """Whether values of this metric on chunks of the prompts combine into its value on
        all of them (:meth:`chunk`)."""
        return self.part is not None or self.mean_over_prompts

    def chunk(self, rows: slice) -> tuple[Metric, float]:
        """This metric on the prompts ``rows`` of the batch, and its weight in the mean over all.

        ``m(all) = sum_c w_c m(c) / sum_c w_c`` over the chunks ``c``. A weight of 0 means the
        chunk counts nothing (a loss mask that selects none of its predictions); its value is
        not computed.

        Args:
            rows: The slice of the batch's prompts the chunk holds.

        Returns:
            ``(metric, weight)``: the chunk's :class:`Metric` and its weight ``w``.

        Raises:
            InterpError: for a metric that does not say how its chunks combine.
        """
        if self.part is not None:
            return self.part(rows)
        if self.mean_over_prompts:
            return self, float(rows.stop - rows.start)
        raise InterpError(
            f"metric {self.name!r} is not known to be a mean over prompts, so its values on "
            "chunks of the prompts cannot be combined into its value on all of them; wrap it as "
            "interp.core.metrics.Metric(fn, name=..., mean_over_prompts=True) if it is a mean over "
            "the batch, or pass fewer prompts or a larger memory_budget so that one chunk holds "
            "them all"
        )


def as_metric(metric: Any) -> Metric:
    """``metric`` as a :class:`Metric` (plain callables are wrapped).

    Raises:
        InterpError: for something that is not callable, or cannot be called
            with two arguments (logits, tokens).
    """
    if isinstance(metric, Metric):
        return metric
    if not callable(metric):
        raise InterpError(f"metric must be callable as metric(logits, tokens), got {metric!r}")
    name = str(getattr(metric, "__name__", "metric"))
    try:
        sig = inspect.signature(metric)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        sig = None
    if sig is not None:
        try:
            sig.bind(None, None)
        except TypeError:
            raise InterpError(
                f"metric {name!r} takes ({', '.join(sig.parameters)}), but metrics are called as "
                "metric(logits, tokens); e.g. lambda logits, tokens: logits[:, -1, 5].mean()"
            ) from None
    return Metric(fn=metric, name=name)


def scalar(value: Any, name: str) -> float:
    """A metric's value as a finite float.

    Raises:
        InterpError: for a non-scalar, a non-number, NaN or infinity.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InterpError(
                f"metric {name!r} must return a scalar, got shape {tuple(value.shape)}; "
                "reduce it (e.g. .mean()) to one number"
            )
        value = value.item()
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InterpError(
            f"metric {name!r} must return a number, got {type(value).__name__}"
        ) from None
    if not math.isfinite(out):
        raise InterpError(f"metric {name!r} returned {out}; check its positions and the model")
    return out


def differentiable(value: Any, name: str, what: str) -> None:
    """Refuse a metric value a gradient cannot be taken of: not one number, or one computed
    outside torch (a Python float), or cut off from the logits.

    Raises:
        InterpError: naming the metric, what needs its gradient and the exact alternative.
    """
    if isinstance(value, torch.Tensor) and value.numel() != 1:
        scalar(value, name)  # raises: a gradient is taken of one number
    if not isinstance(value, torch.Tensor):
        raise InterpError(
            f"metric {name!r} returned a {type(value).__name__}, which is not differentiable: "
            f"{what} needs a torch scalar computed from the logits (no .item() or float()); "
            "exact measurements (method='exact', the ablate and patch sweeps) take any number"
        )
    if not value.requires_grad:
        raise InterpError(
            f"metric {name!r} is not differentiable in the model's output; {what} needs a "
            "metric computed from the logits with torch operations"
        )


def next_token_nll(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[batch, pos - 1]`` cross-entropy of ``tokens[:, 1:]`` given ``logits[:, :-1]``."""
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)


def loss_metric(loss_mask: torch.Tensor | None = None) -> Metric:
    """Mean next-token cross-entropy, over the predictions ``loss_mask`` selects (all if None).

    ``loss = sum_{b, t} mask[b, t] * nll[b, t] / sum mask``, with ``nll[b, t]`` the
    cross-entropy of token ``t + 1`` given the logits at ``t``. A mean over the predictions
    it counts, so chunks of the prompts combine exactly (:meth:`Metric.chunk`).

    Args:
        loss_mask: ``[batch, pos]`` bool: which positions count (``[pos]`` for a single
            sequence): True where the prediction of the *next* token counts (the last
            column predicts nothing); ``None`` counts every prediction.

    Returns:
        A :class:`Metric` named ``"loss"``, in nats, that needs an LM head and a causal model.

    Raises:
        InterpError: at :meth:`Metric.check`, for a mask that does not fit the tokens.
    """
    mask = loss_mask  # anything else than a [batch, pos] bool tensor fails at check()
    if isinstance(mask, torch.Tensor):
        mask = mask.detach()[None] if mask.ndim == 1 else mask.detach()  # [pos]: one sequence

    def fn(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return copies(logits, tokens, 1)[0]

    def copies(logits: torch.Tensor, tokens: torch.Tensor, k: int) -> torch.Tensor:
        nll = next_token_nll(logits, tokens.repeat(k, 1) if k > 1 else tokens)
        nll = nll.view(k, -1)  # [copy, batch * (pos - 1)]
        if mask is None:
            return nll.mean(1)
        m = mask[:, :-1].to(device=nll.device, dtype=nll.dtype).reshape(-1)
        return (nll * m).sum(1) / m.sum()

    def checker(model: HookedModel, tokens: torch.Tensor) -> None:
        if loss_mask is not None:
            check_mask(loss_mask, tokens, "loss_mask", drop_last=True)  # as the caller gave it

    rows = None
    if isinstance(mask, torch.Tensor) and mask.ndim == 2:
        rows = tuple(int(i) for i in torch.nonzero(mask[:, :-1].any(0)).flatten())

    def part(sl: slice) -> tuple[Metric, float]:
        if not isinstance(mask, torch.Tensor):  # every prediction of every prompt counts
            return whole, float(sl.stop - sl.start)
        sub = mask[sl]
        return loss_metric(sub), float(sub[:, :-1].sum())

    whole = Metric(
        fn=fn,
        name="loss",
        needs_lm_head=True,
        rows=rows,
        checker=checker,
        next_token=True,
        unit="nats (mean next-token cross-entropy)",
        part=part,
        copies=copies,
    )
    return whole


def _ids(value: Any, name: str) -> int | torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype == torch.bool or value.ndim != 1:
            raise InterpError(f"{name} must be an int or a [batch] tensor of int ids")
        return value.long()
    return check_int(value, name, minimum=0)


@retired_words(positions="at")
def logit_diff_metric(answer: Any, wrong: Any, *, at: int = -1) -> Metric:
    """Mean over the batch of ``logit[answer] - logit[wrong]`` at position ``at``.

    Args:
        answer: The token(s) a metric, DLA or lens follows (one for all sequences or one per
            sequence): here token ids only, an int or a ``[batch]`` tensor of ids (one answer
            pair per sequence, as in name-mover prompts).
        wrong: The other token(s) a metric, DLA or lens follows: the one whose logit is
            subtracted, in the same forms; not ``answer``'s id.
        at: Where logits are *read*: an int, negative from the end (default ``-1``, the last
            position).

    Returns:
        A :class:`Metric` named ``"logit_diff"``, in logits, that needs an LM head.

    Raises:
        InterpError: for negative or non-integer ids, the same id on both sides, a
            retired parameter name (``positions=``), and (at :meth:`Metric.check`) ids
            outside the vocabulary, a batch of ids that does not match the tokens, or a
            position out of range or on right padding.
    """
    c, i = _ids(answer, "answer"), _ids(wrong, "wrong")
    pos = check_int(at, "at")
    if isinstance(c, int) and isinstance(i, int) and c == i:
        raise InterpError(
            f"answer and wrong are the same id ({c}); the logit difference would always be 0"
        )

    def fn(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return copies(logits, tokens, 1)[0]

    def copies(logits: torch.Tensor, tokens: torch.Tensor, k: int) -> torch.Tensor:
        read = logits[:, pos].float().view(k, -1, logits.shape[-1])  # [copy, batch, d_vocab]
        rows = torch.arange(read.shape[1], device=read.device)
        cc = c.to(read.device) if isinstance(c, torch.Tensor) else c
        ii = i.to(read.device) if isinstance(i, torch.Tensor) else i
        return (read[:, rows, cc] - read[:, rows, ii]).mean(1)

    def checker(model: HookedModel, tokens: torch.Tensor) -> None:
        d_vocab = int(getattr(model.cfg, "d_vocab_out", None) or model.cfg.d_vocab)
        n, length = tokens.shape
        for name, v in (("answer", c), ("wrong", i)):
            vals = v.tolist() if isinstance(v, torch.Tensor) else [v]
            if isinstance(v, torch.Tensor) and len(vals) != n:
                raise InterpError(f"{name} has {len(vals)} ids but there are {n} sequences")
            bad = [x for x in vals if not 0 <= x < d_vocab]
            if bad:
                raise InterpError(
                    f"{name} token id {bad[0]} is outside the vocabulary [0, {d_vocab})"
                )
        if not -length <= pos < length:
            raise InterpError(f"at={pos} is out of range for sequences of length {length}")
        check_not_padding(model, tokens, [pos], "logit_diff_metric")

    def part(sl: slice) -> tuple[Metric, float]:
        a = c[sl] if isinstance(c, torch.Tensor) else c
        b = i[sl] if isinstance(i, torch.Tensor) else i
        return logit_diff_metric(a, b, at=pos), float(sl.stop - sl.start)

    return Metric(
        fn=fn,
        name="logit_diff",
        needs_lm_head=True,
        rows=(pos,),
        checker=checker,
        unit=f"logit difference at position {pos}",
        part=part,
        copies=copies,
    )


def prepare_metric(
    model: HookedModel, tokens: torch.Tensor, metric: Any, loss_mask: torch.Tensor | None
) -> Metric:
    """The metric an analysis measures, checked before any forward pass.

    ``metric=None`` means the next-token loss over ``loss_mask``. A
    ``loss_mask`` beside a metric of the caller's is an error, not silently
    ignored: the mask belongs to the default loss.

    Raises:
        InterpError: as :meth:`Metric.check`, or for ``loss_mask`` with a custom metric.
    """
    if metric is not None and loss_mask is not None:
        raise InterpError(
            "loss_mask selects the positions of the default loss metric; with a metric of "
            "your own, build the mask into it (e.g. loss_metric(loss_mask)) and drop loss_mask"
        )
    m = loss_metric(loss_mask) if metric is None else as_metric(metric)
    m.check(model, tokens)
    return m

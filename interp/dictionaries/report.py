"""How good a dictionary is on a token set: what it explains and what splicing it costs.

* **fraction of variance explained**, ``1 - sum ||x - decode(encode(x))||^2 /
  sum ||x - mean(x)||^2`` over the positions scored;
* **L0**: the mean number of active features per position;
* **dead fraction**: the share of features active at no position scored;
* **losses**: the model's next-token loss clean, spliced with the error term kept (equal
  to clean up to float rounding: a check), and spliced without it (what the features alone
  carry; the gap is the usual "loss added" of a dictionary).

All are sums over chunks planned under the memory budget, so they are exact whatever the
chunking. Models whose logits mean nothing (an encoder without an LM head) get no losses.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=64, architecture="topk", k=4,
    ...                       hook_name="blocks.1.hook_resid_pre")
    >>> r = dictionary_report(model, torch.randint(1, 64, (4, 20)), D)
    >>> r.l0 <= 4, abs(r.loss_with_error - r.clean_loss) < 1e-4
    (True, True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.metrics import next_token_nll
from interp.core.protocol import HookedModel, is_causal, logits_meaningful
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.splice import Splice, check_dictionary
from interp.engine.cost import Flops
from interp.engine.footprints import dictionary_pass_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

NLL = ("clean", "with", "without")  # the losses' sums, in nats


@dataclasses.dataclass(frozen=True)
class DictionaryReport:
    """A dictionary's figures on a token set (module docstring).

    Attributes:
        fraction_variance_explained: ``1 - SSE / SST`` over the positions scored.
        l0: mean active features per position.
        dead_fraction: share of features never active.
        clean_loss: the model's loss (nats), ``None`` without meaningful logits.
        loss_with_error: spliced, error kept.
        loss_without_error: spliced, error dropped.
        n_tokens: positions scored.
        skipped_columns: leading columns left out of the variance, L0 and dead figures.
        attrs: how the figures were computed (:data:`interp.outputs.frames.SCHEMA`: its
            ``forward_equivalents`` the work, in plain passes of the tokens); not a figure,
            so not in :meth:`as_dict`.
    """

    fraction_variance_explained: float
    l0: float
    dead_fraction: float
    clean_loss: float | None
    loss_with_error: float | None
    loss_without_error: float | None
    n_tokens: int
    skipped_columns: int
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict.

        Returns:
            Field name to value.
        """
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "attrs"}


def dictionary_report(
    model: HookedModel,
    tokens: torch.Tensor,
    D: Dictionary,
    *,
    skip_columns: int = 0,
    memory_budget: int | None = None,
    progress: bool = False,
) -> DictionaryReport:
    """Score ``D`` on ``tokens``: variance explained, L0, dead features, spliced losses.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids.
        D: the dictionary (at a hook of ``model``).
        skip_columns: leading columns left out of the reconstruction figures (a BOS
            column, whose norm dwarfs the rest in pretrained models); the losses count
            every prediction, with every column spliced.
        memory_budget: the bytes an analysis may hold beyond the model's weights: the passes
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: show a progress bar over the chunks.

    Returns:
        A :class:`DictionaryReport`.

    Raises:
        InterpError: as :func:`check_dictionary` and :func:`interp.core.checks.check_tokens`;
            ``skip_columns`` leaving no column.
    """
    check_dictionary(model, D)
    tokens = check_tokens(model, tokens, chunked=True)
    skip = check_int(skip_columns, "skip_columns", minimum=0)
    if skip >= tokens.shape[1]:
        raise InterpError(f"skip_columns={skip} leaves none of the {tokens.shape[1]} columns")
    losses = is_causal(model) and logits_meaningful(model) and tokens.shape[1] > 1
    pos = tokens.shape[1]
    foot = dictionary_pass_footprint(model, pos, D.d_sae)

    rt = runtime_of(model)  # every pass through the runtime

    def chunk(c: Chunk) -> dict[str, Any]:
        t = tokens[c.rows]
        part: dict[str, Any] = {}
        with torch.no_grad():
            s = Splice(model, D)
            with_error = rt.run(t, hooks=s.hooks)
            x = (s.error + D.decode(s.acts))[:, skip:].double()  # x itself, to rounding
            err, acts = s.error[:, skip:].double(), s.acts[:, skip:]
            on = acts != 0
            part.update(
                sse=float(err.pow(2).sum()), sx=x.sum((0, 1)), sxx=float(x.pow(2).sum()),
                n=x.shape[0] * x.shape[1], active=int(on.sum()), ever=on.flatten(0, -2).any(0),
            )  # fmt: skip
            for key in NLL:
                part[key] = 0.0
            if losses:
                part["with"] = float(next_token_nll(with_error, t).double().sum())
                part["clean"] = float(next_token_nll(rt.run(t), t).double().sum())
                without = rt.run(t, hooks=Splice(model, D, keep_error=False).hooks)
                part["without"] = float(next_token_nll(without, t).double().sum())
        return part

    # FLOPs (interp.engine.cost): a plain pass each, every row unembedded, each spliced
    # pass's encoder and decoder on every position, and the decoder once more (x rebuilt)
    fl = Flops.of(model)
    splice = pos * 4.0 * D.d_in * D.d_sae / fl.plain(pos)
    work = (3.0 if losses else 1.0) + (2 if losses else 1) * splice + splice / 2
    task = Task(
        "dictionary_report", foot, work=work, chunk=chunk,
        combine={k: "sum" for k in ("sse", "sx", "sxx", "n", "active", "ever", *NLL)},
        desc="dictionary report", inputs=(tokens, D, skip),
    )  # fmt: skip
    ran = run(model, (tokens.shape[0], pos), task, memory_budget=memory_budget,
              progress=progress)  # fmt: skip
    out = ran.values
    sse, sx, sxx, n, active = (out[k] for k in ("sse", "sx", "sxx", "n", "active"))
    ever = out["ever"]  # a bool tensor's sum is its "or": a feature active in any chunk
    nll = {key: out[key] for key in NLL}
    sst = sxx - float((sx * sx).sum()) / n
    preds = tokens.shape[0] * (pos - 1)
    loss = {key: v / preds if losses else None for key, v in nll.items()}
    return DictionaryReport(
        fraction_variance_explained=1.0 - sse / sst if sst > 0 else float("nan"),
        l0=active / n,
        dead_fraction=float((~ever).float().mean()),
        clean_loss=loss["clean"],
        loss_with_error=loss["with"],
        loss_without_error=loss["without"],
        n_tokens=n,
        skipped_columns=skip,
        attrs=table_attrs(
            "dictionary_report",
            description="what the dictionary explains of its hook and what splicing it costs",
            method="exact",
            model=model,
            unit="per field",
            forward_equivalents=work,
            hook=D.hook_name,
            chunks=ran.chunks,
        ),  # fmt: skip
    )

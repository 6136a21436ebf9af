"""A transcoder's figures on a token set, and the two hooks' activations it reads.

:func:`transcoder_report` is a :class:`~interp.dictionaries.report.DictionaryReport` of
the transcoder's *target* hook: the variance of ``y`` explained by ``T(x)``, L0, the dead
share, and the model's next-token loss clean and with the target replaced by ``T(x)``
(error dropped: the transcoder alone; error kept restores the target exactly, so that loss
is the clean one). :func:`pair_activations` reads both hooks in one pass, stopped after the
target.

Example:
    >>> import torch
    >>> from interp.models.hf import random_gpt2
    >>> from interp.dictionaries.transcoder import Transcoder
    >>> model = random_gpt2(2, vocab=40)
    >>> T = Transcoder.random(d_in=32, d_out=32, d_sae=16, architecture="topk", k=2,
    ...                       hook_name="blocks.0.ln2.hook_normalized",
    ...                       hook_name_out="blocks.0.hook_mlp_out")
    >>> r = transcoder_report(model, torch.randint(0, 40, (2, 8)), T)
    >>> r.l0 <= 2, r.loss_with_error == r.clean_loss
    (True, True)
"""

from __future__ import annotations

from typing import Any

import torch

from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.metrics import next_token_nll
from interp.core.protocol import HookedModel, is_causal, logits_meaningful
from interp.dictionaries.inputs import check_finite_weight
from interp.dictionaries.report import DictionaryReport
from interp.dictionaries.splice import check_hook, hook_width
from interp.dictionaries.transcoder import Transcoder
from interp.engine.cost import Flops
from interp.engine.footprints import dictionary_pass_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of


class _Stop(Exception):  # noqa: N818 - control flow, never seen by a caller
    """Raised once both hooks are read, to end the pass."""


def pair_activations(
    model: HookedModel, tokens: torch.Tensor, hook: str, target_hook: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The activations at ``hook`` and ``target_hook``, the pass stopped after the later.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids.
        hook: the input hook.
        target_hook: the output hook (it must fire after ``hook``).

    Returns:
        ``x [batch, pos, d_in]`` and ``y [batch, pos, d_out]``, detached.

    Raises:
        InterpError: a hook that does not fire, or a target that fires before the input.
    """
    box: dict[str, torch.Tensor] = {}

    def record(key: str) -> Any:
        def fn(t: torch.Tensor, hook: Any = None) -> None:
            box[key] = t.detach()
            if key == "y":
                raise _Stop

        return fn

    with torch.no_grad():
        try:
            runtime_of(model).run(tokens, hooks=[(hook, record("x")), (target_hook, record("y"))])
        except _Stop:
            pass
    if "x" not in box or "y" not in box:
        missing = hook if "x" not in box else target_hook
        raise InterpError(
            f"hook {missing!r} did not fire before the target {target_hook!r}: a transcoder "
            "reads a hook that fires before the one it writes (e.g. blocks.L.ln2.hook_normalized "
            "-> blocks.L.hook_mlp_out)"
        )
    return tuple(t.reshape(*t.shape[:2], -1) for t in (box["x"], box["y"]))  # type: ignore[return-value]


def check_transcoder(model: HookedModel, T: Any) -> Transcoder:
    """Refuse a transcoder that cannot sit in ``model``: hooks it lacks, other widths, NaN.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        T: the transcoder.

    Returns:
        ``T``.

    Raises:
        InterpError: not a :class:`Transcoder`; a hook the model lacks; a width other than
            its hook's; a tensor holding NaN or infinite values.
    """
    if not isinstance(T, Transcoder):
        raise InterpError(
            f"expected a Transcoder, got {type(T).__name__}: load one with "
            "interp.dictionaries.load_transcoder(path)"
        )
    for what, hook, width in (("reads", T.hook_name, T.d_in), ("writes", T.hook_name_out, T.d_out)):
        check_hook(model, hook, fix="set T.hook_name / T.hook_name_out to hooks of this model")
        if hook_width(model, hook) != width:
            raise InterpError(
                f"the transcoder {what} {hook!r} with width {width}, but the hook has width "
                f"{hook_width(model, hook)}: it was made for another model or hook"
            )
    for name, t in T.tensors().items():
        check_finite_weight(t, f"the transcoder's {name}", fix="reload or retrain it")
    return T


def transcoder_report(
    model: HookedModel,
    tokens: torch.Tensor,
    T: Transcoder,
    *,
    skip_columns: int = 0,
    memory_budget: int | None = None,
    progress: bool = False,
) -> DictionaryReport:
    """Score ``T`` on ``tokens``: variance of the target explained, L0, dead share, losses.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids.
        T: the transcoder (its hooks in ``model``).
        skip_columns: leading columns left out of the reconstruction figures.
        memory_budget: the bytes an analysis may hold beyond the model's weights: the passes
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: show a progress bar over the chunks.

    Returns:
        A :class:`~interp.dictionaries.report.DictionaryReport` of the target hook.

    Raises:
        InterpError: as :func:`check_transcoder` and :func:`interp.core.checks.check_tokens`;
            ``skip_columns`` leaving no column.
    """
    check_transcoder(model, T)
    tokens = check_tokens(model, tokens, chunked=True)
    skip = check_int(skip_columns, "skip_columns", minimum=0)
    if skip >= tokens.shape[1]:
        raise InterpError(f"skip_columns={skip} leaves none of the {tokens.shape[1]} columns")
    pos = tokens.shape[1]
    losses = is_causal(model) and logits_meaningful(model) and pos > 1
    rt = runtime_of(model)

    def chunk(c: Chunk) -> dict[str, Any]:
        t = tokens[c.rows]
        box: dict[str, torch.Tensor] = {}

        def read(x: torch.Tensor, hook: Any = None) -> None:
            box["x"] = x.detach()

        def write(keep: bool) -> Any:
            def fn(y: torch.Tensor, hook: Any = None) -> torch.Tensor:
                box["y"], box["acts"] = y.detach(), T.encode(box["x"].flatten(2))
                out = T.decode(box["acts"], box["x"].flatten(2)).to(y.dtype).reshape(y.shape)
                return y if keep else out

            return fn

        with torch.no_grad():
            clean = rt.run(t, hooks=[(T.hook_name, read), (T.hook_name_out, write(True))])
            y, acts = box["y"].flatten(2)[:, skip:].double(), box["acts"][:, skip:]
            err = y - T.decode(acts, box["x"].flatten(2)[:, skip:]).double()
            on = acts != 0
            part: dict[str, Any] = dict(
                sse=float(err.pow(2).sum()), sx=y.sum((0, 1)), sxx=float(y.pow(2).sum()),
                n=y.shape[0] * y.shape[1], active=int(on.sum()), ever=on.flatten(0, -2).any(0),
                clean=0.0, without=0.0,
            )  # fmt: skip
            if losses:
                part["clean"] = float(next_token_nll(clean, t).double().sum())
                spliced = rt.run(t, hooks=[(T.hook_name, read), (T.hook_name_out, write(False))])
                part["without"] = float(next_token_nll(spliced, t).double().sum())
        return part

    foot = dictionary_pass_footprint(model, pos, T.d_sae)
    keys = ("sse", "sx", "sxx", "n", "active", "ever", "clean", "without")
    # FLOPs (interp.engine.cost): a plain pass each, every row unembedded; each pass's
    # encoder and decoder on every position, and the decoder once more on the scored ones
    fl = Flops.of(model)
    d_in, d_out = int(T.W_enc.shape[0]), int(T.W_dec.shape[1])
    skip_w = getattr(T, "W_skip", None)
    enc, dec = 2.0 * d_in * T.d_sae, 2.0 * T.d_sae * d_out
    dec += 0.0 if skip_w is None else 2.0 * d_in * d_out
    passes = 2 if losses else 1
    flops = passes * pos * (enc + dec) + (pos - skip) * dec
    work = passes + flops / fl.plain(pos)
    task = Task(
        "transcoder_report", foot, work=work, chunk=chunk,
        combine={k: "sum" for k in keys}, desc="transcoder report", inputs=(tokens, T, skip),
    )  # fmt: skip
    ran = run(model, (tokens.shape[0], pos), task, memory_budget=memory_budget,
              progress=progress)  # fmt: skip
    out = ran.values
    n = out["n"]
    sst = out["sxx"] - float((out["sx"] * out["sx"]).sum()) / n
    preds = tokens.shape[0] * (pos - 1)
    clean = out["clean"] / preds if losses else None
    return DictionaryReport(
        fraction_variance_explained=1.0 - out["sse"] / sst if sst > 0 else float("nan"),
        l0=out["active"] / n,
        dead_fraction=float((~out["ever"]).float().mean()),
        clean_loss=clean,
        loss_with_error=clean,  # the error kept restores the target exactly: the clean pass
        loss_without_error=out["without"] / preds if losses else None,
        n_tokens=n,
        skipped_columns=skip,
        attrs=table_attrs(
            "transcoder_report",
            description="what the transcoder explains of its target hook and what splicing it "
            "costs",
            method="exact",
            model=model,
            unit="per field",
            forward_equivalents=work,
            hook=T.hook_name,
            target_hook=T.hook_name_out,
            chunks=ran.chunks,
        ),  # fmt: skip
    )

"""Training a TopK transcoder from an MLP's input to its output, and scoring one.

The method is :mod:`interp.dictionaries.train`'s (Gao et al. 2024) with the target moved:
the encoder reads ``x`` at ``hook`` (the MLP's input), the decoder predicts ``y`` at
``target_hook`` (its output), ``z = TopK(W_enc x + b_enc)``, ``y_hat = z W_dec + b_dec``,
and the loss is ``||y - y_hat||^2 / ||y - mean(y)||^2`` plus the AuxK loss (the dead
features' top pre-activations reconstruct ``y - y_hat``). ``b_dec`` starts at the mean of
``y``, the decoder rows are kept at unit norm, the learning rate decays over the last fifth.
``x`` and ``y`` are each scaled by one constant (``sqrt(width) / mean norm`` of the first
chunk), folded into the weights at the end. Each chunk's pass stops after the target hook.

The report (:func:`~interp.dictionaries.transcoder_report.transcoder_report`) is a
:class:`~interp.dictionaries.report.DictionaryReport` of the *target*: the variance of
``y`` explained, L0, the dead share, and the model's loss with ``target_hook`` replaced by
the transcoder's output (error kept: the clean loss to rounding; error dropped: the
transcoder alone).

Training runs in one process: inside a process group (torchrun, ``--workers``) it is
refused before any work.

Example:
    >>> import torch
    >>> from interp.models.hf import random_gpt2
    >>> model = random_gpt2(2, vocab=40)
    >>> tokens = torch.randint(0, 40, (8, 16), generator=torch.Generator().manual_seed(0))
    >>> fit = train_transcoder(model, tokens, hook="blocks.0.ln2.hook_normalized",
    ...                        target_hook="blocks.0.hook_mlp_out", n_features=32, k=4)
    >>> fit.dictionary.d_out, fit.report.l0 <= 4
    (32, True)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from interp.core.checks import check_bool, check_finite, check_int, check_seed, check_tokens
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, model_device
from interp.core.protocol import model_name as name_of
from interp.dictionaries.splice import check_hook, hook_width
from interp.dictionaries.trained import TrainedDictionary, TrainingCount, default_lr
from interp.dictionaries.transcoder import Transcoder
from interp.dictionaries.transcoder_report import pair_activations, transcoder_report
from interp.engine import ranks
from interp.engine.footprints import dictionary_training_footprint
from interp.engine.runner import Task, plan_task
from interp.outputs.frames import table_attrs


def _number(value: Any, name: str, *, positive: bool = False) -> float:
    """A finite number (a string refused, not parsed), >= 0 or > 0."""
    if isinstance(value, (str, bytes)):
        raise InterpError(f"{name} must be a number, got the string {value!r}: pass {name}=1e-3")
    out = check_finite(value, name, positive=positive)
    if out < 0:
        raise InterpError(f"{name} must be >= 0, got {out}: 0 turns it off")
    return out


def train_transcoder(
    model: HookedModel,
    tokens: torch.Tensor,
    *,
    hook: str,
    target_hook: str,
    n_features: int,
    k: int,
    seed: int = 0,
    epochs: int = 1,
    batch_size: int = 1024,
    lr: float | None = None,
    aux_k: int | None = None,
    aux_coefficient: float = 1 / 32,
    dead_after: int | None = None,
    skip_columns: int = 0,
    eval_tokens: torch.Tensor | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
) -> TrainedDictionary:
    """Train a TopK transcoder reading ``hook`` and predicting ``target_hook``.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids, the training set.
        hook: the hook it reads (the MLP's input, e.g. ``'blocks.0.ln2.hook_normalized'``).
        target_hook: the hook it predicts (``'blocks.0.hook_mlp_out'``).
        n_features: its width ``d_sae``.
        k: features active per position.
        seed: every random draw; the same seed gives the same numbers.
        epochs: passes over ``tokens``.
        batch_size: positions per optimiser step.
        lr: Adam's learning rate (default :func:`~interp.dictionaries.train.default_lr`).
        aux_k: dead features the AuxK loss uses, at most ``n_features``.
        aux_coefficient: the AuxK loss's weight, >= 0.
        dead_after: positions without activating after which a feature counts as dead.
        skip_columns: leading columns not trained on.
        eval_tokens: the tokens the report is computed on (default ``tokens``).
        memory_budget: the bytes an analysis may hold beyond the model's weights: the passes
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: show a progress bar over the chunks.

    Returns:
        A :class:`~interp.dictionaries.train.TrainedDictionary` whose ``dictionary`` is the
        :class:`Transcoder` and whose report is :func:`transcoder_report`'s.

    Raises:
        InterpError: a process group (not supported: run it in one process); bad tokens;
            a hook the model lacks; the target being the input hook; ``k`` or ``aux_k``
            above ``n_features``; a bad option (all before any pass); activations that are
            not finite; a loss or weight that stops being finite (training diverged).
    """
    if ranks.active():
        raise InterpError(
            "training a transcoder runs in one process; inside a process group (torchrun, "
            "--workers) it is not supported: run train_dictionary(target_hook=...) without them"
        )
    check_hook(model, hook, fix="pick one of the model's hooks (e.g. blocks.L.ln2.hook_normalized)")
    tokens = check_tokens(model, tokens, chunked=True)
    n_features = check_int(n_features, "n_features", minimum=1)
    if check_int(k, "k", minimum=1) > n_features:
        raise InterpError(f"k={k} is more than n_features={n_features}: pick k <= n_features")
    check_hook(model, target_hook, fix="pick one of the model's hooks (e.g. blocks.L.hook_mlp_out)")
    if target_hook == hook:
        raise InterpError(
            f"target_hook is the input hook {hook!r}: a transcoder writes another hook; leave "
            "target_hook out to train an ordinary dictionary"
        )
    if eval_tokens is not None:
        eval_tokens = check_tokens(model, eval_tokens, chunked=True)
    seed, epochs = check_seed(seed), check_int(epochs, "epochs", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    lr = default_lr(n_features) if lr is None else _number(lr, "lr", positive=True)
    aux_coefficient = _number(aux_coefficient, "aux_coefficient")
    skip = check_int(skip_columns, "skip_columns", minimum=0)
    check_bool(progress, "progress")
    batch, pos = tokens.shape
    if skip >= pos:
        raise InterpError(f"skip_columns={skip} leaves none of the {pos} columns to train on")
    d_in, d_out = hook_width(model, hook), hook_width(model, target_hook)
    if aux_k is None:
        aux_k = min(max(1, d_out // 2), n_features)
    elif (aux_k := check_int(aux_k, "aux_k", minimum=1)) > n_features:
        raise InterpError(f"aux_k={aux_k} is more than n_features={n_features}: pick fewer")
    n_total = batch * (pos - skip) * epochs
    dead_after = (
        max(batch_size, n_total // 20)
        if dead_after is None
        else check_int(dead_after, "dead_after", minimum=1)
    )
    foot = dictionary_training_footprint(
        model, pos, d_in=d_in, d_out=d_out, n_features=n_features, batch_size=batch_size
    )
    device, g = model_device(model), torch.Generator().manual_seed(seed)
    # FLOPs (interp.engine.cost), in plain passes of the tokens: each activation pass stopped
    # at the target, and each step's products (trained.TrainingCount)
    counted = TrainingCount(model, batch, pos, [hook, target_hook], d_in=d_in, d_out=d_out,
                            n_features=n_features, input_grad=False)  # fmt: skip

    def chunk(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        counted.rows += rows.stop - rows.start
        x, y = pair_activations(model, tokens[rows], hook, target_hook)
        out = x[:, skip:].float().reshape(-1, d_in), y[:, skip:].float().reshape(-1, d_out)
        for t, h in zip(out, (hook, target_hook), strict=True):
            if not bool(torch.isfinite(t).all()):
                raise InterpError(
                    f"the activations at {h!r} of sequences {rows.start}..{rows.stop - 1} are "
                    "not finite: run the model in float32, or drop those sequences"
                )
        return out

    def work(chunks: list[slice]) -> float:
        return counted.planned(chunks, epochs=epochs, positions=pos - skip)

    stream = Task(
        "train_transcoder", foot, work=work,
        chunk=lambda c: {"x": chunk(c.rows)}, combine={"x": "rows"}, desc="train transcoder",
        inputs=(tokens, eval_tokens, hook, target_hook, n_features, k, aux_k, seed, epochs,
                batch_size, lr, aux_coefficient, skip, dead_after),
    )  # fmt: skip
    # one process's chunks on every rank, each rank holding its part of each: a
    # chunk's positions are shuffled together, so the mini-batches are one process's
    plan = plan_task(model, (batch, pos), stream, memory_budget=memory_budget,
                     progress=progress, spread=False)  # fmt: skip
    x0, y0 = chunk(plan.chunks[0])
    s_in = math.sqrt(d_in) / float(x0.norm(dim=-1).mean().clamp(min=1e-12))
    s_out = math.sqrt(d_out) / float(y0.norm(dim=-1).mean().clamp(min=1e-12))
    W_enc = torch.randn(d_in, n_features, generator=g)
    W_dec = torch.randn(n_features, d_out, generator=g)
    p = {
        "W_enc": (W_enc / W_enc.norm(dim=0, keepdim=True)).to(device),
        "b_enc": torch.zeros(n_features, device=device),
        "W_dec": (W_dec / W_dec.norm(dim=-1, keepdim=True)).to(device),
        "b_dec": (y0 * s_out).mean(0),
    }
    for t in p.values():
        t.requires_grad_(True)
    opt = torch.optim.Adam(p.values(), lr=lr)
    since = torch.zeros(n_features, dtype=torch.long, device=device)
    n_steps = epochs * sum(
        math.ceil((c.stop - c.start) * (pos - skip) / batch_size) for c in plan.chunks
    )
    step, last = 0, {"loss": float("nan"), "dead": 0.0}
    for _ in range(epochs):
        for i, rows in enumerate(plan.chunks):
            reuse = i == 0 and (epochs == 1 or len(plan.chunks) == 1)
            x_all, y_all = (x0, y0) if reuse else chunk(rows)
            x_all, y_all = x_all * s_in, y_all * s_out
            order = torch.randperm(x_all.shape[0], generator=g).to(device)
            for start in range(0, x_all.shape[0], batch_size):
                at = order[start : start + batch_size]
                for group in opt.param_groups:
                    group["lr"] = lr * min(1.0, (1 - step / max(1, n_steps)) / 0.2)
                last = _step(p, opt, x_all[at], y_all[at], k, aux_k, aux_coefficient, since,
                             dead_after)  # fmt: skip
                counted.step(len(at), aux=aux_coefficient > 0 and last["dead"] > 0)
                step += 1
                if not math.isfinite(last["loss"]) or not all(
                    bool(torch.isfinite(t).all()) for t in p.values()
                ):
                    raise InterpError(
                        f"training diverged at step {step} of {n_steps} (loss {last['loss']}); "
                        f"nothing was returned: lower lr (now {lr:g})"
                    )
    with torch.no_grad():  # trained on s_in x -> s_out y: fold the scales into the weights
        T = Transcoder(
            p["W_enc"] * s_in, p["b_enc"].clone(), p["W_dec"] / s_out, p["b_dec"] / s_out,
            architecture="topk", hook_name=hook, hook_name_out=target_hook, k=k,
        )  # fmt: skip
    training = dict(
        model_name=name_of(model), hook=hook, target_hook=target_hook, n_features=n_features,
        k=k, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr, aux_k=aux_k,
        aux_coefficient=aux_coefficient, dead_after=dead_after, skip_columns=skip, steps=step,
        positions_seen=n_total, train_sequences=batch, seq_len=pos, chunks=len(plan.chunks),
        input_scale=s_in, output_scale=s_out, final_loss=last["loss"],
        final_dead_fraction=last["dead"], ranks=1,
    )  # fmt: skip
    report = transcoder_report(
        model, tokens if eval_tokens is None else eval_tokens, T, skip_columns=skip,
        memory_budget=memory_budget, progress=progress,
    )  # fmt: skip
    T.metadata.update(model_name=name_of(model), training=training, report=report.as_dict())
    work = counted.total(report, tokens if eval_tokens is None else eval_tokens)
    attrs = table_attrs(
        "train_transcoder",
        description="a TopK transcoder trained from the hook's activations to the target's",
        method="exact", model=model, unit="per field", seed=seed, forward_equivalents=work,
        hook=hook, target_hook=target_hook, steps=step,
    )  # fmt: skip
    return TrainedDictionary(T, report, training, attrs)  # type: ignore[arg-type]


def _step(
    p: dict[str, torch.Tensor],
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    k: int,
    aux_k: int,
    aux_coefficient: float,
    since: torch.Tensor,
    dead_after: int,
) -> dict[str, float]:
    """One optimiser step on scaled inputs ``x [n, d_in]`` and targets ``y [n, d_out]``."""
    pre = x @ p["W_enc"] + p["b_enc"]
    top = pre.topk(k, dim=-1)
    acts = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
    err = y - (acts @ p["W_dec"] + p["b_dec"])
    var = (y - y.mean(0)).pow(2).sum(-1).mean().clamp(min=1e-12)
    loss = err.pow(2).sum(-1).mean() / var
    dead = since >= dead_after
    total_loss = loss
    if aux_coefficient > 0 and bool(dead.any()):
        atop = pre.masked_fill(~dead, float("-inf")).topk(min(aux_k, int(dead.sum())), dim=-1)
        aux_acts = torch.zeros_like(pre).scatter(-1, atop.indices, atop.values.relu())
        aux = (err.detach() - aux_acts @ p["W_dec"]).pow(2).sum(-1).mean() / var
        total_loss = loss + aux_coefficient * torch.nan_to_num(aux, nan=0.0)
    opt.zero_grad(set_to_none=True)
    total_loss.backward()
    with torch.no_grad():
        W, G = p["W_dec"], p["W_dec"].grad
        G -= (G * W).sum(-1, keepdim=True) * W
        opt.step()
        W /= W.norm(dim=-1, keepdim=True)
        since += x.shape[0]
        since[(acts > 0).any(0)] = 0
    return {"loss": float(loss.detach()), "dead": float(dead.float().mean())}

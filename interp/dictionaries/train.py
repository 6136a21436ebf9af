"""Training a TopK dictionary on a hook's activations (Gao et al. 2024).

"Scaling and evaluating sparse autoencoders" (Gao et al. 2024): the encoder keeps the
``k`` largest pre-activations, ``z = TopK(W_enc (x - b_dec) + b_enc)``, the decoder is
``x_hat = z W_dec + b_dec``, and the loss is the normalised reconstruction error
``||x - x_hat||^2 / ||x - mean(x)||^2`` plus ``aux_coefficient`` times the AuxK loss: the
``aux_k`` largest pre-activations of the *dead* features (none active in the last
``dead_after`` positions) reconstruct the residual ``x - x_hat``, which gives them a
gradient again. As there, ``b_dec`` starts at the data's mean, ``W_enc`` at ``W_dec``'s
transpose, decoder rows are kept at unit norm with the gradient along them removed, and the
learning rate decays linearly to 0 over the last fifth of the steps.

The activations are scaled by one constant (``sqrt(d_in) / mean ||x||``, from the first
chunk) so one learning rate suits every model, and the constant is folded into the weights
at the end (sae-lens' ``fold_activation_norm_scaling_factor``): the dictionary reads the
model's own activations. They stream in chunks planned under ``memory_budget``; each
chunk's passes stop at the hook (:mod:`interp.dictionaries.activations`) and its positions
are shuffled (seeded) into mini-batches.

Example:
    >>> from interp.models import load_model
    >>> from interp.datasets import repeated_tokens
    >>> model = load_model("induction-2l")
    >>> tokens = repeated_tokens(32, d_vocab=64, seq_len=48, seed=0).tokens
    >>> fit = train_dictionary(model, tokens, hook="blocks.1.hook_resid_pre", n_features=64,
    ...                        k=4, epochs=2)
    >>> fit.dictionary.d_sae, fit.report.l0 <= 4
    (64, True)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from interp.core.checks import check_bool, check_finite, check_int, check_seed, check_tokens
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, model_device, model_name
from interp.dictionaries.activations import hook_activations
from interp.dictionaries.dictionary import Dictionary
from interp.dictionaries.ranks import fired, mean_rows, my_rows, sum_grads, total
from interp.dictionaries.report import dictionary_report
from interp.dictionaries.splice import check_hook, hook_width
from interp.dictionaries.trained import TrainedDictionary, TrainingCount, default_lr
from interp.engine import ranks
from interp.engine.footprints import dictionary_training_footprint
from interp.engine.runner import Task, plan_task
from interp.outputs.frames import table_attrs


def _check(model: HookedModel, tokens: Any, hook: Any, n_features: Any, k: Any) -> torch.Tensor:
    check_hook(model, hook, fix="pick one of the model's hooks")
    tokens = check_tokens(model, tokens, chunked=True)
    n = check_int(n_features, "n_features", minimum=1)
    if check_int(k, "k", minimum=1) > n:
        raise InterpError(f"k={k} is more than n_features={n}: pick k <= n_features")
    return tokens


def _number(value: Any, name: str, *, positive: bool = False) -> float:
    """A finite number (a string such as ``'1e-3'`` refused, not parsed), >= 0 or > 0."""
    if isinstance(value, (str, bytes)):
        raise InterpError(f"{name} must be a number, got the string {value!r}: pass {name}=1e-3")
    out = check_finite(value, name, positive=positive)
    if out < 0:
        raise InterpError(f"{name} must be >= 0, got {out}: 0 turns it off")
    return out


def _diverged(what: str, step: int, n_steps: int, lr: float, hook: str) -> InterpError:
    return InterpError(
        f"training diverged at step {step} of {n_steps}: {what}; nothing was returned or "
        f"saved: lower lr (now {lr:g}), or check that the activations at {hook!r} are finite"
    )


def _finite_activations(x: torch.Tensor, rows: slice, hook: str) -> torch.Tensor:
    """Refuse a chunk of activations holding NaN or infinity, before training on it (in a
    process group every rank's part is counted, so that every rank refuses alike)."""
    if ranks.active():
        bad = total(torch.stack([torch.isnan(x).sum(), torch.isinf(x).sum()]).cpu())
    elif not bool(torch.isfinite(x).all()):
        bad = torch.stack([torch.isnan(x).sum(), torch.isinf(x).sum()])
    else:
        return x
    if int(bad.sum()):
        raise InterpError(
            f"the activations at {hook!r} of sequences {rows.start}..{rows.stop - 1} hold "
            f"{int(bad[0])} NaN and {int(bad[1])} infinite "
            "value(s): a dictionary cannot be trained on them; run the model in float32, or "
            "drop those sequences"
        )
    return x


def train_dictionary(
    model: HookedModel,
    tokens: torch.Tensor,
    *,
    hook: str,
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
    target_hook: str | None = None,
) -> TrainedDictionary:
    """Train a TopK dictionary at ``hook`` on the activations of ``tokens``.

    With ``target_hook`` it trains a TopK transcoder instead: reading ``hook`` (an MLP's
    input), predicting ``target_hook`` (its output), in one process
    (:func:`interp.dictionaries.train_transcoder.train_transcoder`).

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        tokens: ``[batch, pos]`` integer ids, the training set.
        hook: the hook name it reads, e.g. ``'blocks.1.hook_resid_pre'``.
        n_features: the dictionary's width ``d_sae``.
        k: features active per position.
        seed: every random draw; the same seed gives the same numbers.
        epochs: passes over ``tokens``.
        batch_size: positions per optimiser step.
        lr: Adam's learning rate, a positive number (default :func:`default_lr`).
        aux_k: dead features the AuxK loss uses, at most ``n_features`` (default
            ``min(d_in // 2, n_features)``).
        aux_coefficient: the AuxK loss's weight, >= 0 (0 turns it off).
        dead_after: positions without activating after which a feature counts as dead
            (default a twentieth of all training positions, at least one batch).
        skip_columns: leading columns not trained on (a BOS column, whose norm dwarfs the
            rest in pretrained models; the splice still covers it, through its error).
        eval_tokens: the tokens the report is computed on (default ``tokens``).
        memory_budget: the bytes an analysis may hold beyond the model's weights: the passes
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: show a progress bar over the steps.
        target_hook: the hook a transcoder predicts (``'blocks.L.hook_mlp_out'``), or
            ``None`` for an ordinary dictionary.

    Returns:
        A :class:`TrainedDictionary` (its ``dictionary`` a
        :class:`~interp.dictionaries.transcoder.Transcoder` with ``target_hook``).

    Raises:
        InterpError: bad tokens or eval tokens, a hook the model lacks, ``k`` or ``aux_k``
            above ``n_features``, a bad option (``lr`` not a positive finite number, a
            string included; ``aux_coefficient`` negative or not finite), a budget one
            prompt does not fit (all before any pass); activations at ``hook`` holding NaN
            or infinity; or a loss or weight that stops being finite (training diverged:
            the message names the step, and no dictionary is returned); with
            ``target_hook``, also a process group (transcoders train in one process).
    """
    if target_hook is not None:
        from interp.dictionaries.train_transcoder import train_transcoder

        return train_transcoder(
            model, tokens, hook=hook, target_hook=target_hook, n_features=n_features, k=k,
            seed=seed, epochs=epochs, batch_size=batch_size, lr=lr, aux_k=aux_k,
            aux_coefficient=aux_coefficient, dead_after=dead_after, skip_columns=skip_columns,
            eval_tokens=eval_tokens, memory_budget=memory_budget, progress=progress,
        )  # fmt: skip
    tokens = _check(model, tokens, hook, n_features, k)
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
    d_in = hook_width(model, hook)
    if aux_k is None:
        aux_k = min(max(1, d_in // 2), n_features)
    elif (aux_k := check_int(aux_k, "aux_k", minimum=1)) > n_features:
        raise InterpError(
            f"aux_k={aux_k} is more than n_features={n_features}: the AuxK loss uses at most "
            "every feature; pick aux_k <= n_features (or None, the default)"
        )
    total = batch * (pos - skip) * epochs
    dead_after = (
        max(batch_size, total // 20)
        if dead_after is None
        else check_int(dead_after, "dead_after", minimum=1)
    )
    # held: the dictionary, its gradient and Adam's two moments, and one batch's tensors
    foot = dictionary_training_footprint(
        model, pos, d_in=d_in, d_out=d_in, n_features=n_features, batch_size=batch_size
    )
    device = model_device(model)
    g = torch.Generator().manual_seed(seed)
    # FLOPs (interp.engine.cost), in plain passes of the tokens: each activation pass stopped
    # at the hook, and each step's products (trained.TrainingCount)
    counted = TrainingCount(model, batch, pos, [hook], d_in=d_in, d_out=d_in,
                            n_features=n_features, input_grad=True)  # fmt: skip

    def chunk(rows: slice) -> torch.Tensor:  # [n, d_in] float32: this rank's part of it
        mine = my_rows(rows)
        counted.rows += mine.stop - mine.start
        if mine.stop == mine.start:  # a rank beyond the chunk's prompts holds none of it
            x = torch.zeros(0, d_in, device=device)
        else:
            x = hook_activations(model, tokens[mine], hook)[:, skip:].float()
        return _finite_activations(x.reshape(-1, d_in), rows, hook)

    # the activation stream: a pass stopped at the hook per chunk, once per epoch (the
    # runner's plan; the epochs walk its chunks again, so the loop is training's own). In a
    # process group the chunks are one process's, each rank holding its part of each one
    # (interp.dictionaries.ranks), so that every mini-batch is one process's
    def work(chunks: list[slice]) -> float:
        return counted.planned(chunks, epochs=epochs, positions=pos - skip)

    stream = Task(
        "train_dictionary", foot, work=work,
        chunk=lambda c: {"x": chunk(c.rows)}, combine={"x": "rows"}, desc="train dictionary",
        inputs=(tokens, eval_tokens, hook, n_features, k, aux_k, seed, epochs, batch_size, lr,
                aux_coefficient, skip, dead_after),
    )  # fmt: skip
    # one process's chunks on every rank, each rank holding its part of each: a
    # chunk's positions are shuffled together, so the mini-batches are one process's
    run = plan_task(model, (batch, pos), stream, memory_budget=memory_budget,
                    progress=progress, spread=False)  # fmt: skip
    first = chunk(run.chunks[0])
    scale = math.sqrt(d_in) / float(mean_rows(first.norm(dim=-1)).clamp(min=1e-12))
    W_dec = torch.randn(n_features, d_in, generator=g).to(device)
    W_dec /= W_dec.norm(dim=-1, keepdim=True)
    params = {
        "W_enc": W_dec.T.clone(),
        "b_enc": torch.zeros(n_features, device=device),
        "W_dec": W_dec,
        "b_dec": mean_rows(first * scale),
    }
    for p in params.values():
        p.requires_grad_(True)
    opt = torch.optim.Adam(params.values(), lr=lr)
    since = torch.zeros(n_features, dtype=torch.long, device=device)  # positions since active
    steps_per_epoch = sum(
        math.ceil((c.stop - c.start) * (pos - skip) / batch_size) for c in run.chunks
    )
    n_steps, step = steps_per_epoch * epochs, 0
    last: dict[str, float] = {}
    bar = _bar(n_steps, progress and ranks.rank() == 0)
    for _ in range(epochs):
        for i, rows in enumerate(run.chunks):
            reuse = i == 0 and (epochs == 1 or len(run.chunks) == 1)
            x_all = (first if reuse else chunk(rows)) * scale
            # the chunk's positions, shuffled as one process shuffles them; this rank holds
            # those from lo to hi (all of them in one process)
            n_all = (rows.stop - rows.start) * (pos - skip)
            lo = (my_rows(rows).start - rows.start) * (pos - skip)
            order = torch.randperm(n_all, generator=g).to(device)
            for start in range(0, n_all, batch_size):
                at = order[start : start + batch_size]
                n = at.shape[0]
                if ranks.active():
                    at = at[(at >= lo) & (at < lo + x_all.shape[0])] - lo
                x = x_all[at]
                frac = step / max(1, n_steps)
                for group in opt.param_groups:
                    group["lr"] = lr * min(1.0, (1 - frac) / 0.2)
                last = _step(params, opt, x, n, k, aux_k, aux_coefficient, since, dead_after)
                counted.step(n, aux=aux_coefficient > 0 and last["dead"] > 0)
                step += 1
                if not math.isfinite(last["loss"]):
                    raise _diverged(f"the loss is {last['loss']}", step, n_steps, lr, hook)
                bar.update(1)
                if step % 50 == 0:
                    bar.set_postfix(loss=f"{last['loss']:.4f}", dead=f"{last['dead']:.2f}")
    bar.close()
    for name, t in params.items():
        if not bool(torch.isfinite(t).all()):
            raise _diverged(f"{name} is no longer finite", step, n_steps, lr, hook)
    D = _folded(params, scale, hook=hook, k=k)
    training = dict(
        model_name=model_name(model), hook=hook, n_features=n_features, k=k, seed=seed,
        epochs=epochs, batch_size=batch_size, lr=lr, aux_k=aux_k, aux_coefficient=aux_coefficient,
        dead_after=dead_after, skip_columns=skip, steps=step, positions_seen=total,
        train_sequences=batch, seq_len=pos, chunks=len(run.chunks), input_scale=scale,
        final_loss=last.get("loss"), final_dead_fraction=last.get("dead"), ranks=ranks.world(),
    )  # fmt: skip
    report = dictionary_report(
        model, tokens if eval_tokens is None else eval_tokens, D, skip_columns=skip,
        memory_budget=memory_budget, progress=progress,
    )  # fmt: skip
    D.metadata.update(model_name=model_name(model), training=training, report=report.as_dict())
    work = counted.total(report, tokens if eval_tokens is None else eval_tokens)
    attrs = table_attrs(
        "train_dictionary", description="a TopK dictionary trained on the hook's activations",
        method="exact", model=model, unit="per field", seed=seed, forward_equivalents=work,
        hook=hook, steps=step,
    )  # fmt: skip
    return TrainedDictionary(D, report, training, attrs)


def _bar(total: int, progress: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="train dictionary", unit="step", disable=not progress)


def _step(
    p: dict[str, torch.Tensor],
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    n: int,
    k: int,
    aux_k: int,
    aux_coefficient: float,
    since: torch.Tensor,
    dead_after: int,
) -> dict[str, float]:
    """One optimiser step on the positions ``x`` ``[n, d_in]`` (scaled): the whole batch in
    one process; in a process group this rank's part of a batch of ``n`` positions, whose
    loss is its share of the batch's (so the ranks' gradients sum to the batch's)."""
    pre = (x - p["b_dec"]) @ p["W_enc"] + p["b_enc"]  # [n, d_sae]
    top = pre.topk(k, dim=-1)
    acts = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
    recon = acts @ p["W_dec"] + p["b_dec"]
    err = x - recon
    group = ranks.active()
    if group:  # the batch's variance from every rank's positions; this rank's share of it
        var = (total((x - mean_rows(x)).pow(2).sum()) / n).clamp(min=1e-12)
        loss = err.pow(2).sum() / n / var
    else:
        var = (x - x.mean(0)).pow(2).sum(-1).mean().clamp(min=1e-12)
        loss = err.pow(2).sum(-1).mean() / var
    dead = since >= dead_after
    total_loss = loss
    if aux_coefficient > 0 and bool(dead.any()):
        n_aux = min(aux_k, int(dead.sum()))
        masked = pre.masked_fill(~dead, float("-inf"))
        atop = masked.topk(n_aux, dim=-1)
        aux_acts = torch.zeros_like(pre).scatter(-1, atop.indices, atop.values.relu())
        residual = err.detach()
        miss = (residual - aux_acts @ p["W_dec"]).pow(2)
        aux = (miss.sum() / n if group else miss.sum(-1).mean()) / var
        total_loss = loss + aux_coefficient * torch.nan_to_num(aux, nan=0.0)
    opt.zero_grad(set_to_none=True)
    total_loss.backward()
    sum_grads(p)  # every rank's share: the batch's gradient (nothing in one process)
    with torch.no_grad():
        W, G = p["W_dec"], p["W_dec"].grad
        G -= (G * W).sum(-1, keepdim=True) * W  # keep unit norm: no gradient along a row
        opt.step()
        W /= W.norm(dim=-1, keepdim=True)
        on = fired((acts > 0).any(0))  # active at any position of the batch, on any rank
        since += n
        since[on] = 0
    return {"loss": float(total(loss.detach())), "dead": float(dead.float().mean())}


def _folded(p: dict[str, torch.Tensor], scale: float, *, hook: str, k: int) -> Dictionary:
    """The dictionary on the unscaled activations: trained on ``scale * x``,
    ``pre = (x - b_dec / s) (s W_enc) + b_enc`` and ``x_hat = acts (W_dec / s) + b_dec / s``."""
    with torch.no_grad():
        return Dictionary(
            p["W_enc"] * scale,
            p["b_enc"].clone(),
            p["W_dec"] / scale,
            p["b_dec"] / scale,
            architecture="topk",
            hook_name=hook,
            k=k,
            apply_b_dec_to_input=True,
        )

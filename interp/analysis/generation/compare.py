"""Clean and edited continuations side by side, each token scored under both models.

:func:`compare_generations` continues the prompts twice with the same sampling
draws: once clean, once with the interventions. Then each continuation is read
by the other model, teacher-forced (one whole forward pass of its tokens, with the
interventions' hooks for the edited model): so every clean token has its
log-probability under the clean model (which chose it) and under the edited one,
and every edited token the same. One row per prompt and step; ``same`` says
whether the two continuations agree there, ``first_difference`` marks the first
step where they do not (per prompt), and ``attrs["first_difference"]`` lists that
step per prompt (None where they never differ).

Example:
    >>> from interp.models import load_model
    >>> from interp.analysis.generation import HeadAblation
    >>> prompt = [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10]]
    >>> df = compare_generations(load_model("induction-2l"), prompt,
    ...                          interventions=[HeadAblation(heads=["L1H1"])], max_new_tokens=3)
    >>> df.attrs["first_difference"], df["clean"].tolist()
    ([0], [' 41', ' 50', ' 20'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from interp.analysis.generation.generating import bind_all, plan_generation, run_generation
from interp.analysis.generation.interventions import Intervention, Window
from interp.analysis.generation.prompts import Prompt
from interp.analysis.generation.result import Generation
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, check_model, eval_no_grad, model_device
from interp.engine.chunks import Estimate
from interp.engine.cost import Flops
from interp.runtime import runtime_of


def compare_generations(
    model: HookedModel,
    prompt: Prompt,
    *,
    interventions: Sequence[Intervention],
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    stop: Any = None,
    kv_cache: bool = True,
    cache: Any = None,
    memory_budget: int | None = None,
    estimate: bool = False,
    progress: bool = False,
) -> pd.DataFrame | Estimate:
    """The clean and the edited continuations of ``prompt``, side by side (module docstring).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``); a causal one.
        prompt: Text, a list of texts, ``[batch, pos]`` ids or a list of id lists, as
            :func:`~interp.analysis.generation.generate` takes it.
        interventions: The edits of the edited run (at least one).
        max_new_tokens: The most tokens each prompt gets, in each run.
        temperature: 0 (default) is greedy; above 0 both runs sample with the same draws.
        top_k: Sample from the ``top_k`` most likely tokens only (None: all).
        top_p: Sample from the smallest set reaching probability ``top_p`` (None: all).
        seed: The draws of both runs; the same seed gives the same numbers.
        stop: A token (or list) that ends a prompt's continuation.
        kv_cache: Use the runtime's key/value cache (False: whole passes).
        cache: An ActivationCache of the prompts' tokens; it is read only after its earliest
            token-dependent activation is recomputed on them and matches (mean and resample
            ablation read it).
        memory_budget: The bytes an analysis may hold beyond the model's weights; ``None``
            is a quarter of the memory free on the model's device.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running.
        progress: Show a progress bar over the generated tokens.

    Returns:
        One row per prompt and step: ``prompt, step, position`` (in the clean prompt: real
        tokens before it), ``clean, clean_id, clean_logprob`` (under the clean model),
        ``clean_logprob_edited`` (the clean token under the edited model), ``edited,
        edited_id, edited_logprob``, ``edited_logprob_clean``, ``same``,
        ``first_difference``; ``attrs`` as the edited run's, plus ``first_difference`` (the
        step per prompt, None where the two never differ). With ``estimate=True``, the
        :class:`~interp.engine.chunks.Estimate` of both runs and the scoring passes.

    Raises:
        InterpError: as :func:`~interp.analysis.generation.generate`, and for no
            interventions (nothing to compare).
    """
    check_model(model)
    if not interventions:
        raise InterpError("compare_generations needs at least one intervention to compare")
    common = dict(
        max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        seed=seed, stop=stop, kv_cache=kv_cache, memory_budget=memory_budget,
        estimate=estimate, progress=progress,
    )  # fmt: skip
    clean_job = plan_generation(model, prompt, **common)
    edited_job = plan_generation(
        model, prompt, interventions=interventions, cache=cache, analysis="compare_generations",
        extra_passes=clean_job.plan.estimate.forward_equivalents + 2 * _scoring(model, clean_job),
        **common,
    )  # fmt: skip
    if estimate:
        return edited_job.plan.estimate
    clean = run_generation(model, clean_job, progress=progress)
    bound = bind_all(model, edited_job)
    edited = run_generation(model, edited_job, progress=progress, edits=bound)
    with eval_no_grad(model):
        clean_under_edit = _score(model, clean, bound)
        edit_under_clean = _score(model, edited, [])
    df = _table(clean, edited, clean_under_edit, edit_under_clean)
    firsts = []
    for b in range(clean.tokens.shape[0]):
        rows = df[(df["prompt"] == b) & ~df["same"]]
        firsts.append(None if rows.empty else int(rows["step"].iloc[0]))
    df["first_difference"] = [firsts[p] == s for p, s in zip(df["prompt"], df["step"])]
    df.attrs.update(edited.attrs)
    df.attrs.update(
        analysis="compare_generations",
        description="clean and edited continuations of each prompt, each token's "
        "log-probability under both models",
        forward_equivalents=edited_job.plan.estimate.forward_equivalents,
        first_difference=firsts,
    )
    return df


def _scoring(model: HookedModel, job: Any) -> float:
    """Forward-equivalents of one teacher-forced pass over a whole continuation (every
    column unembedded), in plain passes over the prompts."""
    fl = Flops.of(model)
    return fl.plain(job.prompts.length + job.n_new) / fl.plain(job.prompts.length)


def _score(model: HookedModel, g: Generation, edits: list[Any]) -> torch.Tensor:
    """``[batch, steps]``: each new token of ``g`` under the model with ``edits``, from one
    whole forward pass of the sequence (NaN where ``g`` has padding)."""
    L = g.prompt_length
    tokens, mask = g.tokens, g.mask
    pads = (~mask[:, :L]).sum(-1)
    window = Window(0, tokens.shape[1], L, pads, torch.arange(tokens.shape[0]))
    hooks = [h for e in edits for h in e.hooks(window)]
    rt = runtime_of(model)
    dev = model_device(model)
    logits, _ = rt.extend(
        tokens.to(dev), attention_mask=mask.long().to(dev), hooks=hooks, keep=False, last=False
    )
    logp = logits[:, L - 1 : -1].float().log_softmax(-1).cpu()  # predicts columns L ..
    got = logp.gather(-1, tokens[:, L:, None]).squeeze(-1)
    return got.masked_fill(~mask[:, L:], float("nan"))


def _table(
    clean: Generation, edited: Generation, c_e: torch.Tensor, e_c: torch.Tensor
) -> pd.DataFrame:
    L = clean.prompt_length
    pads = (~clean.mask[:, :L]).sum(-1)
    rows = []
    for b in range(clean.tokens.shape[0]):
        n = max(clean.lengths[b], edited.lengths[b])
        for s in range(n):
            cl, ed = s < clean.lengths[b], s < edited.lengths[b]
            rows.append(
                {
                    "prompt": b,
                    "step": s,
                    "position": int(L - pads[b] + s),
                    "clean": clean.pieces[b][s] if cl else "",
                    "clean_id": int(clean.new_tokens[b, s]) if cl else -1,
                    "clean_logprob": float(clean.logprobs[b, s]) if cl else float("nan"),
                    "clean_logprob_edited": float(c_e[b, s]) if cl else float("nan"),
                    "edited": edited.pieces[b][s] if ed else "",
                    "edited_id": int(edited.new_tokens[b, s]) if ed else -1,
                    "edited_logprob": float(edited.logprobs[b, s]) if ed else float("nan"),
                    "edited_logprob_clean": float(e_c[b, s]) if ed else float("nan"),
                    "same": bool(cl and ed and clean.new_tokens[b, s] == edited.new_tokens[b, s]),
                }
            )
    return pd.DataFrame(rows)

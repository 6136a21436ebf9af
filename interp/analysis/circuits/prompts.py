"""A circuit task's prompts: clean and corrupted prompts, a metric, and held-out prompts.

Circuit analyses compare two runs. :func:`circuit_task` gives the default task
for a model, the one ``interp circuit``, ``interp paths`` and the circuits lab
use when no prompts are given: repeated random tokens (the corrupted twin
replaces the first copy; metric: the loss on the repeated half) for models
without a tokenizer, indirect-object identification (the corrupted twin repeats
the other name; metric: the logit difference IO - S) for models with one.

Example:
    >>> from interp.models import load_model
    >>> prompts = circuit_task(load_model("induction-2l"), n=4)
    >>> prompts.name, tuple(prompts.clean.shape) == tuple(prompts.corrupted.shape)
    ('repeated tokens', True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from interp.core.metrics import logit_diff_metric, loss_metric
from interp.core.moved import renamed
from interp.core.protocol import HookedModel
from interp.datasets import name_mover_prompts, name_mover_templates, repeated_random_tokens


@dataclasses.dataclass(frozen=True)
class CircuitPrompts:
    """Clean and corrupted prompts, a metric, and held-out prompts of the same task."""

    name: str
    clean: torch.Tensor
    corrupted: torch.Tensor
    metric: Any
    held_clean: torch.Tensor
    held_corrupted: torch.Tensor
    held_metric: Any
    description: str


def circuit_task(model: HookedModel, *, n: int = 16, seed: int = 0) -> CircuitPrompts:
    """The default task for ``model`` (module docstring): repeated tokens for models without a
    tokenizer, indirect-object identification for models with one."""
    if getattr(model, "tokenizer", None) is None:
        seg = min(12, (int(model.cfg.n_ctx) - 1) // 2)

        def pair(offset: int, count: int) -> tuple[torch.Tensor, torch.Tensor, Any]:
            data = repeated_random_tokens(count, seg, d_vocab=int(model.cfg.d_vocab),
                                          seed=seed + offset)  # fmt: skip
            corrupted = data.tokens.clone()
            gen = torch.Generator().manual_seed(seed + offset + 1)
            corrupted[:, 1 : seg + 1] = torch.randint(
                1, int(model.cfg.d_vocab), (count, seg), generator=gen
            )
            return data.tokens, corrupted, loss_metric(data.loss_mask)

        clean, corrupted, metric = pair(0, n)
        held_clean, held_corrupted, held_metric = pair(1000, n)
        return CircuitPrompts(
            name="repeated tokens",
            clean=clean,
            corrupted=corrupted,
            metric=metric,
            held_clean=held_clean,
            held_corrupted=held_corrupted,
            held_metric=held_metric,
            description=f"{n} sequences of BOS and {seg} random tokens twice; the corrupted twin "
            "replaces the first copy; metric: mean loss on the repeated half (nats)",
        )
    tok = model.tokenizer
    p = name_mover_prompts(n, seed=seed, tokenizer=tok)
    held = name_mover_prompts(
        n, seed=seed, tokenizer=tok, templates=name_mover_templates("held_out")
    )
    return CircuitPrompts(
        name="name movers",
        clean=p.clean,
        corrupted=p.corrupted,
        metric=logit_diff_metric(p.io_ids, p.s_ids),
        held_clean=held.clean,
        held_corrupted=held.corrupted,
        held_metric=logit_diff_metric(held.io_ids, held.s_ids),
        description=f"{n} indirect-object prompts (training templates) and their corrupted "
        "twins (the other name repeated); metric: logit difference IO - S",
    )


def __getattr__(name: str) -> Any:
    return renamed(__name__, name)  # an old name warns and names the new one

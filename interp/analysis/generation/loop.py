"""The generation loop: one forward pass per new token, through the model's runtime.

With a key/value cache the first pass computes the prompt (every column) and
each later pass one column, the new token, attending to the cached keys and
values; without one, each pass computes the whole sequence so far (the
reference a cached generation is tested against). The runtime
(:meth:`interp.runtime.Runtime.extend`) is the only code that knows how a model
keeps its cache; this loop chooses each next token (:mod:`.sampling`), asks each
intervention for the hooks of each pass (:class:`.interventions.Window`),
records the chosen token's log-probability under the model that chose it
(temperature 1, before top-k / top-p), and stops a prompt once it writes a stop
token (what follows is padding, masked from every later pass).

Example:
    >>> from interp.models import load_model
    >>> from interp.analysis.generation.prompts import prompts_of
    >>> from interp.analysis.generation.sampling import check_sampling, uniforms
    >>> model = load_model("induction-2l")
    >>> p = prompts_of(model, [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10]])
    >>> run = continue_prompts(model, p, torch.tensor([0]), n_new=2,
    ...                        rule=check_sampling(0, None, None, d_vocab=64),
    ...                        draws=uniforms(0, [0], 2), edits=[], stop=[], pad=0)
    >>> run.tokens[:, 12:].tolist()
    [[41, 50]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from interp.analysis.generation.interventions import Window
from interp.analysis.generation.prompts import Prompts
from interp.analysis.generation.sampling import Sampling, choose
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.runtime import runtime_of


@dataclasses.dataclass(frozen=True)
class Continued:
    """What the loop made for a batch of prompts: ``tokens`` ``[batch, prompt + steps]``,
    ``mask`` (True: a real token), ``logprobs`` ``[batch, steps]`` (NaN after a stop),
    ``logits`` ``[batch, steps, d_vocab]`` when kept, ``stopped`` ``[batch]``."""

    tokens: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    logits: torch.Tensor | None
    stopped: torch.Tensor


def continue_prompts(
    model: HookedModel,
    prompts: Prompts,
    rows: torch.Tensor,
    *,
    n_new: int,
    rule: Sampling,
    draws: torch.Tensor,
    edits: Sequence[Any],
    stop: Sequence[int],
    pad: int,
    kv_cache: bool = True,
    keep_logits: bool = False,
    bar: Any = None,
) -> Continued:
    """Up to ``n_new`` tokens after each of ``prompts`` (module docstring). ``rows`` are the
    prompts' indices in the whole batch; ``draws`` ``[batch, n_new]`` their uniform numbers;
    ``edits`` the bound interventions (each with ``hooks(window)``); ``bar`` a progress bar
    advanced once per pass."""
    rt = runtime_of(model)
    device = prompts.tokens.device
    seq, mask = prompts.tokens, prompts.mask.long()
    stop_ids = torch.tensor(sorted(set(stop)), dtype=torch.long, device=device)
    done = torch.zeros(prompts.batch, dtype=torch.bool, device=device)
    past, logprobs, kept = None, [], []
    for step in range(n_new):
        total = seq.shape[1]
        new = seq[:, -1:] if kv_cache and past is not None else seq
        window = Window(total - new.shape[1], total, prompts.length, prompts.pads, rows)
        hooks = [h for e in edits for h in e.hooks(window)]
        logits, past = rt.extend(new, attention_mask=mask, past=past, hooks=hooks, keep=kv_cache)
        last = logits[:, -1].float()  # [batch, d_vocab]
        check_logits(last, done, step, rows, edits)
        nxt = torch.where(done, pad, choose(last, rule, draws[:, step]).to(device))
        lp = last.log_softmax(-1).gather(-1, nxt[:, None]).squeeze(-1)
        logprobs.append(lp.masked_fill(done, float("nan")))
        if keep_logits:
            kept.append(last.masked_fill(done[:, None], float("nan")))
        real = ~done
        done = done | torch.isin(nxt, stop_ids)
        seq = torch.cat([seq, nxt[:, None]], 1)
        mask = torch.cat([mask, real[:, None].long()], 1)
        if bar is not None:
            bar.update(1)
        if bool(done.all()):
            break
    return Continued(
        tokens=seq,
        mask=mask.bool(),
        logprobs=torch.stack(logprobs, 1).cpu(),
        logits=torch.stack(kept, 1).cpu() if keep_logits else None,
        stopped=done.cpu(),
    )


def check_logits(
    last: torch.Tensor, done: torch.Tensor, step: int, rows: torch.Tensor, edits: Sequence[Any]
) -> None:
    """Refuse a step whose logits hold NaN or ``+inf`` (or only ``-inf``) for a prompt still
    generating: a sample from them is meaningless (NaN picks token 0).

    Args:
        last: The step's logits ``[batch, d_vocab]``.
        done: The prompts that have stopped (their logits are not read).
        step: The new token's index (0: the first).
        rows: The prompts' indices in the whole batch.
        edits: The bound interventions in force.

    Raises:
        InterpError: naming the step, the prompts and the interventions in force.
    """
    bad = (torch.isnan(last) | (last == float("inf"))).any(-1) | (last == float("-inf")).all(-1)
    bad = bad & ~done
    if not bool(bad.any()):
        return
    from interp.core.precision import FROM_MODEL

    which = [int(r) for r in rows[bad.cpu()].tolist()]
    words = [getattr(e, "spec", e).describe() for e in edits]  # a bound edit keeps its spec
    cause = (
        f"with {'; '.join(words)} in force: an edit that large or non-finite overflows the "
        "model; make it smaller"
        if words
        else f"with no intervention: {FROM_MODEL}"
    )
    raise InterpError(
        f"the logits of new token {step} of prompt(s) {which} are not finite (NaN or "
        f"infinity), {cause}; no token is sampled from them"
    )

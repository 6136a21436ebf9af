"""``generate``: continue prompts token by token, optionally with interventions, on any model kind.

Every model kind generates through its runtime (:meth:`interp.runtime.Runtime.extend`),
with a key/value cache where the kind has one: our attention-only models keep
their own (:class:`interp.models.kv_cache.KVCache`), a ``TransformerBridge`` keeps
Hugging Face's own ``DynamicCache`` (:mod:`interp.runtime.decoding`), and any other
hooked model runs each pass over the whole sequence. Exact, and tested to be:

* without interventions, greedy tokens equal Hugging Face's own ``generate``
  token for token on every architecture of the QK tests (GPT-2, Llama, Llama-3
  rope scaling, GPT-NeoX, Qwen3, GPT-J, Gemma-2, Phi, Mistral), SmolLM2, and our
  attention-only model (as a GPT-2 with empty MLPs), with left-padded batches;
  logits agree to 1e-4 relative (float32 summation order across code paths);
* with interventions, tokens equal a loop of whole forward passes with the same
  hooks and no cache, logits to the same tolerance.

Every check runs before any work (:func:`plan_generation`): the prompt fits the
context and so do ``max_new_tokens`` more, the sampling rule is sane, the stop
tokens, hooks, heads and steering vectors exist and fit; then the cost is stated
(``estimate=True`` returns it: forward-equivalents count the tokens computed, in
passes over the prompts; peak memory the cache, a pass and what is kept) and the
prompts run in chunks under the memory budget, planned and combined by the runner
(:mod:`interp.engine.runner`). A prompt's tokens depend on the
seed and that prompt only (:mod:`.sampling`), so chunks change nothing.

Example:
    >>> from interp.models import load_model
    >>> prompt = [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10]]  # a segment, then its start
    >>> g = generate(load_model("induction-2l"), prompt, max_new_tokens=2)
    >>> g.new_tokens.tolist(), g.attrs["engine"]
    ([[41, 50]], 'kv cache (native)')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from interp.analysis.generation.interventions import Intervention
from interp.analysis.generation.loop import continue_prompts
from interp.analysis.generation.prompts import Prompt, Prompts, pad_id, prompts_of
from interp.analysis.generation.result import Generation, token_pieces
from interp.analysis.generation.sampling import Sampling, check_sampling, uniforms
from interp.core.checks import check_bool, check_int, check_seed, token_id
from interp.core.errors import InterpError
from interp.core.protocol import (
    HookedModel,
    check_model,
    eval_no_grad,
    is_causal,
    logits_meaningful,
)
from interp.engine.cache import check_cache
from interp.engine.chunks import Estimate, Plan
from interp.engine.cost import Flops
from interp.engine.footprints import generation_footprint
from interp.engine.runner import Chunk, Partials, Task, chunks_of, gathered, plan_task
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of


@dataclasses.dataclass(frozen=True)
class GenerationPlan:
    """A checked generation, its cost known: what :func:`generate` runs."""

    prompts: Prompts
    n_new: int
    rule: Sampling
    seed: int
    stop: list[int]
    interventions: list[Intervention]
    kv_cache: bool
    keep_logits: bool
    cache: Any
    plan: Plan
    task: Task  # its chunk: :func:`run_generation`'s, once the interventions are bound


def plan_generation(
    model: HookedModel,
    prompt: Prompt,
    *,
    max_new_tokens: Any,
    temperature: Any = 0.0,
    top_k: Any = None,
    top_p: Any = None,
    seed: Any = 0,
    stop: Any = None,
    interventions: Any = (),
    kv_cache: bool = True,
    keep_logits: bool = False,
    cache: Any = None,
    memory_budget: int | None = None,
    estimate: Any = False,
    progress: Any = False,
    analysis: str = "generate",
    extra_passes: float = 0.0,
) -> GenerationPlan:
    """Every check of :func:`generate`, and its cost; nothing runs but the runtime's
    once-per-model check of its cache.

    Raises:
        InterpError: as :func:`generate`.
    """
    check_model(model)
    if not is_causal(model) or not logits_meaningful(model):
        raise InterpError(
            f"{type(model).__name__} does not predict next tokens (a bidirectional encoder, or "
            "logits from a missing head), so it cannot generate; use a causal language model"
        )
    prompts = prompts_of(model, prompt)
    if isinstance(max_new_tokens, float) and max_new_tokens == float("inf"):
        raise InterpError(
            "max_new_tokens must be a number of tokens; unbounded generation is refused"
        )
    n_new = check_int(max_new_tokens, "max_new_tokens", minimum=1)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    longest = int(prompts.mask.sum(-1).max())
    if n_ctx is not None and longest + n_new > int(n_ctx):
        raise InterpError(
            f"the longest prompt has {longest} tokens, so max_new_tokens={n_new} goes past the "
            f"model's context of {n_ctx} tokens; ask for at most {int(n_ctx) - longest} new tokens"
        )
    rule = check_sampling(temperature, top_k, top_p, d_vocab=int(model.cfg.d_vocab))
    seed = check_seed(seed)
    stops = stop_ids(model, stop)
    edits = list(check_interventions(model, prompts, interventions))
    checked = None
    if cache is not None:
        if prompts.padded:
            raise InterpError("cache= needs prompts of one length (an unpadded [batch, pos] batch)")
        checked = check_cache(model, prompts.tokens, cache)
    kv_cache, keep_logits = check_bool(kv_cache, "kv_cache"), check_bool(keep_logits, "keep_logits")
    rt = runtime_of(model)
    cached = kv_cache and rt.kv_cache
    L, T = prompts.length, prompts.length + n_new
    passes = generation_work(model, L, n_new, cached=cached)
    passes += sum(e.work(model, prompts, cache=checked) for e in edits) + extra_passes
    passes += 0.0 if checked is None else checked.work  # the cache's check
    task = Task(
        analysis, generation_footprint(model, L, n_new, cached=cached, keep_logits=keep_logits),
        work=passes, chunk=_unbound, combine={"parts": "rows"},
        fix="generate fewer or shorter continuations", desc="generating",
        inputs=(prompts, n_new, rule, seed, stops, edits, keep_logits),
    )  # fmt: skip
    pl = plan_task(
        model, (prompts.batch, T), task, memory_budget=memory_budget, estimate=estimate,
        progress=progress,
    )  # fmt: skip
    return GenerationPlan(
        prompts, n_new, rule, seed, stops, edits, cached, keep_logits, checked, pl, task
    )


def generation_work(model: HookedModel, length: int, n_new: int, *, cached: bool) -> float:
    """The FLOPs of generating ``n_new`` tokens after prompts of ``length`` columns, over one
    plain pass of the prompts (:mod:`interp.engine.cost`).

    With the key/value cache: a pass over the prompt, then one over each new token but the
    last, its attention over every column before it; without: a whole pass over the
    sequence so far for each new token. A pass unembeds its last column only where the
    runtime can (a cached pass always), else every column.

    Example:
        >>> from interp.models import load_model
        >>> m = load_model("induction-2l")
        >>> 1.0 < generation_work(m, 12, 4, cached=True) < generation_work(m, 12, 4, cached=False)
        True
    """
    fl = Flops.of(model)
    one = bool(runtime_of(model).rows_supported) or cached

    def one_pass(new: int, keys: int) -> float:
        return (
            fl.n_layers * new * (fl.block + keys * fl.attention) + (1 if one else new) * fl.readout
        )

    if cached:
        flops = one_pass(length, length) + sum(one_pass(1, length + t) for t in range(1, n_new))
    else:
        flops = sum(one_pass(length + t, length + t) for t in range(n_new))
    return flops / fl.plain(length)


def stop_ids(model: HookedModel, stop: Any) -> list[int]:
    """``stop`` (a token, or a list of them, by the API's one rule for tokens) as ids.

    Raises:
        InterpError: as :func:`interp.core.checks.token_id`, or for an id outside the vocabulary.
    """
    if stop is None:
        return []
    items = [stop] if isinstance(stop, (str, int)) or not isinstance(stop, Sequence) else stop
    vocab = int(model.cfg.d_vocab)
    out = []
    for item in items:
        i = token_id(item, getattr(model, "tokenizer", None), name="stop token")
        if i >= vocab:
            raise InterpError(f"stop token id {i} is outside the vocabulary [0, {vocab})")
        out.append(i)
    return out


def check_interventions(model: HookedModel, prompts: Prompts, interventions: Any) -> list[Any]:
    """``interventions`` as a list of checked :class:`.interventions.Intervention` objects.

    Raises:
        InterpError: for something that is not an intervention, or one whose check fails.
    """
    if isinstance(interventions, Intervention):
        interventions = [interventions]
    if interventions is None or isinstance(interventions, (str, bytes)):
        raise InterpError("interventions must be a list of interventions (HeadAblation, ...)")
    out = list(interventions)
    for e in out:
        if not isinstance(e, Intervention):
            raise InterpError(
                f"{e!r} is not an intervention; use HeadAblation, Patch, Steering or UserHook "
                "(interp.analysis.generation)"
            )
        e.check(model, prompts)
    return out


def generate(
    model: HookedModel,
    prompt: Prompt,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    stop: Any = None,
    interventions: Sequence[Intervention] = (),
    kv_cache: bool = True,
    keep_logits: bool = False,
    cache: Any = None,
    memory_budget: int | None = None,
    estimate: bool = False,
    progress: bool = False,
) -> Generation | Estimate:
    """Continue ``prompt`` by up to ``max_new_tokens`` tokens (module docstring).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``); a causal one (ours, a bridge, a Hugging Face
            folder loaded by :func:`interp.models.load_model`).
        prompt: Text, a list of texts, ``[batch, pos]`` ids or a list of id lists,
            left-padded to one batch (:mod:`.prompts`).
        max_new_tokens: The most tokens each prompt gets; the prompt and these must fit the
            context.
        temperature: 0 (default) is greedy; above 0 the logits are divided by it and a token
            is sampled by ``seed`` (:mod:`.sampling`).
        top_k: Sample from the ``top_k`` most likely tokens only (None: all).
        top_p: Sample from the smallest set of tokens whose probability reaches ``top_p``,
            in (0, 1] (None: all).
        seed: The sampling draws and resample ablation's; the same seed gives the same
            numbers.
        stop: A token (or a list of them; ids or one-token strings) that ends a prompt's
            continuation: kept, then padding. None: always ``max_new_tokens``.
        interventions: Edits applied to the prompt and every new token alike
            (:class:`.head_edits.HeadAblation`, :class:`.head_edits.Patch`,
            :class:`.interventions.Steering`, :class:`.interventions.UserHook`).
        kv_cache: Use the runtime's key/value cache (False: every pass is the whole
            sequence, the reference the cache is tested against).
        keep_logits: Also return every step's logits ``[batch, steps, d_vocab]``.
        cache: An ActivationCache of the prompts' tokens (one length); it is read only after
            its earliest token-dependent activation is recomputed on them and matches; mean
            and resample ablation read the heads' outputs from it instead of a pass.
        memory_budget: The bytes an analysis may hold beyond the model's weights: the
            prompts run in chunks to stay under it; ``None`` is a quarter of the memory free
            on the model's device.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.
        progress: Show a progress bar over the generated tokens, with an ETA.

    Returns:
        A :class:`.result.Generation` (or, with ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate`).

    Raises:
        InterpError: for an encoder or a model without meaningful logits; a bad prompt (empty,
            not ids of the vocabulary, longer than the context); ``max_new_tokens`` that is not
            a positive integer or goes past the context; a negative, NaN or infinite
            temperature, ``top_k`` outside ``[1, d_vocab]``, ``top_p`` outside (0, 1], or
            either at temperature 0; a stop token that is not one token; an intervention with
            an unknown hook or head, a steering vector of the wrong shape, positions outside
            the prompt, or a source prompt of another shape; a cache of other tokens; options
            that are not booleans; work that cannot fit the memory budget.
    """
    job = plan_generation(
        model, prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
        top_p=top_p, seed=seed, stop=stop, interventions=interventions, kv_cache=kv_cache,
        keep_logits=keep_logits, cache=cache, memory_budget=memory_budget, estimate=estimate,
        progress=progress,
    )  # fmt: skip
    if estimate:
        return job.plan.estimate
    return run_generation(model, job, progress=progress)


def run_generation(
    model: HookedModel, job: GenerationPlan, *, progress: bool = False, edits: Any = None
) -> Generation:
    """Run a checked generation (:func:`plan_generation`), its chunks in turn; ``edits`` are
    its interventions already bound (:meth:`.interventions.Intervention.bind`), else they
    are bound here."""
    prompts = job.prompts
    pad = pad_id(model)
    draws = uniforms(job.seed, range(prompts.batch), job.n_new)
    bar = _bar(progress, len(job.plan.chunks) * job.n_new)

    def chunk(c: Chunk) -> dict[str, Any]:
        idx = torch.arange(prompts.batch)[c.rows]
        part = continue_prompts(
            model, prompts.rows(c.rows), idx, n_new=job.n_new, rule=job.rule, draws=draws[c.rows],
            edits=edits, stop=job.stop, pad=pad, kv_cache=job.kv_cache,
            keep_logits=job.keep_logits, bar=bar,
        )  # fmt: skip
        return {"parts": [part]}  # rows: the chunks' in order

    with eval_no_grad(model):
        if edits is None:
            edits = bind_all(model, job)
        parts = _chunks(job.plan, dataclasses.replace(job.task, chunk=chunk))["parts"]
    if bar is not None:
        bar.close()
    tokens, mask, logprobs, logits = _joined(parts, pad)
    L = prompts.length
    lengths = [int(n) for n in mask[:, L:].sum(-1).tolist()]
    ablations = sorted({e.ablation for e in job.interventions if e.ablation})
    attrs = table_attrs(
        "generate",
        description="each prompt continued token by token"
        + (", with interventions" if job.interventions else ""),
        method="exact",
        model=model,
        unit="nats (log-probability of each token)",
        ablation=",".join(ablations) or None,
        direction="noising" if "patch" in ablations else None,
        positions=sorted({str(e.positions) for e in job.interventions}) or None,
        seed=job.seed,
        forward_equivalents=job.plan.estimate.forward_equivalents,
        engine=f"kv cache ({runtime_of(model).kind})" if job.kv_cache else "whole passes",
        sampling=job.rule.describe(),
        interventions=[e.describe() for e in job.interventions],
        stop=job.stop,
    )
    return Generation(
        tokens=tokens.cpu(),
        mask=mask.cpu(),
        prompt_length=L,
        logprobs=logprobs,
        logits=logits,
        stopped=torch.cat([p.stopped for p in parts]),
        pieces=token_pieces(model, tokens[:, L:], lengths),
        attrs=attrs,
    )


def bind_all(model: HookedModel, job: GenerationPlan) -> list[Any]:
    """The plan's interventions bound: the passes some need before generation, run."""
    with eval_no_grad(model):
        return [
            e.bind(model, job.prompts, job.n_new, cache=job.cache, chunks=job.plan.chunks)
            for e in job.interventions
        ]


def _chunks(pl: Plan, task: Task) -> dict[str, Any]:
    """The chunks of a plan made before (:func:`plan_generation`) run through the runner's
    chunks and combined by its rules; no bar of its own (generation's counts tokens)."""
    acc = Partials(task.combine)
    for c in chunks_of(pl, task.metric, progress=False, desc=task.desc):
        acc.add(task.chunk(c), c.weight, c.index)
    return gathered(acc)


def _unbound(c: Chunk) -> dict[str, Any]:
    raise InterpError(
        "internal error: a generation's chunks run in run_generation, once its interventions "
        "are bound; please report this"
    )


def _joined(parts: list[Any], pad: int) -> tuple[torch.Tensor, ...]:
    """Chunks' results side by side: chunks that stopped early are padded to the longest."""
    width = max(p.tokens.shape[1] for p in parts)
    steps = max(p.logprobs.shape[1] for p in parts)

    def right(x: torch.Tensor, n: int, fill: Any) -> torch.Tensor:
        if x.shape[1] == n:
            return x
        extra = torch.full((x.shape[0], n - x.shape[1], *x.shape[2:]), fill, dtype=x.dtype)
        return torch.cat([x, extra.to(x.device)], 1)

    tokens = torch.cat([right(p.tokens, width, pad) for p in parts])
    mask = torch.cat([right(p.mask, width, False) for p in parts])
    logprobs = torch.cat([right(p.logprobs, steps, float("nan")) for p in parts])
    logits = None
    if parts[0].logits is not None:
        logits = torch.cat([right(p.logits, steps, float("nan")) for p in parts])
    return tokens, mask, logprobs, logits


def _bar(progress: bool, total: int) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="generating", unit="token")


def __getattr__(name: str) -> Any:
    from interp.core.moved import renamed

    return renamed(__name__, name)  # an old name warns and names the new one

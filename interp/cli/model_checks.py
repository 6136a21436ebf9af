"""Options checked against a model's config before its weights load.

A head out of range, a steering vector of another width, more new tokens than the context
holds, an encoder asked to generate, a dictionary of another width: each needs only the
model's sizes, which :func:`interp.models.spec.model_spec` reads from its small config. So a
command refuses them in a fraction of a second, before seconds of loading and a gigabyte of
weights (``interp generate --model smollm2-135m --ablate L99H0`` used to load 1.07 GB first).
Where the config cannot say (a hub id, a bridge hook outside the ones every bridge has),
the same checks run again once the model loads, as they always did.

Example:
    >>> spec = model_spec_of("induction-2l")
    >>> check_heads_fit(spec, ["L1H1"], "--ablate")
    >>> check_heads_fit(spec, ["L9H0"], "--ablate")
    Traceback (most recent call last):
    ...
    interp.core.errors.InterpError: --ablate: layer 9 out of range: the model has layers 0..1 ...
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from interp.core.errors import InterpError

if TYPE_CHECKING:  # pragma: no cover
    from interp.models.spec import ModelSpec

# Hooks whose per-position shape is the residual width on every model.
_RESIDUAL = (
    "hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
    "hook_embed", "hook_pos_embed",
)  # fmt: skip
_PER_HEAD = ("hook_q", "hook_z")  # [head, d_head] per position, every head


def model_spec_of(name: str | os.PathLike[str]) -> ModelSpec | None:
    """The config-only view of ``--model`` (None for a hub id: its checks wait for the load).

    Args:
        name: What ``--model`` names (an alias, a checkpoint or Hugging Face folder).

    Returns:
        The :class:`interp.models.spec.ModelSpec`, or None.

    Raises:
        InterpError: as :func:`interp.models.spec.model_spec` (an unknown name, a config that
            names no sizes, a damaged config).
    """
    from interp.models.spec import model_spec

    return model_spec(name)


def check_heads_fit(spec: ModelSpec | None, heads: Any, option: str) -> None:
    """Refuse heads the model does not have, naming ``option``.

    Args:
        spec: The model's spec (None: nothing to check before the load).
        heads: Head labels (``["L1H4"]``) or pairs.
        option: The option that gave them (``--ablate``, ``--heads``).

    Raises:
        InterpError: ``"--ablate: layer 99 is out of range ..."``.
    """
    if spec is None or heads is None:
        return
    from interp.core.head_checks import parse_heads

    try:
        parse_heads(spec, heads)
    except InterpError as exc:
        raise InterpError(f"{option}: {exc} ({spec.describe()})") from None


def check_hook_fits(spec: ModelSpec | None, hook: str, option: str) -> None:
    """Refuse a hook the model surely lacks (a layer past its last, a name our model lacks).

    Args:
        spec: The model's spec (None: nothing to check before the load).
        hook: The hook name.
        option: The option that named it.

    Raises:
        InterpError: naming the option, the hook and why.
    """
    if spec is None:
        return
    why = spec.hook_problem(hook)
    if why is not None:
        raise InterpError(f"{option}: {hook!r} is not a hook of this model: {why}")


def per_position_shape(spec: ModelSpec, hook: str) -> tuple[int, ...] | None:
    """One position's shape at ``hook`` where every model agrees on it (the residual width;
    every head's ``d_head`` at ``hook_q`` / ``hook_z``), else None (checked after the load).

    Example:
        >>> per_position_shape(model_spec_of("induction-2l"), "blocks.0.attn.hook_z")
        (2, 32)
    """
    leaf = hook.rsplit(".", 1)[-1]
    if leaf in _RESIDUAL:
        return (spec.d_model,)
    if leaf in _PER_HEAD:
        return (spec.n_heads, spec.d_head)
    return None


def check_steering_fits(spec: ModelSpec | None, hook: str, shape: tuple[int, ...]) -> None:
    """Refuse a ``--steer`` the model cannot take: a hook it lacks, a hook with no position
    axis, a vector of another shape.

    Args:
        spec: The model's spec (None: nothing to check before the load).
        hook: The hook of the ``--steer``.
        shape: The vector's shape.

    Raises:
        InterpError: naming ``--steer``, the hook and the shape it needs.
    """
    if spec is None:
        return
    check_hook_fits(spec, hook, "--steer")
    from interp.analysis.generation.interventions import KEYED  # no position axis to steer

    if hook.rsplit(".", 1)[-1] in KEYED:
        raise InterpError(
            f"--steer {hook}: steering adds a fixed vector, and this hook's key axis grows with "
            "every token; steer a hook with a position axis (a residual stream, hook_z ...)"
        )
    want = per_position_shape(spec, hook)
    if want is not None and tuple(shape) != want:
        raise InterpError(
            f"--steer {hook}: the vector has shape {tuple(shape)}, but {spec.describe()} carries "
            f"{want} per position there; give a vector of that shape"
        )


def check_generates(spec: ModelSpec | None, prompt_len: int | None, max_new_tokens: int) -> None:
    """Refuse generation the model cannot do: an encoder, or more tokens than its context.

    Args:
        spec: The model's spec (None: nothing to check before the load).
        prompt_len: The prompt's tokens (BOS included), or None when unknown before the load.
        max_new_tokens: ``--max-new-tokens``.

    Raises:
        InterpError: naming the model and the largest ``--max-new-tokens`` that fits.
    """
    if spec is None:
        return
    if not spec.causal or not spec.logits_meaningful:
        raise InterpError(
            f"{spec.name} ({spec.architecture}) does not predict next tokens (a bidirectional "
            "encoder, or no language-model head), so it cannot generate; use a causal model"
        )
    if spec.n_ctx is None:
        return
    used = prompt_len or 1
    if used > spec.n_ctx:
        raise InterpError(
            f"the prompt's {used} tokens: sequence length {used} exceeds the model's context "
            f"n_ctx={spec.n_ctx} ({spec.describe()}); shorten the prompt"
        )
    if used + max_new_tokens > spec.n_ctx:
        room = spec.n_ctx - used
        raise InterpError(
            f"the prompt has {used} tokens, so --max-new-tokens {max_new_tokens} goes past the "
            f"model's context of {spec.n_ctx} tokens ({spec.name}); ask for at most {room}"
        )


def check_dictionary_fits(spec: ModelSpec | None, hook: str, d_in: int) -> None:
    """Refuse a dictionary of another width than the model's hook (``interp features``).

    Args:
        spec: The model's spec (None: nothing to check before the load).
        hook: The dictionary's hook.
        d_in: The dictionary's width.

    Raises:
        InterpError: naming both widths.
    """
    if spec is None:
        return
    check_hook_fits(spec, hook, "the dictionary's hook")
    shape = per_position_shape(spec, hook)
    if shape is None:
        return
    width = 1
    for s in shape:
        width *= s
    if d_in != width:
        raise InterpError(
            f"the dictionary reads {d_in} values at {hook}, but {spec.describe()} carries "
            f"{width} there: it was trained on another model; pass the --model it was trained "
            "on"
        )

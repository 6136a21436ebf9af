"""Transcoder files: the sae-lens folder layout, and circuit-tracer's per-layer files.

**sae-lens (6.x)**: a folder of ``cfg.json`` and ``sae_weights.safetensors``, as for a
dictionary (:mod:`interp.dictionaries.files`), with ``architecture`` one of
``transcoder`` (relu), ``skip_transcoder``, ``jumprelu_transcoder`` and
``jumprelu_skip_transcoder``, the output width ``d_out``, ``apply_b_dec_to_input: false``
(sae-lens refuses true for transcoders), and the output hook as ``metadata.hook_name_out``
(read from the top level too, where older folders keep it). The tensors are ``W_enc
[d_in, d_sae]``, ``b_enc``, ``W_dec [d_sae, d_out]``, ``b_dec [d_out]``, ``threshold``
(jumprelu) and ``W_skip [d_out, d_in]`` (skip). sae-lens 6.54 has no TopK transcoder: a
``topk`` one is written as ``topk_transcoder`` (``topk_skip_transcoder``) with its ``k``,
which this module reads and sae-lens does not.

**circuit-tracer** (``SingleLayerTranscoder.to_safetensors``, ``load_transcoder``): one
safetensors file per layer (``layer_{i}.safetensors``) holding ``W_enc [d_sae, d_in]``
(transposed, as ``F.linear`` takes it), ``W_dec [d_sae, d_out]``, ``b_enc``, ``b_dec``,
and optionally ``activation_function.threshold`` (JumpReLU), ``k`` (TopK) and ``W_skip
[d_out, d_in]``; the hooks are in the set's config, so the caller names them (by default
``blocks.{layer}.mlp.hook_in`` -> ``blocks.{layer}.hook_mlp_out``, the layer read from the
file name). circuit-tracer's TopK keeps negative values and its JumpReLU has no relu; ours
apply a relu, the same numbers wherever the kept pre-activations and thresholds are >= 0.

Example:
    >>> import tempfile, torch
    >>> from interp.dictionaries.transcoder import Transcoder
    >>> T = Transcoder.random(d_in=4, d_out=3, d_sae=8, hook_name="a", hook_name_out="b")
    >>> U = load_transcoder(T.save(tempfile.mkdtemp() + "/tc"))
    >>> U.hook_name_out, bool(torch.equal(U.W_dec, T.W_dec))
    ('b', True)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.dictionaries.files import (
    CORRUPT_FILE,
    IDENTITY_NORMS,
    cfg_key,
    file_error,
    file_weight,
    load_safetensors,
    read_cfg,
)
from interp.dictionaries.inputs import DTYPES, check_finite_weight, check_path, weight_dtype
from interp.dictionaries.sae_lens import CFG, WEIGHTS
from interp.dictionaries.transcoder import Transcoder
from interp.dictionaries.transcoder_save import (  # noqa: F401 - this module's names too
    ARCHITECTURES,
    NAMES,
    save_transcoder,
    transcoder_config,
)
from interp.models.placement import check_device


def _checked(state: dict[str, Any], need: list[str], file: Path) -> dict[str, torch.Tensor]:
    """``need`` taken from ``state``, each a finite floating tensor; extra keys refused."""
    missing = [k for k in need if k not in state]
    if missing:
        raise file_error(
            file, f"has no {', '.join(map(repr, missing))}: this transcoder needs {need}"
        )
    extra = sorted(set(state) - set(need))
    if extra:
        raise file_error(
            file,
            f"holds {', '.join(map(repr, extra))}, which this transcoder does not use: remove "
            "them, or name the architecture they belong to",
        )
    out = {k: file_weight(state[k], k, file) for k in need}
    for k, t in out.items():
        check_finite_weight(t, f"{file}: {k!r}", fix=CORRUPT_FILE)
    return out


def _build(
    tensors: dict[str, torch.Tensor],
    file: Path,
    dtype: torch.dtype,
    device: torch.device | None,
    **options: Any,
) -> Transcoder:
    """The transcoder of checked tensors cast to ``dtype`` (refused where they overflow)."""
    cast = {
        key: check_finite_weight(
            t.to(dtype),
            f"{file}: {key!r} in {str(dtype).removeprefix('torch.')}",
            fix=f"its values are too large for {dtype}; load it with dtype='float32'",
        )
        for key, t in tensors.items()
    }
    try:
        T = Transcoder(
            *(cast[key] for key in ("W_enc", "b_enc", "W_dec", "b_dec")),
            threshold=cast.get("threshold"),
            W_skip=cast.get("W_skip"),
            **options,
        )
    except InterpError as e:
        raise file_error(file, str(e)) from None
    return T if device is None else T.to(device)


def _options(path: Path, hook_name: Any, hook_name_out: Any, dtype: Any, device: Any) -> tuple:
    p = check_path(path, "transcoder path")
    for key, name in (("hook_name", hook_name), ("hook_name_out", hook_name_out)):
        if name is not None and not isinstance(name, str):
            raise InterpError(f"{key} must be a string or None, got {type(name).__name__}")
    return p, weight_dtype(dtype), check_device(device)


def load_transcoder(
    path: str | os.PathLike[str],
    *,
    hook_name: str | None = None,
    hook_name_out: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> Transcoder:
    """Read a sae-lens transcoder folder (``cfg.json`` + ``sae_weights.safetensors``).

    Everything is checked before the transcoder is made: the path, the options, the
    config's keys, and each tensor's dtype, shape and values (a NaN or an infinity is
    refused, naming the tensor and the file).

    Args:
        path: the folder.
        hook_name: the hook it reads, replacing the config's.
        hook_name_out: the hook it writes, replacing the config's.
        dtype: its dtype (``torch.dtype`` or a name; default the config's ``dtype``).
        device: where its tensors go (default the CPU).

    Returns:
        The :class:`~interp.dictionaries.transcoder.Transcoder`.

    Raises:
        InterpError: a bad path or option; a missing file or key; a folder of an ordinary
            dictionary (use ``load_dictionary``); ``apply_b_dec_to_input`` true; an
            activation normalisation that is not the identity; a corrupt file; a tensor of
            the wrong dtype or shape, or holding NaN or infinite values.
    """
    p, dtype, device = _options(path, hook_name, hook_name_out, dtype, device)
    if not p.is_dir() or not (p / CFG).is_file() or not (p / WEIGHTS).is_file():
        raise InterpError(
            f"{p}: no sae-lens transcoder folder: it holds {CFG} and {WEIGHTS} (a "
            "circuit-tracer layer file loads with load_circuit_tracer_transcoder)"
        )
    cfg = read_cfg(p)
    arch = cfg.get("architecture")
    if arch not in ARCHITECTURES:
        raise file_error(
            p / CFG,
            f"'architecture' is {arch!r}, not a transcoder ({', '.join(ARCHITECTURES)}): an "
            "ordinary dictionary loads with interp.dictionaries.load_dictionary",
        )
    ours, skip = ARCHITECTURES[arch]
    d_in, d_sae = cfg_key(cfg, "d_in", p, int), cfg_key(cfg, "d_sae", p, int)
    d_out = cfg_key(cfg, "d_out", p, int)
    if cfg.get("apply_b_dec_to_input", False) is not False:
        raise file_error(
            p / CFG, "'apply_b_dec_to_input' must be false for a transcoder (sae-lens)"
        )
    norm = cfg.get("normalize_activations", "none")
    if {None: "none", False: "none"}.get(norm, norm) not in IDENTITY_NORMS:
        raise file_error(
            p / CFG,
            f"'normalize_activations' is {norm!r}: only {' / '.join(IDENTITY_NORMS)} are "
            "supported; fold the normalisation into the weights",
        )
    k = cfg.get("k") if ours == "topk" else None
    if ours == "topk" and (isinstance(k, bool) or not isinstance(k, int)):
        raise file_error(p / CFG, f"a topk transcoder needs an integer 'k', got {k!r}")
    file_dtype = str(cfg.get("dtype", "float32")).removeprefix("torch.")
    if dtype is None and file_dtype not in DTYPES:
        raise file_error(p / CFG, f"'dtype' {file_dtype!r} is unknown: use one of {sorted(DTYPES)}")
    need = ["W_enc", "b_enc", "W_dec", "b_dec"] + ["threshold"] * (ours == "jumprelu")
    tensors = _checked(load_safetensors(p / WEIGHTS), need + ["W_skip"] * skip, p / WEIGHTS)
    want = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_out), "b_dec": (d_out,)}
    for key, shape in want.items():
        if tuple(tensors[key].shape) != shape:
            raise file_error(
                p / WEIGHTS,
                f"{key!r} has shape {list(tensors[key].shape)}, but cfg.json's d_in={d_in}, "
                f"d_sae={d_sae}, d_out={d_out} need {list(shape)}: the weights and the config "
                "belong to different transcoders",
            )
    meta = dict(cfg.get("metadata") or {})
    return _build(
        tensors, p / WEIGHTS, dtype or DTYPES[file_dtype], device,
        architecture=ours,
        hook_name=hook_name if hook_name is not None else str(
            meta.get("hook_name") or cfg.get("hook_name") or ""),
        hook_name_out=hook_name_out if hook_name_out is not None else str(
            meta.get("hook_name_out") or cfg.get("hook_name_out") or ""),
        k=k,
        metadata=meta,
    )  # fmt: skip


def load_circuit_tracer_transcoder(
    path: str | os.PathLike[str],
    *,
    layer: int | None = None,
    hook_name: str | None = None,
    hook_name_out: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> Transcoder:
    """Read one of circuit-tracer's per-layer transcoder files (``layer_{i}.safetensors``).

    Args:
        path: the ``.safetensors`` file.
        layer: a block index: the layer it stands in for (default: the number in
            ``layer_{i}`` of the file name).
        hook_name: the hook it reads (default ``blocks.{layer}.mlp.hook_in``).
        hook_name_out: the hook it writes (default ``blocks.{layer}.hook_mlp_out``).
        dtype: its dtype (default float32).
        device: where its tensors go (default the CPU).

    Returns:
        The :class:`~interp.dictionaries.transcoder.Transcoder` (``jumprelu`` where the
        file has ``activation_function.threshold``, ``topk`` where it has ``k``, else
        ``relu``).

    Raises:
        InterpError: a bad path or option; no layer in the name and none given; a corrupt
            file; a missing or unknown tensor; a tensor of the wrong shape or holding NaN
            or infinite values.
    """
    p, dtype, device = _options(path, hook_name, hook_name_out, dtype, device)
    if not p.is_file():
        raise InterpError(f"{p}: no such file: pass a circuit-tracer layer_{{i}}.safetensors")
    if layer is None:
        found = re.search(r"(\d+)", p.stem)
        if (hook_name is None or hook_name_out is None) and found is None:
            raise file_error(p, "names no layer: pass layer= (or hook_name= and hook_name_out=)")
        layer = int(found.group(1)) if found else 0
    elif isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise InterpError(f"layer must be an integer >= 0, got {layer!r}")
    state = dict(load_safetensors(p))
    k = None
    if "k" in state:
        kt = state.pop("k")
        if kt.numel() != 1 or kt.dtype.is_floating_point or kt.dtype == torch.bool:
            raise file_error(p, f"'k' must be one integer, got a {kt.dtype} tensor of {kt.numel()}")
        k = int(kt.item())
    if "activation_function.threshold" in state:
        state["threshold"] = state.pop("activation_function.threshold")
    arch = "jumprelu" if "threshold" in state else "topk" if k is not None else "relu"
    need = ["W_enc", "b_enc", "W_dec", "b_dec"] + ["threshold"] * (arch == "jumprelu")
    tensors = _checked(state, need + ["W_skip"] * ("W_skip" in state), p)
    if tensors["W_enc"].ndim != 2:
        raise file_error(
            p, f"'W_enc' has shape {list(tensors['W_enc'].shape)}: it must be [d_sae, d_in]"
        )
    tensors["W_enc"] = tensors["W_enc"].T.contiguous()  # circuit-tracer: [d_sae, d_in]
    if "threshold" in tensors and tensors["threshold"].numel() == 1:  # one scalar threshold
        tensors["threshold"] = tensors["threshold"].reshape(1).expand(tensors["b_enc"].shape[0])
    hook_in = hook_name if hook_name is not None else f"blocks.{layer}.mlp.hook_in"
    hook_out = hook_name_out if hook_name_out is not None else f"blocks.{layer}.hook_mlp_out"
    return _build(
        tensors, p, dtype or torch.float32, device,
        architecture=arch,
        hook_name=hook_in,
        hook_name_out=hook_out,
        k=k,
        metadata={"source": f"circuit-tracer {p.name}"},
    )  # fmt: skip

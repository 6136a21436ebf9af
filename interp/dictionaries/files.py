"""Reading dictionaries: the sae-lens folder layout, and Gemma Scope's ``params.npz``.

A sae-lens (6.x) folder holds ``cfg.json`` and ``sae_weights.safetensors``:

* ``cfg.json``: ``architecture`` (``standard`` = relu, ``topk``, ``jumprelu``), ``d_in``,
  ``d_sae``, ``dtype``, ``device``, ``apply_b_dec_to_input``, ``normalize_activations``,
  ``reshape_activations``, ``k`` and ``rescale_acts_by_decoder_norm`` (topk), and a
  ``metadata`` object with ``hook_name``, ``model_name`` and the ``sae_lens_version``
  (folders older than 6.0 keep ``hook_point`` / ``hook_name`` at the top level and name a
  topk encoder by ``activation_fn: topk`` with ``activation_fn_kwargs.k``; both are read);
* the weights: ``W_enc [d_in, d_sae]``, ``b_enc [d_sae]``, ``W_dec [d_sae, d_in]``,
  ``b_dec [d_in]``, and ``threshold [d_sae]`` for jumprelu.

A topk dictionary saved with ``rescale_acts_by_decoder_norm`` (its pre-activations scaled
by each decoder row's norm, its activations divided by it before decoding) is read with
the norms folded into the encoder and decoder, which computes the same activations.
Activation normalisations that change each token's scale (``layer_norm``,
``constant_norm_rescale``) are refused: they are not a fixed affine map.

Gemma Scope ships ``params.npz`` with the same tensors (``W_enc``, ``b_enc``, ``W_dec``,
``b_dec``, ``threshold``): a jumprelu dictionary whose hook name the caller gives.

Example:
    >>> import tempfile, torch
    >>> from interp.dictionaries import Dictionary
    >>> D = Dictionary.random(d_in=4, d_sae=8, architecture="topk", k=2, hook_name="h")
    >>> folder = D.save(tempfile.mkdtemp() + "/sae")
    >>> E = load_dictionary(folder)
    >>> E.architecture, E.k, bool(torch.equal(E.W_dec, D.W_dec))
    ('topk', 2, True)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.dictionaries.dictionary import Dictionary, architecture_name
from interp.dictionaries.inputs import (
    DTYPES,
    as_weight,
    check_finite_weight,
    check_path,
    weight_dtype,
)
from interp.dictionaries.sae_lens import CFG, NPZ, TENSORS, WEIGHTS
from interp.models.placement import check_device

IDENTITY_NORMS = ("none", "expected_average_only_in")  # sae-lens applies neither at inference
CORRUPT_FILE = "the file is corrupt; retrain or re-download it"


def file_error(path: Path, what: str) -> InterpError:
    """The error about a file: ``InterpError("{path}: {what}")``."""
    return InterpError(f"{path}: {what}")


def read_cfg(path: Path) -> dict[str, Any]:
    """A sae-lens folder's ``cfg.json`` as a dict (with a dict ``metadata``), or an InterpError."""
    try:
        cfg = json.loads((path / CFG).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise file_error(
            path / CFG, f"is not UTF-8 text (byte {e.start}): the file is corrupt; re-download it"
        ) from None
    except json.JSONDecodeError as e:
        raise file_error(
            path / CFG, f"is not valid JSON ({e.msg}, line {e.lineno}): fix or re-download it"
        ) from None
    except OSError as e:
        raise file_error(path / CFG, f"cannot be read ({e.strerror or type(e).__name__})") from None
    if not isinstance(cfg, dict):
        raise file_error(path / CFG, "must hold a JSON object of sae-lens config keys")
    if not isinstance(cfg.get("metadata") or {}, dict):
        raise file_error(path / CFG, "'metadata' must be a JSON object (hook_name, model_name ...)")
    return cfg


def cfg_key(cfg: dict[str, Any], key: str, path: Path, kind: type | tuple[type, ...]) -> Any:
    """``cfg[key]``, present and of ``kind`` (an int at least 1), or an InterpError."""
    if key not in cfg:
        raise file_error(path / CFG, f"has no {key!r}: add it (sae-lens cfg.json key)")
    value = cfg[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise file_error(
            path / CFG, f"{key!r} is {value!r}: it must be a {getattr(kind, '__name__', kind)}"
        )
    if kind is int and value < 1:
        raise file_error(path / CFG, f"{key!r} is {value}: it must be at least 1")
    return value


def _architecture(cfg: dict[str, Any], path: Path) -> tuple[str, int | None]:
    """The architecture and k, by sae-lens 6 keys or the older activation_fn keys."""
    arch = cfg.get("architecture", "standard")
    fn = cfg.get("activation_fn", cfg.get("activation_fn_str"))
    kwargs = cfg.get("activation_fn_kwargs") or {}
    if fn == "topk" and arch == "standard":
        arch = "topk"
    try:
        arch = architecture_name(arch)
    except InterpError as e:
        raise file_error(path / CFG, f"'architecture': {e}") from None
    k = cfg.get("k", kwargs.get("k")) if arch == "topk" else None
    if arch == "topk" and (isinstance(k, bool) or not isinstance(k, int)):
        raise file_error(path / CFG, f"a topk dictionary needs an integer 'k', got {k!r}")
    return arch, k


def _hook_name(cfg: dict[str, Any]) -> str:
    meta = cfg.get("metadata") or {}
    return str(meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point") or "")


def load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, or an InterpError naming a corrupt file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, TypeError, RuntimeError) as e:
        raise file_error(
            file, f"is not a readable safetensors file ({e}): {CORRUPT_FILE}"
        ) from None


def _load_npz(file: Path) -> dict[str, Any]:
    import zipfile
    import zlib

    import numpy as np

    if not zipfile.is_zipfile(file):
        raise file_error(
            file, f"is not an npz archive (truncated, or not a numpy file): {CORRUPT_FILE}"
        )
    try:
        with np.load(file, allow_pickle=False) as data:
            # Gemma Scope spells the matrices w_enc / w_dec in some releases
            return {
                ("W_" + k[2:] if k.startswith("w_") else k): np.array(data[k]) for k in data.files
            }
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
        raise file_error(file, f"is not a readable npz file ({e}): {CORRUPT_FILE}") from None


def file_weight(value: Any, name: str, file: Path) -> torch.Tensor:
    """A file's tensor as a floating weight, or an InterpError naming the file."""
    try:
        return as_weight(value, repr(name))
    except InterpError as e:
        raise file_error(file, f"{e}; {CORRUPT_FILE}") from None


def _tensors(state: dict[str, Any], file: Path, arch: str) -> dict[str, torch.Tensor]:
    state = dict(state)
    if "log_threshold" in state and "threshold" not in state:
        log = check_finite_weight(
            file_weight(state.pop("log_threshold"), "log_threshold", file),
            f"{file}: 'log_threshold'",
            fix=CORRUPT_FILE,
        )
        state["threshold"] = log.exp()
    need = [k for k in TENSORS if k != "threshold" or arch == "jumprelu"]
    missing = [k for k in need if k not in state]
    if missing:
        raise file_error(
            file, f"has no {', '.join(map(repr, missing))}: a {arch} dictionary needs {need}"
        )
    extra = sorted(set(state) - set(need))
    if extra:
        raise file_error(
            file,
            f"holds {', '.join(map(repr, extra))}, which a {arch} dictionary does not use: "
            "remove them or set cfg.json's 'architecture' to the dictionary they belong to",
        )
    out = {k: file_weight(state[k], k, file) for k in need}
    for k, t in out.items():
        check_finite_weight(t, f"{file}: {k!r}", fix=CORRUPT_FILE)
    return out


def _check_widths(tensors: dict[str, torch.Tensor], d_in: int, d_sae: int, file: Path) -> None:
    want = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    want["threshold"] = (d_sae,)
    for key, t in tensors.items():
        if tuple(t.shape) != want[key]:
            raise file_error(
                file,
                f"{key!r} has shape {list(t.shape)}, but cfg.json's d_in={d_in}, d_sae={d_sae} "
                f"need {list(want[key])}: the weights and the config belong to different "
                "dictionaries",
            )


def load_dictionary(
    path: str | os.PathLike[str],
    *,
    hook_name: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> Dictionary:
    """Read a dictionary: a sae-lens folder, or a Gemma Scope ``params.npz`` (or its folder).

    Everything is checked before the dictionary is made: the path, the options, the
    config's keys, and each tensor's dtype, shape and values (a NaN or an infinity in a
    file is refused, naming the tensor and the file, never loaded as NaN scores).

    Args:
        path: the folder (``cfg.json`` + ``sae_weights.safetensors``, or ``params.npz``)
            or the ``.npz`` file.
        hook_name: the hook it sits at, replacing the config's (required for an npz file,
            which does not name one).
        dtype: the dtype of its tensors: a ``torch.dtype`` or ``'float32'``,
            ``'float16'``, ``'bfloat16'``, ``'float64'`` (default: the config's ``dtype``;
            float32 for an npz file).
        device: where its tensors go (``'cpu'``, ``'cuda'``, ``'cuda:1'``, ``'mps'``;
            default the CPU).

    Returns:
        The :class:`Dictionary`.

    Raises:
        InterpError: a path that is not a str / ``os.PathLike``, a bad ``hook_name``,
            ``dtype`` or ``device``; a missing file or key; a file that is not UTF-8, not
            valid JSON, truncated or corrupt; a tensor of an integer dtype, whose shape does
            not match ``d_in`` / ``d_sae``, holding NaN or infinite values, or whose values
            do not fit ``dtype``; an unknown architecture or activation normalisation.
    """
    p = check_path(path, "dictionary path")
    if hook_name is not None and not isinstance(hook_name, str):
        raise InterpError(f"hook_name must be a string or None, got {type(hook_name).__name__}")
    dtype, device = weight_dtype(dtype), check_device(device)
    if p.is_dir() and not (p / CFG).is_file() and (p / NPZ).is_file():
        p = p / NPZ
    if p.is_file() and p.suffix == ".npz":
        return _from_npz(p, hook_name, dtype, device)
    if not p.is_dir():
        raise InterpError(f"{p}: no such dictionary folder: pass a sae-lens folder or a .npz file")
    if not (p / CFG).is_file():
        raise file_error(p, f"has no {CFG}: a sae-lens folder holds {CFG} and {WEIGHTS}")
    if not (p / WEIGHTS).is_file():
        raise file_error(p, f"has no {WEIGHTS}: a sae-lens folder holds {CFG} and {WEIGHTS}")
    cfg = read_cfg(p)
    arch, k = _architecture(cfg, p)
    d_in, d_sae = cfg_key(cfg, "d_in", p, int), cfg_key(cfg, "d_sae", p, int)
    norm = cfg.get("normalize_activations", "none")
    norm = {None: "none", False: "none", True: "expected_average_only_in"}.get(norm, norm)
    if norm not in IDENTITY_NORMS:
        raise file_error(
            p / CFG,
            f"'normalize_activations' is {norm!r}: only {' / '.join(IDENTITY_NORMS)} (no "
            "change at inference) are supported; fold the normalisation into the weights",
        )
    if cfg.get("reshape_activations", "none") not in ("none", "hook_z"):
        raise file_error(
            p / CFG, f"'reshape_activations' {cfg['reshape_activations']!r} is unknown"
        )
    apply_b_dec = cfg.get("apply_b_dec_to_input", True)
    if not isinstance(apply_b_dec, bool):
        raise file_error(
            p / CFG, f"'apply_b_dec_to_input' is {apply_b_dec!r}: it must be true or false"
        )
    file_dtype = cfg.get("dtype", "float32")
    if dtype is None and str(file_dtype).removeprefix("torch.") not in DTYPES:
        raise file_error(p / CFG, f"'dtype' {file_dtype!r} is unknown: use one of {sorted(DTYPES)}")
    dtype = dtype or DTYPES[str(file_dtype).removeprefix("torch.")]
    tensors = _tensors(load_safetensors(p / WEIGHTS), p / WEIGHTS, arch)
    _check_widths(tensors, d_in, d_sae, p / WEIGHTS)
    tensors = {key: t.to(torch.float64) for key, t in tensors.items()}
    if arch == "topk" and cfg.get("rescale_acts_by_decoder_norm", False):
        norms = tensors["W_dec"].norm(dim=-1)  # [d_sae]; folded: same activations
        if not bool((norms > 0).all()):
            raise file_error(
                p / WEIGHTS,
                f"'W_dec' has {int((norms == 0).sum())} all-zero row(s), which "
                "rescale_acts_by_decoder_norm divides by: drop those features or set "
                "'rescale_acts_by_decoder_norm' to false in cfg.json",
            )
        tensors["W_enc"], tensors["b_enc"] = tensors["W_enc"] * norms, tensors["b_enc"] * norms
        tensors["W_dec"] = tensors["W_dec"] / norms[:, None]
    return _build(
        tensors, p / WEIGHTS, dtype, device,
        architecture=arch,
        hook_name=hook_name if hook_name is not None else _hook_name(cfg),
        k=k,
        apply_b_dec_to_input=apply_b_dec,
        metadata=dict(cfg.get("metadata") or {}),
    )  # fmt: skip


def _build(
    tensors: dict[str, torch.Tensor],
    file: Path,
    dtype: torch.dtype,
    device: torch.device | None,
    **options: Any,
) -> Dictionary:
    """The dictionary of checked tensors, cast to ``dtype`` (refused where they overflow)."""
    cast = {}
    for key, t in tensors.items():
        cast[key] = check_finite_weight(
            t.to(dtype),
            f"{file}: {key!r} in {str(dtype).removeprefix('torch.')}",
            fix=f"its values are too large for {dtype}; load it with dtype='float32'",
        )
    try:
        D = Dictionary(
            *(cast[key] for key in ("W_enc", "b_enc", "W_dec", "b_dec")),
            threshold=cast.get("threshold"),
            **options,
        )
    except InterpError as e:
        raise file_error(file, str(e)) from None
    return D if device is None else D.to(device)


def _from_npz(
    file: Path, hook_name: str | None, dtype: torch.dtype | None, device: torch.device | None
) -> Dictionary:
    if hook_name is None:
        raise file_error(
            file, "does not name its hook: pass hook_name= (e.g. 'blocks.12.hook_resid_post')"
        )
    tensors = _tensors(_load_npz(file), file, "jumprelu")
    if tensors["W_enc"].ndim != 2:
        raise file_error(
            file, f"'W_enc' has shape {list(tensors['W_enc'].shape)}: it must be [d_in, d_sae]"
        )
    d_in, d_sae = tensors["W_enc"].shape
    _check_widths(tensors, int(d_in), int(d_sae), file)
    return _build(
        tensors, file, dtype or torch.float32, device,
        architecture="jumprelu",
        hook_name=hook_name,
        apply_b_dec_to_input=False,  # Gemma Scope encodes x itself
        metadata={"source": "gemma-scope params.npz"},
    )  # fmt: skip

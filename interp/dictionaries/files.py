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
from interp.dictionaries.sae_lens import CFG, NPZ, TENSORS, WEIGHTS

IDENTITY_NORMS = ("none", "expected_average_only_in")  # sae-lens applies neither at inference
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def _bad(path: Path, what: str) -> InterpError:
    return InterpError(f"{path}: {what}")


def _read_cfg(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / CFG).read_text())
    except json.JSONDecodeError as e:
        raise _bad(path / CFG, f"is not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(cfg, dict):
        raise _bad(path / CFG, "must hold a JSON object of sae-lens config keys")
    return cfg


def _key(cfg: dict[str, Any], key: str, path: Path, kind: type | tuple[type, ...]) -> Any:
    if key not in cfg:
        raise _bad(path / CFG, f"has no {key!r}: add it (sae-lens cfg.json key)")
    value = cfg[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise _bad(
            path / CFG, f"{key!r} is {value!r}: it must be a {getattr(kind, '__name__', kind)}"
        )
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
        raise _bad(path / CFG, f"'architecture': {e}") from None
    k = cfg.get("k", kwargs.get("k")) if arch == "topk" else None
    if arch == "topk" and (isinstance(k, bool) or not isinstance(k, int)):
        raise _bad(path / CFG, f"a topk dictionary needs an integer 'k', got {k!r}")
    return arch, k


def _hook_name(cfg: dict[str, Any]) -> str:
    meta = cfg.get("metadata") or {}
    return str(meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point") or "")


def _load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError) as e:
        raise _bad(file, f"is not a readable safetensors file ({e})") from None


def _load_npz(file: Path) -> dict[str, torch.Tensor]:
    import numpy as np

    try:
        with np.load(file) as data:
            # Gemma Scope spells the matrices w_enc / w_dec in some releases
            return {
                ("W_" + k[2:] if k.startswith("w_") else k): torch.from_numpy(np.array(data[k]))
                for k in data.files
            }
    except (OSError, ValueError) as e:
        raise _bad(file, f"is not a readable npz file ({e})") from None


def _tensors(state: dict[str, torch.Tensor], file: Path, arch: str) -> dict[str, torch.Tensor]:
    state = dict(state)
    if "log_threshold" in state and "threshold" not in state:
        state["threshold"] = state.pop("log_threshold").exp()
    need = [k for k in TENSORS if k != "threshold" or arch == "jumprelu"]
    missing = [k for k in need if k not in state]
    if missing:
        raise _bad(
            file, f"has no {', '.join(map(repr, missing))}: a {arch} dictionary needs {need}"
        )
    extra = sorted(set(state) - set(need))
    if extra:
        raise _bad(
            file,
            f"holds {', '.join(map(repr, extra))}, which a {arch} dictionary does not use: "
            "remove them or set cfg.json's 'architecture' to the dictionary they belong to",
        )
    return {k: state[k] for k in need}


def _check_widths(tensors: dict[str, torch.Tensor], d_in: int, d_sae: int, file: Path) -> None:
    want = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    want["threshold"] = (d_sae,)
    for key, t in tensors.items():
        if tuple(t.shape) != want[key]:
            raise _bad(
                file,
                f"{key!r} has shape {list(t.shape)}, but cfg.json's d_in={d_in}, d_sae={d_sae} "
                f"need {list(want[key])}: the weights and the config belong to different "
                "dictionaries",
            )


def load_dictionary(
    path: str | os.PathLike[str],
    *,
    hook_name: str | None = None,
    dtype: torch.dtype | None = None,
) -> Dictionary:
    """Read a dictionary: a sae-lens folder, or a Gemma Scope ``params.npz`` (or its folder).

    Args:
        path: the folder (``cfg.json`` + ``sae_weights.safetensors``, or ``params.npz``)
            or the ``.npz`` file.
        hook_name: the hook it sits at, replacing the config's (required for an npz file,
            which does not name one).
        dtype: the dtype of its tensors (default: the config's ``dtype``, else the file's).

    Returns:
        The :class:`Dictionary`.

    Raises:
        InterpError: a missing file or key, a tensor whose shape does not match ``d_in`` /
            ``d_sae``, an unknown architecture or activation normalisation.
    """
    p = Path(path)
    if p.is_dir() and not (p / CFG).is_file() and (p / NPZ).is_file():
        p = p / NPZ
    if p.is_file() and p.suffix == ".npz":
        return _from_npz(p, hook_name, dtype)
    if not p.is_dir():
        raise InterpError(f"{p}: no such dictionary folder: pass a sae-lens folder or a .npz file")
    if not (p / CFG).is_file():
        raise _bad(p, f"has no {CFG}: a sae-lens folder holds {CFG} and {WEIGHTS}")
    if not (p / WEIGHTS).is_file():
        raise _bad(p, f"has no {WEIGHTS}: a sae-lens folder holds {CFG} and {WEIGHTS}")
    cfg = _read_cfg(p)
    arch, k = _architecture(cfg, p)
    d_in, d_sae = _key(cfg, "d_in", p, int), _key(cfg, "d_sae", p, int)
    norm = cfg.get("normalize_activations", "none")
    norm = {None: "none", False: "none", True: "expected_average_only_in"}.get(norm, norm)
    if norm not in IDENTITY_NORMS:
        raise _bad(
            p / CFG,
            f"'normalize_activations' is {norm!r}: only {' / '.join(IDENTITY_NORMS)} (no "
            "change at inference) are supported; fold the normalisation into the weights",
        )
    if cfg.get("reshape_activations", "none") not in ("none", "hook_z"):
        raise _bad(p / CFG, f"'reshape_activations' {cfg['reshape_activations']!r} is unknown")
    file_dtype = cfg.get("dtype", "float32")
    if dtype is None and str(file_dtype).removeprefix("torch.") not in DTYPES:
        raise _bad(p / CFG, f"'dtype' {file_dtype!r} is unknown: use one of {sorted(DTYPES)}")
    dtype = dtype or DTYPES[str(file_dtype).removeprefix("torch.")]
    tensors = _tensors(_load_safetensors(p / WEIGHTS), p / WEIGHTS, arch)
    _check_widths(tensors, d_in, d_sae, p / WEIGHTS)
    tensors = {key: t.to(torch.float64) for key, t in tensors.items()}
    if arch == "topk" and cfg.get("rescale_acts_by_decoder_norm", False):
        norms = tensors["W_dec"].norm(dim=-1)  # [d_sae]; folded: same activations
        tensors["W_enc"], tensors["b_enc"] = tensors["W_enc"] * norms, tensors["b_enc"] * norms
        tensors["W_dec"] = tensors["W_dec"] / norms[:, None]
    return Dictionary(
        *(tensors[key].to(dtype) for key in ("W_enc", "b_enc", "W_dec", "b_dec")),
        architecture=arch,
        hook_name=hook_name if hook_name is not None else _hook_name(cfg),
        k=k,
        threshold=tensors["threshold"].to(dtype) if arch == "jumprelu" else None,
        apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
        metadata=dict(cfg.get("metadata") or {}),
    )


def _from_npz(file: Path, hook_name: str | None, dtype: torch.dtype | None) -> Dictionary:
    if hook_name is None:
        raise _bad(
            file, "does not name its hook: pass hook_name= (e.g. 'blocks.12.hook_resid_post')"
        )
    tensors = _tensors(_load_npz(file), file, "jumprelu")
    if tensors["W_enc"].ndim != 2:
        raise _bad(
            file, f"'W_enc' has shape {list(tensors['W_enc'].shape)}: it must be [d_in, d_sae]"
        )
    d_in, d_sae = tensors["W_enc"].shape
    _check_widths(tensors, int(d_in), int(d_sae), file)
    dtype = dtype or torch.float32
    return Dictionary(
        *(tensors[key].to(dtype) for key in ("W_enc", "b_enc", "W_dec", "b_dec")),
        architecture="jumprelu",
        hook_name=hook_name,
        threshold=tensors["threshold"].to(dtype),
        apply_b_dec_to_input=False,  # Gemma Scope encodes x itself
        metadata={"source": "gemma-scope params.npz"},
    )

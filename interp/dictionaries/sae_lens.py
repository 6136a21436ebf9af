"""The sae-lens folder layout: its file and key names, and writing a dictionary in it.

Reading (sae-lens folders of every 6.x and older layout, and Gemma Scope's ``params.npz``)
is :mod:`interp.dictionaries.files`; this module writes what sae-lens 6.x reads as its
own: ``cfg.json`` and ``sae_weights.safetensors``, both together or neither. It needs
nothing of :class:`~interp.dictionaries.Dictionary` but its fields, so the class can save
itself (:meth:`~interp.dictionaries.Dictionary.save`) without an import circle.

Example:
    >>> from interp.dictionaries import Dictionary
    >>> D = Dictionary.random(d_in=4, d_sae=8, architecture="topk", k=2, hook_name="h")
    >>> cfg = dictionary_config(D)
    >>> cfg["architecture"], cfg["k"], cfg["metadata"]["hook_name"]
    ('topk', 2, 'h')
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from interp.core.errors import InterpError
from interp.dictionaries.inputs import check_finite_weight, check_path
from interp.outputs.files import check_output_dir, write_files

if TYPE_CHECKING:  # pragma: no cover - typing only: dictionary.py imports this module
    from interp.dictionaries.dictionary import Dictionary

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"
NPZ = "params.npz"
SAE_LENS_NAMES = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}
SAE_LENS_VERSION = "6.0.0"  # the cfg.json layout written: sae-lens 6.x reads it as its own
TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")
UNSAVED = (
    "the weights were changed since the dictionary was made (a diverged training step, an "
    "edit); nothing was written: retrain it, or reload the saved copy"
)


def dictionary_config(D: Dictionary) -> dict[str, Any]:
    """The ``cfg.json`` sae-lens 6.x writes for a dictionary like ``D``.

    Args:
        D: the dictionary.

    Returns:
        A JSON-ready dict.
    """
    meta = {"sae_lens_version": SAE_LENS_VERSION, "sae_lens_training_version": SAE_LENS_VERSION}
    meta.update(D.metadata)
    meta["hook_name"] = D.hook_name
    cfg: dict[str, Any] = {
        "architecture": SAE_LENS_NAMES[D.architecture],
        "d_in": D.d_in,
        "d_sae": D.d_sae,
        "dtype": str(D.dtype).removeprefix("torch."),
        "device": "cpu",
        "apply_b_dec_to_input": D.apply_b_dec_to_input,
        "normalize_activations": "none",
        "reshape_activations": "hook_z" if D.hook_name.endswith("hook_z") else "none",
        "metadata": meta,
    }
    if D.architecture == "topk":
        cfg.update(k=D.k, rescale_acts_by_decoder_norm=False)
    return cfg


def save_dictionary(D: Dictionary, path: str | os.PathLike[str]) -> Path:
    """Write ``D`` in the sae-lens layout, both files together or neither.

    Args:
        D: the dictionary.
        path: the folder (created if missing; other files in it are kept).

    Returns:
        The folder.

    Raises:
        InterpError: not a dictionary; a path that is not a str / ``os.PathLike``; a
            tensor holding NaN or infinite values (changed since the dictionary was made,
            e.g. by a diverged training step; nothing is written); metadata that JSON
            cannot hold; a destination that cannot be written.
    """
    from safetensors.torch import save_file

    names = ["W_enc", "b_enc", "W_dec", "b_dec"] + (
        ["threshold"] * (getattr(D, "architecture", None) == "jumprelu")
    )
    if not all(isinstance(getattr(D, n, None), torch.Tensor) for n in names):
        raise InterpError(
            f"save_dictionary needs a Dictionary, got {type(D).__name__}: make one with "
            "interp.dictionaries.Dictionary(...) or load_dictionary(path)"
        )
    for n in names:
        check_finite_weight(getattr(D, n), n, fix=UNSAVED)
    try:
        text = json.dumps(dictionary_config(D), indent=1) + "\n"
    except (TypeError, ValueError) as e:
        raise InterpError(
            f"the dictionary's metadata cannot be written to {CFG} ({e}): keep only strings, "
            "numbers, lists and dicts in D.metadata"
        ) from None
    out = check_output_dir(check_path(path, "dictionary folder"), "dictionary folder")
    out.mkdir(parents=True, exist_ok=True)
    state = {n: getattr(D, n).detach().cpu().contiguous() for n in names}

    def weights(f: Path) -> None:
        save_file(state, str(f))
        os.chmod(f, 0o666 & ~umask())  # safetensors writes 0600; give it cfg.json's mode

    write_files({out / WEIGHTS: weights, out / CFG: lambda f: f.write_text(text)})
    return out


def umask() -> int:
    """The process umask (read by setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask

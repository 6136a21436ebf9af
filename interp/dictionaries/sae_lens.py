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

from interp.outputs.files import check_output_dir, write_files

if TYPE_CHECKING:  # pragma: no cover - typing only: dictionary.py imports this module
    from interp.dictionaries.dictionary import Dictionary

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"
NPZ = "params.npz"
SAE_LENS_NAMES = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}
SAE_LENS_VERSION = "6.0.0"  # the cfg.json layout written: sae-lens 6.x reads it as its own
TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")


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
        InterpError: a destination that cannot be written.
    """
    from safetensors.torch import save_file

    out = check_output_dir(path, "dictionary folder")
    out.mkdir(parents=True, exist_ok=True)
    names = ["W_enc", "b_enc", "W_dec", "b_dec"] + (["threshold"] * (D.architecture == "jumprelu"))
    state = {n: getattr(D, n).detach().cpu().contiguous() for n in names}
    text = json.dumps(dictionary_config(D), indent=1) + "\n"
    write_files(
        {
            out / WEIGHTS: lambda f: save_file(state, str(f)),
            out / CFG: lambda f: f.write_text(text),
        }
    )
    return out

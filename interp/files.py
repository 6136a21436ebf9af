"""Writing files safely: check the destination before any work, write atomically.

Two promises, kept by every writer in `interp`:

* **Checked before work.** :func:`check_output_file` and :func:`check_output_dir`
  fail at once, with one clear message, for a destination that cannot be
  written (under a file, a folder where a file should go, no permission),
  so a long computation never ends in a ``PermissionError``.
* **Atomic.** A file is written to a temporary sibling and renamed onto its
  target (:func:`atomic_path`); a lab's folder of outputs is built as a
  temporary sibling folder and swapped in at the end (:func:`atomic_dir`).
  An interrupted run therefore leaves either the previous complete output or
  the complete new one, never a mixture.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_text(d / "a.txt", "hello").read_text()
    'hello'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from interp.errors import InterpError

# Written into every lab output folder; a folder holding it may be replaced by a new run.
LAB_MARKER = "interp-lab.json"


def _first_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_writable(folder: Path, what: str, target: Path) -> None:
    """Create and remove a temporary file in ``folder`` (root ignores mode bits, so ask the OS)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".interp-probe-", dir=folder)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InterpError(
            f"cannot write {what} {str(target)!r}: {str(folder)!r} is not writable ({reason}); "
            "choose another location"
        ) from None
    os.close(fd)
    os.unlink(name)


def check_output_dir(path: str | os.PathLike[str], what: str = "--out") -> Path:
    """Check that ``path`` can become (or already is) a writable folder; create nothing.

    Raises:
        InterpError: if ``path`` is a file, lies under a file, or its nearest
            existing ancestor is not writable.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InterpError(f"{what} {str(p)!r} is a file; pass a folder")
    base = _first_existing(p.absolute())
    if not base.is_dir():
        raise InterpError(f"{what} {str(p)!r} lies under the file {str(base)!r}; pass a folder")
    _probe_writable(base, what, p)
    return p


def check_output_file(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Check that ``path`` can be written as a file: its folder exists and is writable.

    Raises:
        InterpError: if ``path`` is a folder, its folder does not exist or is a
            file, or the folder is not writable.
    """
    p = Path(path)
    if p.is_dir():
        raise InterpError(f"{what} {str(p)!r} is a folder; pass a file path")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InterpError(
            f"cannot write {str(p)!r}: folder {str(parent)!r} does not exist; "
            "create it first or choose another path"
        )
    if not parent.is_dir():
        raise InterpError(f"cannot write {str(p)!r}: {str(parent)!r} is a file, not a folder")
    _probe_writable(parent, what, p)
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "table.csv"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("a,b")
        >>> target.read_text()
        'a,b'

    Raises:
        InterpError: if the target's folder does not exist or is not writable.
    """
    target = check_output_file(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file normal permissions
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically and return the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_with(path: str | os.PathLike[str], writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` and atomically move the result onto ``path``."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks (checkpoints and caches are verified by it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def check_replaceable(out: Path, what: str = "--out") -> None:
    """Refuse to replace a non-empty folder that holds no earlier `interp` lab output.

    A lab owns its output folder and swaps in a new one at the end; a folder of
    the user's own files must never be swapped away.

    Raises:
        InterpError: for such a folder.
    """
    if out.is_dir() and any(out.iterdir()) and not (out / LAB_MARKER).is_file():
        raise InterpError(
            f"{what} {str(out)!r} is not empty and holds no earlier interp lab output; "
            "pass a new or empty folder (a lab replaces its whole output folder)"
        )


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Hold Ctrl-C for the few system calls that must run together (the folder swap)."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX / not main
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str], *, marker: dict | None = None) -> Iterator[Path]:
    """Yield an empty temporary sibling folder; on success swap it in as ``path``.

    The previous contents of ``path`` (an earlier run's output) survive until
    the new folder is complete; the swap itself (two renames) runs with
    Ctrl-C held. On failure the temporary folder and any parent folders
    created for it are removed, so a failed run leaves nothing behind. A
    marker file (:data:`LAB_MARKER`) is written into the new folder.

    Raises:
        InterpError: as :func:`check_output_dir` and :func:`check_replaceable`.
    """
    out = check_output_dir(path)
    check_replaceable(out)
    absolute = out.absolute()
    created = []
    parent = absolute.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    tmp: Path | None = None
    try:
        absolute.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{absolute.name}.", suffix=".tmp", dir=absolute.parent)
        )
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        (tmp / LAB_MARKER).write_text(json.dumps(marker or {}, indent=1) + "\n")
        old = None
        with _no_interrupt():
            if absolute.exists():
                old = absolute.parent / f".{absolute.name}.old-{os.getpid()}"
                os.rename(absolute, old)
            os.rename(tmp, absolute)
            tmp = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for d in created:  # innermost first
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def _umask() -> int:
    """The process umask (read by setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask

"""Writing files safely: check the destination before any work, write atomically.

Two promises, kept by every writer in `interp`:

* **Checked before work.** :func:`check_output_file` and :func:`check_output_dir`
  fail at once, with one clear message, for a destination that cannot be
  written (under a file, a folder where a file should go, no permission),
  so a long computation never ends in a ``PermissionError``.
* **Atomic.** A file is written to a temporary sibling and renamed onto its
  target (:func:`atomic_path`); a lab's folder of outputs is built as a
  temporary sibling folder and swapped in at the end (:func:`atomic_dir`);
  several files that belong together (a table, its CSV sidecar, a figure, a
  circuit) are written into temporary sibling folders and moved onto their
  targets together at the end (:func:`write_files`, :func:`atomic_files`).
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
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from interp.core.errors import InterpError

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
        if publishes() or _staged(target):
            os.replace(tmp, target)
        else:  # another rank of a process group: rank 0 writes the one copy
            tmp.unlink()
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


@contextlib.contextmanager
def atomic_files(*paths: str | os.PathLike[str]) -> Iterator[list[Path]]:
    """Yield a staging path for each of ``paths``; on success move them all onto their targets.

    Each staging path has its target's file name, inside a temporary folder
    beside the target (one per target folder), so a writer that also writes a
    sidecar next to its file (a CSV table's ``<stem>.meta.json``) writes it
    into the staging folder too: every file that appears there is moved onto
    the same name in the target's folder. Nothing is visible until everything
    is written; then the files are moved in one go with Ctrl-C held, the old
    ones kept until every new one is in place (and put back if a move fails).
    An interrupted or failed run therefore leaves every old file as it was, or
    (after the moves) every new one, and never a temporary file.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> with atomic_files(d / "a.txt", d / "b.txt") as (a, b):
        ...     _ = a.write_text("1"), b.write_text("2")
        >>> sorted(p.name for p in d.iterdir())
        ['a.txt', 'b.txt']

    Raises:
        InterpError: for a target that cannot be written (:func:`check_output_file`),
            or the same target named twice.
    """
    targets = [check_output_file(p).absolute() for p in paths]
    seen: dict[str, Path] = {}
    for given, t in zip(paths, targets):
        key = os.path.realpath(t)
        if key in seen:
            raise InterpError(
                f"{str(seen[key])!r} and {str(given)!r} are the same file; give each output "
                "its own path"
            )
        seen[key] = Path(given)
    stages: dict[Path, Path] = {}
    try:
        for t in targets:
            if t.parent not in stages:
                stage = Path(tempfile.mkdtemp(prefix=".interp-write-", suffix=".tmp", dir=t.parent))
                os.chmod(stage, 0o777 & ~_umask())
                stages[t.parent] = stage
        yield [stages[t.parent] / t.name for t in targets]
        moves = [
            (f, folder / f.name)
            for folder, stage in stages.items()
            for f in sorted(stage.iterdir())
            if not f.name.startswith(".interp-old-")
        ]
        if publishes():  # another rank of a process group writes nothing
            _move_all(moves)
    finally:
        for stage in stages.values():
            shutil.rmtree(stage, ignore_errors=True)


def _keep_old(target: Path, backup: Path) -> bool:
    """A copy of ``target`` at ``backup`` (a hard link when the file system allows it)."""
    if not os.path.lexists(target):
        return False
    if target.is_dir():
        raise InterpError(f"cannot write {str(target)!r}: it is a folder; move it away first")
    try:
        os.link(target, backup, follow_symlinks=False)
    except OSError:
        shutil.copy2(target, backup, follow_symlinks=False)
    return True


def _move_all(moves: list[tuple[Path, Path]]) -> None:
    """Move each staged file onto its target, all or none (the old files are put back)."""
    done: list[tuple[Path, Path | None]] = []
    with _no_interrupt():
        try:
            for src, dst in moves:
                backup = src.with_name(f".interp-old-{src.name}")
                kept = _keep_old(dst, backup)
                os.replace(src, dst)
                done.append((dst, backup if kept else None))
        except BaseException:
            for dst, backup in reversed(done):
                with contextlib.suppress(OSError):
                    if backup is not None:
                        os.replace(backup, dst)
                    else:
                        dst.unlink()
            raise


def write_files(
    writers: Mapping[str | os.PathLike[str], Callable[[Path], object]],
) -> list[Path]:
    """Write several files all or nothing: ``writers`` maps each target to ``writer(path)``.

    Each writer writes to a staging path (:func:`atomic_files`); only when every
    writer has finished are the files moved onto their targets, together.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> [p.name for p in write_files({d / "x.txt": lambda p: p.write_text("x")})]
        ['x.txt']

    Raises:
        InterpError: as :func:`atomic_files`, or as a writer raises.
    """
    targets = list(writers)
    with atomic_files(*targets) as staged:
        for path, writer in zip(staged, writers.values()):
            writer(path)
    return [Path(t) for t in targets]


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
        if not publishes():  # another rank of a process group: rank 0 writes the one copy
            raise _NotPublished
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
    except BaseException as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for d in created:  # innermost first
            with contextlib.suppress(OSError):
                d.rmdir()
        if not isinstance(exc, _NotPublished):
            raise


def _staged(target: Path) -> bool:
    """Whether ``target`` lies in a staging folder of :func:`atomic_files` or
    :func:`atomic_dir` (published, or not, as that folder is)."""
    names = (p.name for p in target.absolute().parents)
    return any(n.startswith(".") and n.endswith(".tmp") for n in names)


class _NotPublished(Exception):
    """Raised inside :func:`atomic_dir` on a rank that does not write (caught there)."""


def publishes() -> bool:
    """Whether this process writes outputs: the only process, or rank 0 of an initialised
    ``torch.distributed`` group (the others compute alike and write nothing).

    Example:
        >>> publishes()
        True
    """
    dist = sys.modules.get("torch.distributed")  # never imports torch for this
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return True
    return int(dist.get_rank()) == 0


def _umask() -> int:
    """The process umask (read by setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask

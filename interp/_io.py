"""Atomic file writes: write to a temporary file beside the target, then rename.

An interrupted run (Ctrl-C, crash, full disk) therefore never leaves a
half-written report, table or checkpoint at the target path: either the old
file is still there, or the complete new one is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from interp.errors import InterpError


def check_out_dir(path: str | os.PathLike[str], what: str = "--out") -> Path:
    """Return ``path`` as a Path, raising if it exists and is not a directory (nothing created)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InterpError(f"{what} {str(p)!r} is a file; pass a directory")
    return p


def check_parent(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` as a Path, raising if its directory does not exist."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InterpError(
            f"cannot write {str(p)!r}: directory {str(parent)!r} does not exist; "
            "create it first or choose another path"
        )
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename it onto ``path`` on success.

    Example:
        >>> with atomic_path("table.csv") as tmp:  # doctest: +SKIP
        ...     df.to_csv(tmp)

    Raises:
        InterpError: if the target directory does not exist.
    """
    target = check_parent(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file normal permissions
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

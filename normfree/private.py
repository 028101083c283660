"""Files and folders only this user can read: the one place that decides their modes.

The SQLite databases hold token hashes and private error texts, the kernel cache holds code this
process loads and runs, and the embedded Ray cluster's session folder holds its sockets: another
local user must not read, replace or connect to any of them. With the usual umask (022) Python
creates files 0644 and folders 0755, and Ray makes its ``sockets`` folder 0777. So every place
that creates one of these goes through here:

- :func:`private_dir` creates the missing folders of a path 0700 (folders that already exist are
  left alone: a database under ``/tmp`` must not make ``/tmp`` private);
- :func:`private_file` creates a file 0600 before anything else does (SQLite then gives the
  database's ``-wal`` and ``-shm`` files the database's own mode);
- :func:`private_umask` sets the umask to 077 while a library that creates its own files and
  folders (Ray) starts, so they and the processes it spawns create them private.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
PRIVATE_UMASK = 0o077


def private_dir(path: Path | str) -> Path:
    """``path`` as a folder; the folders created here (it and missing parents) are 0700."""
    path = Path(path).expanduser()
    missing = []
    walk = path
    while not walk.exists() and walk != walk.parent:
        missing.append(walk)
        walk = walk.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            folder.mkdir(mode=DIR_MODE)
            os.chmod(folder, DIR_MODE)  # mkdir's mode passes through the umask
    return path


def private_file(path: Path | str) -> Path:
    """Create ``path`` empty and 0600 unless it exists (an existing file keeps its mode)."""
    path = Path(path).expanduser()
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return path
    os.close(fd)
    os.chmod(path, FILE_MODE)
    return path


def make_private(path: Path | str) -> None:
    """Set a file we just wrote (a temporary about to replace a cache entry) to 0600."""
    os.chmod(path, FILE_MODE)


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Umask 077 inside the block (process-wide: files other threads create meanwhile are
    private too, which is never wrong here), restored after."""
    old = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(old)


__all__ = ["DIR_MODE", "FILE_MODE", "make_private", "private_dir", "private_file", "private_umask"]

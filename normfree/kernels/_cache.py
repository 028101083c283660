"""The kernel cache: generated sources as real ``.py`` files, imported from disk.

Why files: Triton reads a kernel's source with ``inspect`` (it must live in a file), and a file
per candidate keeps the generated code inspectable. The key is a hash of
``(kind, srepr(f), srepr(f'), GENERATOR_VERSION)``: the exact expressions printed, not only the
canonical name, so a changed derivative choice can never reuse a stale kernel. The input dtype is
not part of the file key because the source does not depend on it: dtype is a Triton
specialisation (one binary per dtype, kept in Triton's own cache), and the torch code is
dtype-generic.

Writes are atomic (a temporary file in the same directory, then ``os.replace``) under a
``filelock`` lock, so concurrent worker processes generate a file at most once and never import a
half-written one. Within a process, a second request returns the same module object.
The folder is the caller's (:class:`._options.KernelOptions`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from filelock import FileLock

from normfree.kernels._codegen import GENERATOR_VERSION
from normfree.private import FILE_MODE, make_private, private_dir

_modules: dict[Path, ModuleType] = {}
_lock = threading.Lock()


def cache_key(kind: str, expr_repr: str, derivative_repr: str) -> str:
    text = "\n".join([kind, expr_repr, derivative_repr, GENERATOR_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _slug(name: str) -> str:
    keep = "".join(c if c.isalnum() else "_" for c in name)[:40].strip("_")
    return keep or "candidate"


def create_once(path: Path, write: Callable[[Path], None]) -> None:
    """Make ``path`` exactly once across threads and processes, never visible half-written.

    ``write`` fills a temporary file in the same directory, which then replaces ``path``
    atomically, under a file lock so that concurrent processes create it at most once (the
    generated ``.py`` modules here, the compiled ``.so`` of :mod:`._native`). If ``write``
    raises, the temporary file is removed and nothing is created.
    """
    if path.exists():
        return
    private_dir(path.parent)  # code this process loads: this user's only (normfree.private)
    with FileLock(str(path) + ".lock", mode=FILE_MODE):
        if path.exists():  # another process made it meanwhile
            return
        fd, name = tempfile.mkstemp(dir=path.parent, suffix=path.suffix + ".tmp")
        os.close(fd)
        tmp = Path(name)
        try:
            write(tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        make_private(tmp)  # a compiler writes its own output with its own mode
        os.replace(tmp, path)


def load_generated(
    directory: Path, kind: str, name: str, key: str, make_source: Callable[[], str]
) -> ModuleType:
    """Return the module for ``key`` in ``directory``, generating its file on first use."""
    path = directory / f"{kind}_{_slug(name)}_{key}.py"
    with _lock:
        module = _modules.get(path)
        if module is not None:
            return module
        create_once(path, lambda tmp: tmp.write_text(make_source()))
        module_name = f"normfree_generated_{kind}_{key}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        _modules[path] = module
        return module

"""The trainer's code version: with a trial key, what decides whether a result may be reused.

A trial key (``TrialConfig.key()``) names the configuration: proxy, operator, seed, budget,
data, optimiser. The same key trained by different code may give a different result (a changed
preset, data generator, kernel or training loop), so a finished trial is reused by a later
study only when it was produced under the same version (``storage.trials.reuse_finished``).

The version is a digest of every normfree source file the trainer runs: ``workers/trainer.py``
and the normfree modules it imports, transitively, wherever the import sits (the preset
registry, the models, the data, the kernels and their printers, the primitives). Unlike the
kernel cache's digest (``kernels._codegen.generator_sources``), package ``__init__`` files are
followed: ``workers/proxies/__init__.py`` *is* the preset registry. Any edit to those files,
a comment included, gives a new version: a study then trains again rather than trust a result
the current code might not reproduce. Which device ran a trial is not part of it (nor of the
key): a GPU's last bits differ from a CPU's, as two CPUs' may.

The function analyses a server keeps across restarts (``storage.analyses``) are versioned by
:func:`catalog_version`: the ``search_space`` package's sources with the sympy and numpy
versions, which is all they are computed from. Not by the import closure as the trainer is:
``search_space`` imports the package root, whose ``__init__`` reaches every module, so any edit
anywhere would throw the stored analyses away.

Pure Python (``ast`` and ``hashlib``): the planner imports it without torch.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the normfree package
TRAINER = _PACKAGE_ROOT / "workers" / "trainer.py"
SEARCH_SPACE = _PACKAGE_ROOT / "search_space"


def _module_files(name: str) -> list[Path]:
    """The source files module ``name`` of this package stands for: the module, or a package's
    ``__init__`` (empty: not a normfree module, or a name inside one)."""
    parts = name.split(".")
    if parts[0] != "normfree":
        return []
    base = _PACKAGE_ROOT.joinpath(*parts[1:])
    return [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]


def trainer_sources(start: Path = TRAINER) -> list[Path]:
    """Every normfree source file ``start`` runs, transitively (itself included), sorted."""
    seen: dict[Path, None] = {}
    todo = [start.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = None
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # ``from normfree.a import b``: b may be a submodule or a name in a
                names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            for name in names:
                todo += _module_files(name)
    return sorted(seen)


def _digest(paths: list[Path], *extra: str) -> str:
    """16 hex digits of ``extra`` and each file's path and bytes."""
    digest = hashlib.sha256()
    for text in extra:
        digest.update(text.encode() + b"\0")
    for path in paths:
        digest.update(path.relative_to(_PACKAGE_ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def trainer_version() -> str:
    """The digest of :func:`trainer_sources` (16 hex digits), computed once per process."""
    return _digest(trainer_sources())


@functools.cache
def catalog_version() -> str:
    """The catalog's code version: what a stored function analysis must have been made under
    (16 hex digits, once per process)."""
    from importlib.metadata import version

    pins = [f"{dist}=={version(dist)}" for dist in ("sympy", "numpy")]
    return _digest(sorted(SEARCH_SPACE.rglob("*.py")), *pins)


__all__ = ["catalog_version", "trainer_sources", "trainer_version"]

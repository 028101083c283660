"""A scratch copy of the checkout, for tests that edit normfree's own source.

The drills (``test_drills.py``) and the kernel cache's stale-row test change files as a
maintainer would and run the result in child processes whose ``PYTHONPATH`` puts the copy ahead
of the installed (editable) package, with private caches so nothing they build reaches this
checkout or the user's home.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("normfree", "tests", "docs", "pyproject.toml")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def scratch_copy(dest: Path) -> Path:
    """A copy of the package, the tests and the docs under ``dest`` (returned)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=_IGNORE)
        else:
            shutil.copy2(src, dest / name)
    return dest


def edit(root: Path, path: str, change: Callable[[str], str]) -> None:
    """Rewrite ``root/path`` with ``change``; a change that changes nothing is a broken drill."""
    file = root / path
    before = file.read_text() if file.exists() else ""  # a new file (a kind's module)
    after = change(before)
    assert after != before, f"the edit of {path} did not apply"
    file.write_text(after)


def run(
    root: Path, args: list[str], timeout: float = 600, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python *args`` in ``root`` with ``root`` first on the import path and private caches.
    Triton's interpreter only when ``env`` asks for it: the kernel tests' setup turns it on in
    this process, and an interpreter process cannot compile for a GPU."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NORMFREE_") and k != "TRITON_INTERPRET"
    }
    full.update({
        "PYTHONPATH": str(root),
        "NORMFREE_KERNEL_CACHE": str(root / ".cache" / "kernels"),
        "NORMFREE_CHECKER": "false",
        "PYTHONDONTWRITEBYTECODE": "1",
    })  # fmt: skip
    full.update(env or {})
    return subprocess.run(
        [sys.executable, *args], cwd=root, env=full, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def insert_before(anchor: str, text: str) -> Callable[[str], str]:
    """An edit that puts ``text`` right before the one occurrence of ``anchor``."""

    def change(source: str) -> str:
        assert source.count(anchor) == 1, f"anchor {anchor!r} is not unique"
        return source.replace(anchor, text + anchor)

    return change

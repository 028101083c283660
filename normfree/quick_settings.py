"""Three settings for the quick CLI commands, read without importing pydantic.

:mod:`normfree.settings` is the one definition of every setting (name, default, type, range) and
the one reader of the environment, with this exception: importing it costs ~0.2 s of CPU on the
AMD EPYC (pydantic and pydantic-settings), close to half of the 0.5 s budget of ``candidates
check/show/list``, which need only the cache folder and how to reach the checker. This module
reads those three values from the same variables (``NORMFREE_KERNEL_CACHE``,
``NORMFREE_CHECKER``, ``NORMFREE_CHECKER_TIMEOUT_SECONDS``; names case-insensitive, as
pydantic-settings reads them) and parses only the plain forms whose meaning is certain: a
non-empty path, one of pydantic's true/false words, a positive decimal number. Any other value
(or the same variable set twice in different case) defers to :func:`settings.get_settings`, so
the quick path never reads a value differently from :class:`~normfree.settings.Settings` and
never accepts one it refuses. ``tests/test_quick_settings.py`` compares the two, defaults
included.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}
_POSITIVE = re.compile(r"[0-9]+(\.[0-9]*)?")

# The defaults of Settings (checked equal by the tests).
DEFAULTS: dict[str, Any] = {
    "kernel_cache": Path.home() / ".cache" / "normfree" / "kernels",
    "checker": True,
    "checker_timeout_seconds": 60.0,
}


def _bool(text: str) -> bool | None:
    low = text.lower()
    return True if low in _TRUE else False if low in _FALSE else None


def _positive(text: str) -> float | None:
    value = float(text) if _POSITIVE.fullmatch(text) else 0.0
    return value if value > 0 else None


def _path(text: str) -> Path | None:
    return Path(text) if text.strip() == text and text else None


_PARSE = {"kernel_cache": _path, "checker": _bool, "checker_timeout_seconds": _positive}


def value(field: str) -> Any:
    """The setting ``field`` (one of :data:`DEFAULTS`), as ``get_settings().<field>`` reads it."""
    name = f"normfree_{field}"
    found = [v for k, v in os.environ.items() if k.lower() == name]
    if not found:
        return DEFAULTS[field]
    parsed = _PARSE[field](found[0]) if len(found) == 1 else None
    if parsed is not None:
        return parsed
    from normfree.settings import get_settings  # an unusual value: pydantic decides

    return getattr(get_settings(), field)


def cache_dir() -> Path:
    """The folder of the catalog index, stored checks and the checker's socket: the kernel
    cache's parent."""
    return Path(value("kernel_cache")).parent


__all__ = ["DEFAULTS", "cache_dir", "value"]

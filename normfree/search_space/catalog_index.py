"""The catalog as data, cached on disk: what quick commands read without building a candidate.

Building the catalog (parse, exact derivative, domain checks, then properties) costs a second
or more of sympy per process, and the CLI's ``candidates list/show/check`` only need its results:
each entry's public dict, its one-line summary, its canonical form and its probe values (for
duplicate checks). They are computed once and stored as JSON beside the kernel cache, keyed by
a hash of this package's source and of the numeric libraries' versions, so any change to the
catalog, the parser or the properties rebuilds the index. Reading it imports neither sympy nor
scipy. A cache that cannot be written (read-only home) only costs the rebuild.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from normfree.search_space.candidate import Candidate

_PACKAGE = Path(__file__).resolve().parent
_LIBRARIES = ("sympy", "numpy", "scipy", "mpmath")


@dataclass(frozen=True)
class IndexedEntry:
    """One catalog entry as the quick commands show it."""

    name: str
    group: str
    data: dict[str, Any]  # Candidate.to_dict(): what ``--json`` prints
    summary: str  # Properties.summary()
    call: str  # Lineage.call
    canonical: str
    values: tuple[float, ...]  # f on dedup.PROBE_GRID


def index_key() -> str:
    """A hash of everything the entries are computed from: this package's code and libraries."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for lib in _LIBRARIES:
        try:
            h.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=none".encode())
    return h.hexdigest()[:16]


def _cache_file(key: str) -> Path:
    """Beside the kernel cache (``NORMFREE_KERNEL_CACHE``'s parent), one file per index key."""
    from normfree.settings import get_settings

    return Path(get_settings().kernel_cache).parent / f"catalog-index-{key}.json"


def _build() -> list[IndexedEntry]:
    from normfree.search_space import catalog
    from normfree.search_space.dedup import probe_values

    out = []
    for c in catalog.all():
        out.append(
            IndexedEntry(
                name=c.name,
                group=c.group,
                data=c.to_dict(),
                summary=c.properties.summary(),
                call=c.lineage.call,
                canonical=c.canonical,
                values=tuple(float(v) for v in probe_values(c.expr)),
            )
        )
    return out


@cache
def entries() -> tuple[IndexedEntry, ...]:
    """Every catalog entry in table order: from the cache file, else built (and stored)."""
    key = index_key()
    path = _cache_file(key)
    try:
        rows = json.loads(path.read_text())
        return tuple(IndexedEntry(**{**r, "values": tuple(r["values"])}) for r in rows)
    except (OSError, ValueError, TypeError, KeyError):
        pass
    built = _build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([e.__dict__ for e in built]))  # NaN/inf: JSON5-style, read back
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass
    return tuple(built)


def get(name: str) -> IndexedEntry | None:
    """The entry ``name``, or None when it is not a catalog formula."""
    return next((e for e in entries() if e.name == name), None)


def duplicate_of(candidate: Candidate) -> str | None:
    """The first catalog entry that is the same function as ``candidate`` (its name), as
    ``dedup.find_duplicate(candidate, catalog.all())`` decides for a candidate built outside
    the catalog, without building the catalog."""
    import numpy as np

    from normfree.search_space.dedup import probe_values, same_values

    mine: np.ndarray | None = None
    for e in entries():
        if e.canonical == candidate.canonical:
            return e.name
        if mine is None:
            mine = probe_values(candidate.expr)
        if same_values(mine, np.asarray(e.values, dtype=np.float64)):
            return e.name
    return None

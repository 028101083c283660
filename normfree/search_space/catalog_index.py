"""The catalog as data, cached on disk: what quick commands read without building a candidate.

Building the catalog (parse, exact derivative, domain checks, then properties) costs a second
or more of sympy per process, and the CLI's ``candidates list/show/check`` only need its results:
each entry's public dict, its one-line summary, its canonical form and its probe values (for
duplicate checks). They are computed once and stored as JSON beside the kernel cache, keyed by
a hash of this package's source and of the numeric libraries' versions, so any change to the
catalog, the parser or the properties rebuilds the index. Reading it imports neither sympy nor
scipy. A cache that cannot be written (read-only home) only costs the rebuild. The same folder
and key hold the results of checked user formulas (:mod:`.checks`), read and written through
the same two helpers.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normfree.private import private_file

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


@cache
def index_key() -> str:
    """A hash of everything the entries are computed from: this package's code and libraries."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for lib in _LIBRARIES:
        h.update(f"{lib}={_version(lib)}".encode())
    return h.hexdigest()[:16]


def _version(lib: str) -> str:
    """``lib``'s installed version, without importing it: the name of the one ``.dist-info``
    folder beside its package (importing importlib.metadata alone costs a quick command
    25-40 ms of its 0.5 s budget), else importlib.metadata's answer (an egg, a zip, two
    dist-info folders), else ``none``."""
    import importlib.util

    spec = importlib.util.find_spec(lib)
    if spec is not None and spec.origin:
        found = list(Path(spec.origin).parent.parent.glob(f"{lib}-*.dist-info"))
        if len(found) == 1:
            return found[0].name
    from importlib import metadata

    try:
        return metadata.version(lib)
    except metadata.PackageNotFoundError:
        return "none"


def cache_dir() -> Path:
    """Where the index (and :mod:`.checks`'s results) live: the kernel cache's parent folder
    (read without pydantic: :mod:`normfree.quick_settings`)."""
    from normfree.quick_settings import cache_dir

    return cache_dir()


def _cache_file(key: str) -> Path:
    """One file per index key."""
    return cache_dir() / f"catalog-index-{key}.json"


def read_json(path: Path) -> Any:
    """What :func:`write_json` stored at ``path``, or None when it is missing or damaged."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, value: Any) -> None:
    """Store ``value`` atomically: a concurrent reader sees the old file or the whole new one.

    A cache that cannot be written (read-only home) is skipped: it only costs the recompute.
    NaN and inf are written JSON5-style, and :func:`read_json` reads them back.
    """
    try:
        tmp = private_file(path.with_suffix(f".{os.getpid()}.tmp"))
        tmp.write_text(json.dumps(value))
        tmp.replace(path)
    except OSError:
        pass


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
    path = _cache_file(index_key())
    try:
        return tuple(IndexedEntry(**{**r, "values": tuple(r["values"])}) for r in read_json(path))
    except (TypeError, KeyError):  # missing (None) or not rows of this version's entries
        pass
    built = _build()
    write_json(path, [e.__dict__ for e in built])
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

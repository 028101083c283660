"""Study kinds: one module each, one registry (``KINDS``), one contract (:class:`StudyKind`).

``get(spec.kind)`` is how the driver, the API and the CLI learn what a kind plans, accepts and
adds as trials finish; ``param_names()`` is every ``StudySpec.params`` key some kind reads (the
API refuses others as typos). Adding a kind: a module with a ``StudyKind`` subclass, registered
below, plus its name in ``specs.StudyKindName`` and its tests.
"""

from __future__ import annotations

from normfree.workers.kinds.base import CommonParams, StudyKind
from normfree.workers.kinds.generate import GenerateKind, GenerateKindParams
from normfree.workers.kinds.options import OptionsKind
from normfree.workers.kinds.property import PropertyKind, PropertyParams
from normfree.workers.kinds.search import SearchKind, SearchParams

KINDS: dict[str, StudyKind] = {}


class StudyParams(PropertyParams, SearchParams, GenerateKindParams):
    """Every kind's typed keys at once: what ``workers.cost`` checks a request's params with
    (a key is typed wherever it is defined, whatever the study's kind)."""


def register(kind: StudyKind) -> StudyKind:
    """Add a kind under its name (a duplicate name is an error: names are stored with studies)."""
    if kind.name in KINDS:
        raise ValueError(f"study kind {kind.name!r} is registered twice")
    KINDS[kind.name] = kind
    return kind


def get(name: str) -> StudyKind:
    """The kind ``name``; ValueError naming the known kinds otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown study kind {name!r}; known: {', '.join(KINDS)}") from None


def param_names() -> frozenset[str]:
    """Every ``StudySpec.params`` key some kind reads."""
    names: set[str] = set()
    for kind in KINDS.values():
        names |= kind.param_names()
    return frozenset(names)


for _kind in (PropertyKind(), OptionsKind(), SearchKind(), GenerateKind()):
    register(_kind)

__all__ = [
    "KINDS",
    "CommonParams",
    "StudyKind",
    "StudyParams",
    "get",
    "param_names",
    "register",
]

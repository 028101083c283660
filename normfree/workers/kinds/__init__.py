"""Study kinds: one module each, one registry (``KINDS``), one contract (:class:`StudyKind`).

``get(spec.kind)`` is how the driver, the API, the CLI and the pages learn what a kind plans,
accepts, adds as trials finish and reports; ``param_names()`` is every ``StudySpec.params`` key
some kind reads (the API refuses others as typos).

Every module of this package but ``base`` is a kind: its :class:`StudyKind` subclasses are
found and registered when the package is imported, so adding a kind is adding its module (and
nothing else names it: the spec's kind names, the API's schema, the CLI's ``study new`` and
``study kinds`` and the kind contract test read this registry).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from normfree.workers.kinds.base import CommonParams, StudyKind

KINDS: dict[str, StudyKind] = {}


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


def _discover() -> None:
    """Register the kinds of every module of this package (modules in name order)."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, StudyKind)
                and cls.__module__ == module.__name__
                and not inspect.isabstract(cls)
            ):
                register(cls())


def _all_params() -> type[CommonParams]:
    """One model of every kind's keys (the most derived ``Params`` of each kind as bases)."""
    models = {kind.Params for kind in KINDS.values()}
    leaves = [m for m in models if not any(o is not m and issubclass(o, m) for o in models)]
    bases = tuple(sorted(leaves, key=lambda m: m.__name__)) or (CommonParams,)
    doc = (
        "Every kind's typed keys at once: what ``workers.cost`` checks a request's params with "
        "(a key is typed wherever it is defined, whatever the study's kind)."
    )
    return type("StudyParams", bases, {"__doc__": doc, "__module__": __name__})


_discover()
StudyParams: type[CommonParams] = _all_params()

__all__ = [
    "KINDS",
    "CommonParams",
    "StudyKind",
    "StudyParams",
    "get",
    "param_names",
    "register",
]

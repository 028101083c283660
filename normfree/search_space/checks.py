"""A formula's dry run as ``candidates check`` prints it, remembered on disk per formula text.

Everything the check reports (expression, derivative, canonical form, fingerprint, properties,
the catalog entry it duplicates) is a pure function of the formula text, the name and this
package's code. Computing it costs ~0.8 s of CPU, most of it importing sympy and numpy and
taking symbolic limits; so the result is stored beside the catalog index, under the same key
(:func:`.catalog_index.index_key`: any change to the code or the numeric libraries starts a
fresh store), one small JSON file per (text, name). Checking a formula again reads that file
and imports neither sympy nor numpy. A formula not checked before is analysed by the checker
process when one can answer (:mod:`.checker`), else here.

The syntax comes first, in plain Python (:mod:`._syntax`): a malformed formula is refused
before any import or file is touched. Rejections are not stored (they are cheap or rare).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normfree.search_space import catalog_index
from normfree.search_space._syntax import parse_tree


@dataclass(frozen=True)
class Checked:
    """One checked formula: what ``--json`` prints, and the two lines people also see."""

    data: dict[str, Any]  # Candidate.to_dict() plus "duplicate_of" (a catalog name or None)
    summary: str  # Properties.summary()
    call: str  # Lineage.call


def stored_path(formula: str, name: str | None = None) -> Path:
    """The file that holds (or will hold) the result of checking ``formula`` as ``name``."""
    digest = hashlib.sha256(json.dumps([formula.strip(), name]).encode()).hexdigest()[:32]
    return catalog_index.cache_dir() / f"checks-{catalog_index.index_key()}" / f"{digest}.json"


def stored(formula: str, name: str | None = None) -> Checked | None:
    """The stored result of checking ``formula`` as ``name``, or None (not checked yet, or a
    damaged file: then it is computed again)."""
    found = catalog_index.read_json(stored_path(formula, name))
    if isinstance(found, dict):
        try:
            return Checked(**found)
        except TypeError:
            pass
    return None


def check(formula: str, name: str | None = None) -> Checked:
    """Parse and analyse ``formula`` in this process (see :func:`.candidate.parse`), or read
    the stored result. (:func:`.checker.check` asks the checker process first.)

    Raises :class:`~normfree.search_space.errors.ExpressionError` for a rejected formula.
    """
    parse_tree(formula)
    known = stored(formula, name)
    if known is not None:
        return known
    from normfree.search_space.candidate import parse

    c = parse(formula, name=name)
    result = Checked(
        data={**c.to_dict(), "duplicate_of": catalog_index.duplicate_of(c)},
        summary=c.properties.summary(),
        call=c.lineage.call,
    )
    catalog_index.write_json(stored_path(formula, name), result.__dict__)
    return result


__all__ = ["Checked", "check", "stored", "stored_path"]

"""The catalog index says what building the catalog says, and is rebuilt when its key changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from normfree.search_space import catalog, catalog_index, find_duplicate, parse


@pytest.fixture
def index_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NORMFREE_KERNEL_CACHE", str(tmp_path / "kernels"))
    from normfree.settings import get_settings

    get_settings.cache_clear()
    catalog_index.entries.cache_clear()
    yield tmp_path
    get_settings.cache_clear()
    catalog_index.entries.cache_clear()


def test_entries_match_the_built_catalog(index_dir: Path) -> None:
    built = catalog.all()
    fresh = catalog_index.entries()
    assert [e.data for e in fresh] == [c.to_dict() for c in built]
    assert [e.summary for e in fresh] == [c.properties.summary() for c in built]
    (stored,) = index_dir.glob("catalog-index-*.json")
    catalog_index.entries.cache_clear()
    again = catalog_index.entries()  # read back from the file: the same entries
    assert again == fresh
    assert catalog_index.get("erf").group == "natural" and catalog_index.get("nope") is None
    stored.write_text("not json")  # a damaged file is rebuilt, not trusted
    catalog_index.entries.cache_clear()
    assert catalog_index.entries() == fresh


@pytest.mark.parametrize(
    "formula",
    ["tanh(u)", "2*sigmoid(2*u) - 1", "erf(u)", "u/(1+abs(u))", "u/(1+u**2)", "atan(u)", "u**3"],
)
def test_duplicate_of_agrees_with_find_duplicate(index_dir: Path, formula: str) -> None:
    c = parse(formula)
    dup = find_duplicate(c, catalog.all())
    assert catalog_index.duplicate_of(c) == (dup.name if dup is not None else None)


def test_library_versions_are_read_without_importlib_metadata() -> None:
    from importlib import metadata

    for lib in ("sympy", "numpy", "scipy", "mpmath"):
        assert f"-{metadata.version(lib)}.dist-info" in catalog_index._version(lib)
    assert catalog_index._version("no_such_library_here") == "none"

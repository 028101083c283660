"""A stored check result says exactly what checking the formula again would compute."""

from __future__ import annotations

from pathlib import Path

import pytest

from normfree.search_space import ExpressionError, catalog_index, checks, parse


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(catalog_index, "cache_dir", lambda: tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("formula", "name"), [("2*sigmoid(2*u) - 1", None), ("tanh(u) + 0.1*u", "mine")]
)
def test_a_check_is_computed_once_then_read_back(store: Path, formula: str, name: str | None):
    first = checks.check(formula, name=name)
    c = parse(formula, name=name)
    assert first.data == {**c.to_dict(), "duplicate_of": catalog_index.duplicate_of(c)}
    assert (first.summary, first.call) == (c.properties.summary(), c.lineage.call)
    path = checks.stored_path(formula, name)
    assert path.is_file() and path.is_relative_to(store)
    assert checks.check(f"  {formula} ", name=name) == first  # the same text, from the file
    path.write_text('{"data": {}}')  # damaged: recomputed and stored again
    assert checks.check(formula, name=name) == first
    assert checks.check(formula, name=name) == first


def test_the_name_is_part_of_what_is_stored(store: Path) -> None:
    assert checks.stored_path("tanh(u)") != checks.stored_path("tanh(u)", "t")
    assert checks.check("tanh(u)", name="t").data["name"] == "t"
    assert checks.check("tanh(u)").data["name"] == "tanh(u)"


@pytest.mark.parametrize("formula", ["u+", "log(u)"])
def test_a_rejected_formula_is_not_stored(store: Path, formula: str) -> None:
    with pytest.raises(ExpressionError):
        checks.check(formula)
    assert not list(store.glob("checks-*/*"))

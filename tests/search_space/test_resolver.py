"""The one resolver: every door a function comes in by gives the same Candidate, and a baked
definition rebuilds it with no lookup at all."""

from __future__ import annotations

import numpy as np
import pytest

from normfree.search_space import ExpressionError, catalog, parse, resolver
from normfree.search_space.resolver import Stored

STORED = {"softsign15": "1.5*u/(1+abs(u))", "mine": "u/(1+abs(u))"}
asked: list[str] = []


def _formula(name: str) -> str | None:
    asked.append(name)
    return STORED.get(name)


LOOKUP = Stored(formula=_formula, names=lambda: list(STORED))
GRID = np.linspace(-4, 4, 81)


def _same(a, b) -> bool:
    return np.allclose(np.asarray(a(GRID), float), np.asarray(b(GRID), float))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("softsign15", "1.5*u/(1+abs(u))"),
        ("shift_h(softsign15, 0.5)", "1.5*(u+0.5)/(1+abs(u+0.5))"),
        ("flat_centre(u/(1+abs(u)), 1)", "u/(1+abs(u))"),  # checked below on |u| > 1
        ("linear_part(erf, 0.1)", "0.9*erf(u) + 0.1*u"),
        ("sign_flip(shift_h(mine, -1))", "-(u-1)/(1+abs(u-1))"),
        ("clip(softsign15, 1)", "clip(1.5*u/(1+abs(u)))"),
        ("derf", "erf(u)"),
        ("dyt", "tanh(u)"),
    ],
)
def test_every_door_resolves_to_its_function(text: str, expected: str) -> None:
    cand = resolver.resolve(text, LOOKUP)
    ref = parse(expected)
    if text.startswith("flat_centre"):
        outside = np.abs(GRID) > 1
        shifted = GRID - np.sign(GRID)
        assert np.allclose(cand(GRID)[outside], ref(shifted)[outside])
        assert np.all(cand(GRID)[~outside] == 0)
    else:
        assert _same(cand, ref)


def test_a_stored_name_keeps_its_name_and_lineage() -> None:
    cand = resolver.resolve("shift_h(softsign15, 0.5)", LOOKUP)
    assert cand.name == "shift_h(softsign15, 0.5)"
    assert cand.lineage.base == "softsign15" and cand.lineage.formula == STORED["softsign15"]
    assert [s.transform for s in cand.lineage.steps] == ["shift_h"]


def test_a_baked_definition_rebuilds_the_same_function_without_a_lookup() -> None:
    text = "flat_centre(shift_h(softsign15, 0.5), 1)"
    cand, definition = resolver.bake(text, LOOKUP)
    assert definition == "flat_centre(shift_h(1.5*u/(1+abs(u)), 0.5), 1)"
    assert resolver.definition(text, STORED) == definition  # text only: no sympy, same answer
    asked.clear()
    again = resolver.resolve(definition, name=text)  # no Stored at all
    assert asked == []
    assert again.name == text and again.canonical == cand.canonical
    assert _same(again, cand)


def test_names_the_catalog_knows_need_no_baking() -> None:
    for text in ("erf", "shift_h(erf, 0.5)", "u/(1+abs(u))", "flat_centre(u/(1+abs(u)), 1)"):
        assert resolver.bake(text, LOOKUP)[1] is None
        assert resolver.definition(text, STORED) is None


def test_catalog_resolve_takes_formulas_under_transforms_but_no_stored_names() -> None:
    assert catalog.resolve("linear_part(u/(1+abs(u)), 0.1)").name == (
        "linear_part(u/(1+abs(u)), 0.1)"
    )
    with pytest.raises(ExpressionError, match="unknown function 'softsign15'"):
        catalog.resolve("shift_h(softsign15, 0.5)")


@pytest.mark.parametrize(
    ("text", "near"),
    [
        ("tahn", "'tanh'"),
        ("erff", "'erf'"),
        ("softsing15", "'softsign15'"),
        ("shift_h(tahn, 0.5)", "'tanh'"),
        ("shfit_h(erf, 0.5)", "'shift_h'"),
        ("tahn(u)", "'tanh'"),
    ],
)
def test_unknown_names_get_the_nearest_known_ones(text: str, near: str) -> None:
    with pytest.raises(ExpressionError, match="did you mean") as err:
        resolver.resolve(text, LOOKUP)
    assert near in str(err.value)


def test_unknown_without_anything_near_says_what_is_accepted() -> None:
    with pytest.raises(ExpressionError, match="a catalog name, a stored candidate's name"):
        resolver.resolve("qqqqqqqq", LOOKUP)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("layernorm", "is a baseline"),
        ("shift_h", "is a transform"),
        ("shift_h(softsign15)", "1 parameter"),
        ("shift_h(softsign15, 0.5) * 2", "unexpected"),
        ("", "expected a function"),
        ("shift_h(, 1)", "expected a function"),
        ("x" * 1001, "too long"),
    ],
)
def test_bad_texts_are_refused_with_a_reason(text: str, fragment: str) -> None:
    with pytest.raises(ExpressionError, match=fragment):
        resolver.resolve(text, LOOKUP)


def test_clip_is_the_transform_with_two_arguments_or_a_function_name() -> None:
    assert resolver.resolve("clip(u, -2, 2)").lineage.steps == ()  # the formula's clip
    assert resolver.resolve("clip(u)").lineage.steps == ()
    for text in ("clip(softsign15, 1)", "clip(u/(1+abs(u)), 0.5)"):
        cand = resolver.resolve(text, LOOKUP)
        assert [s.transform for s in cand.lineage.steps] == ["clip"], text
    assert float(resolver.resolve("clip(u/(1+abs(u)), 0.5)")(np.array([9.0]))[0]) == 0.5


def test_a_failing_name_listing_still_gives_the_error() -> None:
    def boom() -> list[str]:
        raise RuntimeError("database gone")

    with pytest.raises(ExpressionError, match="did you mean 'tanh'"):
        resolver.resolve("tahn", Stored(formula=lambda n: None, names=boom))

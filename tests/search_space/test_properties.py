"""Properties of science.md section 4, table-driven over catalog functions and every transform
family: against the expected values of ``expected.PROPERTIES`` (written from the mathematics),
and sanity-checked for every entry whether or not that table knows it."""

from __future__ import annotations

import pytest

from normfree.search_space import Properties
from tests.search_space.expected import PROPERTIES


def _approx(v):
    if isinstance(v, float):
        return pytest.approx(v, rel=1e-7, abs=1e-9)
    if isinstance(v, tuple):
        return tuple(_approx(x) for x in v)
    return v


@pytest.mark.parametrize("name", list(PROPERTIES))
def test_properties_table(catalog, name):
    p = catalog.resolve(name).properties
    assert isinstance(p, Properties)
    got = p.model_dump()
    for key, want in PROPERTIES[name].items():
        assert got[key] == _approx(want), (name, key, got[key], want)


def test_every_catalog_entry_has_properties(catalog):
    for c in catalog.all():
        d = c.properties.model_dump(mode="json")
        assert {"zero_centred", "odd", "bounded", "slope0", "flat_halfwidth", "monotone"} <= set(d)
        assert c.properties is c.properties  # computed once, kept on the candidate
        assert c.properties.summary()
        if c.name in catalog.SEARCH16:  # science.md section 2: bounded, zero-centred squashes
            assert c.properties.bounded and c.properties.zero_centred, c.name


def test_properties_are_frozen(catalog):
    p = catalog.get("erf").properties
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type
        p.odd = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("formula", "growth", "exponent"),
    [
        ("u^3", "super-linear", 3.0),
        ("exp(u)", "exponential", None),
        ("sign(u)*abs(u)^0.5", "sub-linear power", 0.5),
        ("u*sin(u)", "linear", 1.0),
        ("sign(u)*log(log(abs(u)+1)+1)", "logarithmic", None),
    ],
)
def test_growth_of_user_formulas(formula, growth, exponent):
    from normfree.search_space import parse

    p = parse(formula).properties
    assert p.growth == growth and not p.bounded
    if exponent is not None:
        assert p.growth_exponent == pytest.approx(exponent, abs=2e-3)


def test_flatness_is_exact_not_approximate():
    from normfree.search_space import parse

    assert parse("u^9").properties.flat_halfwidth == 0.0
    assert parse("relu(u)").properties.flat_region == (-50.0, 0.0)
    assert parse("relu(u)").properties.flat_halfwidth == 0.0
    assert parse("max(abs(u) - 2, 0)").properties.flat_halfwidth == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("formula", "heavy", "kinks"),
    [
        ("sign(u)*abs(u)^0.3", (0.0,), (0.0,)),  # |f'| ~ |u|^-0.7
        ("sign(u)*sqrt(abs(u))/(1+sqrt(abs(u)))", (0.0,), (0.0,)),  # ~ |u|^-1/2, like exproot
        ("sign(u)*abs(u)^0.6", (), (0.0,)),  # ~ |u|^-0.4: infinite, square integrable
        ("abs(u)", (), (0.0,)),  # a finite kink
        ("tanh(u)", (), ()),
    ],
)
def test_a_slope_whose_square_is_not_integrable_is_flagged(formula, heavy, kinks):
    """The backward signal through such an f has unbounded variance (diagnoses section 2f);
    a root of |u| is continuous at 0 although it approaches f(0) slowly (it was read as a jump
    when continuity meant settling over twelve decades)."""
    from normfree.search_space import parse

    p = parse(formula).properties
    assert p.heavy_tailed_at == heavy and p.heavy_tailed_slope is bool(heavy)
    assert p.non_differentiable_at == kinks and p.continuous and not p.discontinuities
    assert ("heavy-tailed slope" in p.summary()) is bool(heavy)


def test_properties_stored_before_the_heavy_tail_fields_still_load():
    p = Properties.model_validate(
        {k: v for k, v in _erf_dump().items() if not k.startswith("heavy_tailed")}
    )
    assert p.heavy_tailed_slope is False and p.heavy_tailed_at == ()


def _erf_dump() -> dict:
    from normfree.search_space import catalog

    return catalog.get("erf").properties.model_dump(mode="json")

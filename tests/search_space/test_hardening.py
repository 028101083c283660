"""Issue 16 in the expression layer: a bounded cost for every formula, the whole real line for
the domain rule, and growth labels read from the limits at +-infinity."""

from __future__ import annotations

import math

import pytest

from normfree.search_space import ExpressionError, catalog, parse, transforms
from normfree.search_space.printed_size import MAX_EXPANDED_NODES, MAX_SWITCHES, expanded_size


def test_power_tower_is_refused_before_the_derivative() -> None:
    with pytest.raises(ExpressionError, match="too large once powers are expanded"):
        parse("((((((tanh(u)**32)**32)**32)**32)**32)**32)")
    with pytest.raises(ExpressionError, match="too large"):
        parse("((tanh(u)**32 + 1)**32 + 1)**32")


def test_the_largest_accepted_power_prints_small_kernels() -> None:
    from normfree.kernels._codegen import c_source
    from normfree.search_space._parser import U

    c = parse("(tanh(u)**32)**32")  # tanh(u)**1024: 1024 factors, under the bound
    assert expanded_size(c.expr) <= MAX_EXPANDED_NODES
    source = c_source(c.expr, c.derivative, U, c.canonical)
    assert len(str(source)) < 400_000


def test_every_catalog_entry_is_far_below_the_bounds() -> None:
    for c in catalog.all():
        assert expanded_size(c.derivative) * 20 < MAX_EXPANDED_NODES, c.name


def test_long_min_max_chains_are_refused_while_parsing() -> None:
    groups = ",".join(f"min(u+{i},sin(u+{i}),tanh(u+{i}),erf(u+{i}))" for i in range(6))
    with pytest.raises(ExpressionError, match="too many branch points") as info:
        parse(f"max({groups})")
    assert info.value.position is not None
    assert MAX_SWITCHES >= 11  # the catalog's clip entries stay well inside


@pytest.mark.parametrize(
    ("formula", "where"),
    [
        ("sqrt(150-abs(u))", "150"),
        ("1/(exp(u-150)-1)", "u=150"),
        ("log(200-abs(u))", "200"),
        ("1/(tanh(u-1000)+0.5)", "u=999"),
    ],
)
def test_domain_rule_covers_the_whole_real_line(formula: str, where: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse(formula)
    assert where in str(info.value)


@pytest.mark.parametrize("formula", ["log(exp(-u)+1)", "exp(u)", "1/(1+exp(u-150))"])
def test_far_underflow_and_overflow_are_not_singularities(formula: str) -> None:
    parse(formula)


@pytest.mark.parametrize(
    ("formula", "growth", "exponent", "limit_pos"),
    [
        ("u/(1+abs(u))", "bounded", None, 1.0),
        ("atan(u)", "bounded", None, round(math.pi / 2, 9)),
        ("1/(1+exp(u-150))", "bounded", None, 0.0),
        ("sin(u)", "bounded", None, None),
        ("asinh(u)", "logarithmic", None, None),
        ("cbrt(u)", "sub-linear power", 0.333, None),
        ("2*u+1", "linear", 1.0, None),
        ("u**3", "super-linear", 3.0, None),
        ("sinh(u)", "exponential", None, None),
    ],
)
def test_growth_labels_come_from_the_limits(formula, growth, exponent, limit_pos) -> None:
    p = parse(formula).properties
    assert p.growth == growth
    assert p.growth_exponent == exponent
    assert p.limit_pos == limit_pos


def test_transform_parameters_follow_the_constant_rules() -> None:
    with pytest.raises(ExpressionError, match="not a finite number"):
        catalog.resolve("shift_h(erf, 1e400)")
    with pytest.raises(ExpressionError, match="too small"):
        catalog.resolve("clip(erf, 1e-300)")
    with pytest.raises(ExpressionError, match="too small"):
        transforms.clip(catalog.get("erf"), 1e-300)
    assert catalog.resolve("clip(erf, 1e-12)") is not None

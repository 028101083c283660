"""The expression grammar: every generated tree is within limits and parses back, or is refused
cleanly with ExpressionError (never another exception); variation is reproducible by seed."""

from __future__ import annotations

import random

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normfree.search_space import ExpressionError, U, catalog, parse
from normfree.search_space._numeric import disallowed_nodes
from normfree.search_space.grammar import (
    MUTATIONS,
    Grammar,
    GrammarLimits,
    depth,
    realize,
    size,
    to_text,
)

GRAMMAR = Grammar(GrammarLimits(max_size=20, max_depth=6))
POOL = [c.expr for c in catalog.all()]


def _valid_or_refused(expr: sympy.Expr) -> str:
    """'ok' when the tree realises to a candidate whose expr is the kernel node set, else 'no'."""
    try:
        c = realize(expr)
    except ExpressionError as exc:
        assert exc.message  # a reason, always
        return "no"
    assert not disallowed_nodes(c.expr) and not disallowed_nodes(c.derivative)
    assert c.expr.free_symbols == {U}
    # the formula text is the language: it parses again to the same canonical function
    assert parse(c.formula).canonical == c.canonical
    return "ok"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_sampled_trees_are_in_limits_and_parse_or_are_refused(seed: int) -> None:
    rng = random.Random(seed)
    expr = GRAMMAR.sample(rng)
    assert size(expr) <= 20 and depth(expr) <= 6 and expr.has(U)
    _valid_or_refused(expr)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from([*MUTATIONS, "crossover"]))
def test_mutants_and_crossovers_parse_or_are_refused(seed: int, kind: str) -> None:
    rng = random.Random(seed)
    parent = rng.choice(POOL)
    try:
        if kind == "crossover":
            child = GRAMMAR.crossover(parent, rng.choice(POOL), rng)
            how = kind
        else:
            child, how = GRAMMAR.mutate(parent, rng, kind)
    except ExpressionError:
        return  # refused by the limits: the clean outcome
    assert how in (*MUTATIONS, "crossover")
    assert size(child) <= 20 and depth(child) <= 6
    _valid_or_refused(child)


def test_most_samples_are_valid_candidates() -> None:
    """The grammar is useful, not only safe: most samples pass parse's domain checks."""
    rng = random.Random(7)
    outcomes = [_valid_or_refused(GRAMMAR.sample(rng)) for _ in range(40)]
    assert outcomes.count("ok") >= 30


def test_variation_is_reproducible_by_seed() -> None:
    def run(seed: int) -> list[str]:
        rng = random.Random(seed)
        out = []
        e = GRAMMAR.sample(rng)
        for _ in range(10):
            try:
                e, _ = GRAMMAR.mutate(e, rng)
            except ExpressionError:
                continue
            out.append(str(e))
        return out

    assert run(3) == run(3)
    assert run(3) != run(4)


@pytest.mark.parametrize("name", [c.name for c in catalog.all()])
def test_catalog_round_trips_through_the_printer(name: str) -> None:
    c = catalog.get(name)
    assert parse(to_text(c.expr)).canonical == c.canonical


def test_mutation_kinds_do_what_they_say() -> None:
    rng = random.Random(0)
    erf = catalog.get("erf").expr
    child, how = GRAMMAR.mutate(erf, rng, "point")
    assert how == "point" and child != erf and size(child) == size(erf)
    child, how = GRAMMAR.mutate(erf, rng, "wrap")
    assert how == "wrap" and child.has(sympy.erf) and size(child) > size(erf)
    child, how = GRAMMAR.mutate(sympy.Rational(3, 2) * sympy.tanh(U), rng, "constant")
    assert how == "constant" and child.has(sympy.tanh)
    assert child != sympy.Rational(3, 2) * sympy.tanh(U)
    child, how = GRAMMAR.mutate(sympy.tanh(sympy.erf(U)), rng, "shrink")
    assert how == "shrink" and size(child) < size(sympy.tanh(sympy.erf(U)))
    with pytest.raises(ValueError, match="unknown mutation"):
        GRAMMAR.mutate(erf, rng, "teleport")


def test_limits_are_enforced() -> None:
    small = Grammar(GrammarLimits(max_size=5, max_depth=3))
    with pytest.raises(ExpressionError, match=r"too large|too deep"):
        small.check(sympy.erf(sympy.tanh(sympy.atan(U + 1))) * 2)
    with pytest.raises(ExpressionError, match="depend on u"):
        small.check(sympy.erf(sympy.Integer(2)))
    with pytest.raises(ValueError):
        GrammarLimits(max_size=10_000)


@pytest.mark.parametrize(
    "expr",
    [
        sympy.zoo,
        sympy.I * U,
        sympy.nan + U,
        sympy.Piecewise((U, U > 0), (0, True)),
        U**U,
        sympy.gamma(U),
        sympy.Function("f")(U),
    ],
)
def test_trees_outside_the_language_are_refused(expr: sympy.Expr) -> None:
    with pytest.raises(ExpressionError):
        realize(expr)


def test_poles_are_refused_by_parse_not_by_luck() -> None:
    with pytest.raises(ExpressionError, match=r"infinite|division"):
        realize(1 / U)
    with pytest.raises(ExpressionError):
        realize(sympy.log(U))
    assert realize(U / (1 + sympy.Abs(U))).properties.bounded  # protected division is fine

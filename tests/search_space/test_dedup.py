"""Canonical form and behavioural fingerprint recognise the same function, and only it."""

from __future__ import annotations

import pytest

from normfree.search_space import find_duplicate, fingerprint, parse, same_function


@pytest.mark.parametrize(
    ("formula", "twin"),
    [
        ("2*sigmoid(2*u) - 1", "tanh"),
        ("u/(1+abs(u))", "smoothsign"),
        ("softsign(u)", "smoothsign"),
        ("x/(abs(x)+1)", "smoothsign"),
        ("(exp(2*u)-1)/(exp(2*u)+1)", "tanh"),
        ("atan(u)*2/pi", "arctan"),
        ("min(max(u, -1), 1)", "linearclip"),
        ("abs(u)*sign(u)", "linear"),
        ("1 - erfc(u)", "erf"),
        ("sign(u)*(1-exp(-abs(u)))", "expsign"),
        ("2.72*u/exp(abs(u))", "dampexp"),
    ],
)
def test_same_function_is_found(catalog, formula, twin):
    c = parse(formula)
    assert same_function(c, catalog.get(twin))
    dup = find_duplicate(c, catalog.all())
    assert dup is not None and dup.name == twin


def test_canonical_form_catches_rewrites(catalog):
    assert parse("2*sigmoid(2*u) - 1").canonical == catalog.get("tanh").canonical == "tanh(u)"
    assert parse("u/(abs(u)+1)").canonical == catalog.get("smoothsign").canonical
    assert parse("2*sigmoid(2*u) - 1").fingerprint == catalog.get("tanh").fingerprint
    assert catalog.resolve("sign_flip(sign_flip(erf))").canonical == catalog.get("erf").canonical
    # products are distributed over sums (bounded), so expanded spellings meet
    assert parse("sign(u) - sign(u)*exp(-abs(u))").canonical == catalog.get("expsign").canonical


def test_canonical_form_is_bounded_on_products_of_sums():
    import time

    text = "*".join(f"(sin({k}*u)+cos(u)/{k}+1)" for k in range(1, 13))
    start = time.perf_counter()
    canonical = parse(f"({text})/(1+abs({text}))").canonical
    assert time.perf_counter() - start < 20
    assert "sin(12*u)" in canonical and len(canonical) < 5000  # not 3**12 terms


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("tanh", "erf"),
        ("erf", "shift_h(erf, 0.1)"),
        ("erf", "shift_v(erf, 0.1)"),
        ("arctan", "sign_flip(arctan)"),
        ("linearclip", "clip(linear, 0.8)"),
        ("isru", "linear_part(isru, 0.01)"),
        ("erf", "flat_centre(erf, 0.1)"),
        ("logsign", "logsignclip"),  # equal on |u| <= e-1 only
        ("power23", "power23clip"),
    ],
)
def test_distinct_functions_stay_distinct(catalog, a, b):
    ca, cb = catalog.resolve(a), catalog.resolve(b)
    assert not same_function(ca, cb)
    assert ca.canonical != cb.canonical
    assert ca.fingerprint != cb.fingerprint


def test_tiny_differences_are_distinct_and_pool_without_match(catalog):
    assert not same_function(parse("tanh(u) + 1e-6*u"), catalog.get("tanh"))
    assert find_duplicate(parse("tanh(1.0001*u)"), catalog.all()) is None
    assert find_duplicate(catalog.get("erf"), [catalog.get("erf")]) is None  # itself is skipped


def test_catalog_has_no_internal_duplicates(catalog):
    cands = catalog.all()
    prints = [c.fingerprint for c in cands]
    assert len(set(prints)) == len(prints)
    for c in cands:
        assert find_duplicate(c, cands) is None, c.name


def test_fingerprint_is_stable_text(catalog):
    fp = catalog.get("erf").fingerprint
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fingerprint(catalog.get("erf").expr) == fp

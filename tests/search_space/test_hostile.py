"""Hostile input: whatever the text, the result is a Candidate or an ExpressionError, quickly.

Property-based (hypothesis): random strings, random token soups, random well-formed expression
trees, and huge/deep constructions. No other exception, no hang, no resource exhaustion: every
example must finish within a few seconds (asserted per example, so a slow path fails loudly).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normfree.search_space import Candidate, ExpressionError, catalog, parse
from normfree.search_space._numeric import disallowed_nodes
from normfree.search_space._syntax import FUNCTIONS

PER_EXAMPLE_S = 20.0  # generous on a loaded 2-core box; typical examples take milliseconds
SETTINGS = settings(
    deadline=None,  # timing asserted explicitly below, robust to a busy machine
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same examples in CI every time
)

# every one-argument function of the language: the primitives table's rows and aliases, and the
# functions spelled with them (a new row is fuzzed with no edit here)
FUNCS = [name for name, (_, most) in FUNCTIONS.items() if most == 1]
TOKENS = [
    *FUNCS, "u", "x", "pi", "e", "(", ")", "+", "-", "*", "/", "**", "^", ",", "1", "0", "2.5",
    "1e3", "clip", "min", "max", ".", "'", "__import__", "lambda", "[", "]", " ",
]  # fmt: skip


def _outcome(text: str) -> Candidate | None:
    start = time.perf_counter()
    try:
        c = parse(text)
    except ExpressionError as exc:
        assert exc.message
        assert exc.position is None or 0 <= exc.position <= len(text)
        c = None
    assert time.perf_counter() - start < PER_EXAMPLE_S, text[:80]
    if c is not None:
        assert not disallowed_nodes(c.expr) and not disallowed_nodes(c.derivative)
        pts = [*np.linspace(-10, 10, 201).tolist(), 0.0, *c.kinks]
        for dtype in (torch.float32, torch.float64):
            x = torch.tensor(pts, dtype=dtype)
            assert torch.isfinite(c.torch_fn()(x)).all(), (text, dtype)
            assert torch.isfinite(c.torch_fn(derivative=True)(x)).all(), (text, dtype)
        assert isinstance(c.canonical, str) and len(c.fingerprint) == 16
    return c


@SETTINGS
@given(st.text(max_size=300))
def test_random_unicode_text(text):
    _outcome(text)


@SETTINGS
@given(st.text(alphabet="u x()+-*/^.,0123456789eE_pisgnat", max_size=120))
def test_random_formula_alphabet(text):
    _outcome(text)


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=80))
def test_random_token_soup(tokens):
    _outcome("".join(tokens))


def _trees() -> st.SearchStrategy[str]:
    leaves = st.one_of(
        st.just("u"),
        st.just("x"),
        st.sampled_from(["pi", "e"]),
        st.floats(min_value=-1e3, max_value=1e3, allow_nan=False).map(lambda v: f"({v!r})"),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda v: f"({v!r})"),  # rejected
        st.integers(min_value=-40, max_value=40).map(lambda v: f"({v})"),
    )

    def extend(child: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(child, st.sampled_from(["+", "-", "*", "/", "**", "^"]), child).map(
                lambda t: f"({t[0]}{t[1]}{t[2]})"
            ),
            st.tuples(st.sampled_from(FUNCS), child).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(child, child).map(lambda t: f"max({t[0]}, {t[1]})"),
            st.tuples(child, child, child).map(lambda t: f"clip({t[0]}, {t[1]}, {t[2]})"),
            st.tuples(child, st.floats(-5, 5), st.floats(0.01, 5)).map(
                lambda t: f"clip({t[0]}, {t[1]!r}, {t[1] + t[2]!r})"
            ),
            child.map(lambda c: f"-{c}"),
        )

    return st.recursive(leaves, extend, max_leaves=60)


@SETTINGS
@given(_trees())
def test_random_expression_trees(text):
    _outcome(text)


@settings(deadline=None, max_examples=25, derandomize=True)
@given(_trees().filter(lambda t: len(t) < 400))
def test_properties_of_random_accepted_trees_are_computable(text):
    c = _outcome(text)
    if c is not None:
        start = time.perf_counter()
        p = c.properties
        assert time.perf_counter() - start < PER_EXAMPLE_S, text
        assert p.monotone in ("increasing", "decreasing", "constant", "neither")
        assert np.isfinite(p.slope0)


@settings(deadline=None, max_examples=40, derandomize=True)
@given(
    st.integers(min_value=1, max_value=20000),
    st.sampled_from(
        [
            lambda n: "(" * n + "u" + ")" * n,
            lambda n: "-" * n + "u",
            lambda n: "+".join(["u"] * n),
            lambda n: "tanh(" * n + "u" + ")" * n,
            lambda n: "u" + "**2" * n,
            lambda n: "9" * n,
            lambda n: "u*" * n + "u",
            lambda n: "exp(" * n + "u" + ")" * n,
            lambda n: "sqrt(abs(" * n + "u" + "))" * n,
            lambda n: "max(" + ",".join(["u"] * n) + ")",
            lambda n: "1" + "0" * n + "*u",
            lambda n: "0." + "0" * n + "1*u",
            lambda n: "(u+1)**32*" * n + "u",
        ]
    ),
)
def test_huge_and_deep_constructions(n, build):
    _outcome(build(n))


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "().__class__.__bases__[0].__subclasses__()",
        "(lambda: 0)()",
        "[c for c in ().__class__.__base__.__subclasses__()]",
        "f'{__import__(\"os\")}'",
        "globals()",
        "u if u else u",
        "u; import os",
        "exp(u)**exp(u)",
        "((u+1)**32+1)**32",
        "(((u**32)**32)**32)",
        "((1000000*u)**32)**32",
        "((((1/3)**32)**32)**32)**32*u",
        "((((4/3)**32/10000)**32)**32)**32*u",
        "1e-320*u",
        "exp(exp(exp(exp(exp(5)))))*u",
        "tanh(1e6*u)**32/(1e-6)",
        # point evaluations at kinks must never ask mpmath for exp(exp(exp(...))) exactly
        "sign(u)*exp(-exp(exp(exp(abs(u)+5))))",
        "abs(sin(exp(exp(exp(abs(u)+5)))))",
        "tanh(exp(exp(exp(u))))*0+sign(u)",
        "sign(u)*tanh(exp(exp(exp(abs(u)))))",
    ],
)
def test_explicit_hostile_texts(text):
    _outcome(text)


@pytest.mark.parametrize(
    "text", ["__import__('os')", "erf.__class__", "shift_h(erf, 0.5).lam", "lambda: erf"]
)
def test_resolve_refuses_code(text):
    with pytest.raises(ExpressionError):
        catalog.resolve(text)

"""The catalog equals science.md: the paper's 16, formulas against each entry's independent
reference (numerically), citations, baselines. Nothing here lists the catalog: a new entry is
checked by the same tests without editing them."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

from normfree.search_space import Candidate, ExpressionError, evaluate, plot_data
from normfree.search_space.catalog import names as catalog_names
from tests.references import reference
from tests.search_space.conftest import GRID

# science.md section 2: how many of the paper's 16 search candidates each group holds
PAPER_GROUPS = {"natural": 3, "transformed": 6, "clipped unbounded": 5, "ratio": 2}


def test_the_16_search_candidates_are_the_papers(catalog):
    """SEARCH16 names the paper's 16 (science.md section 2), whatever the table's order."""
    groups = [c.group for c in catalog.search16()]
    assert [c.name for c in catalog.search16()] == list(catalog.SEARCH16)
    assert {g: groups.count(g) for g in set(groups)} == PAPER_GROUPS
    assert catalog.SEARCH16[:3] == ("erf", "tanh", "arctan")  # the papers' reference points


def test_every_entry_is_complete_and_unique(catalog):
    names = catalog.names()
    assert len(names) == len(set(names)) == len(catalog.all())
    for c, entry in zip(catalog.all(), catalog.ENTRIES, strict=True):
        assert c.citation and entry.reference, c.name  # a source, and its formula from it
        assert c.lineage.base == c.name and c.lineage.steps == ()
        assert c.group == entry.group


@pytest.mark.parametrize("name", catalog_names())
def test_entry_equals_its_reference_on_dense_grid(catalog, name):
    c = catalog.get(name)
    expected = reference(name, "numpy")(GRID)
    got = evaluate(c, GRID)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)
    # torch float64 and float32 agree with the reference too
    t64 = evaluate(c, torch.tensor(GRID, dtype=torch.float64))
    np.testing.assert_allclose(t64.numpy(), expected, rtol=1e-12, atol=1e-13)
    t32 = evaluate(c, torch.tensor(GRID, dtype=torch.float32))
    assert t32.dtype == torch.float32
    np.testing.assert_allclose(t32.double().numpy(), expected, rtol=2e-6, atol=2e-6)


# entries the float64 evaluator computes to 1e-14 (not log(u^2 + 1) at tiny u, for example)
@pytest.mark.parametrize("name", ["erf", "tanh", "arctan", "isru", "saturlog", "exproot"])
def test_entry_agrees_with_mpmath_at_high_precision(catalog, name):
    """Against its reference (beside the entry) in 30-digit mpmath arithmetic."""
    pts = np.array([-7.5, -1.3, -0.2, 0.0, 1e-5, 0.7, 2.0, 9.0])
    got = evaluate(catalog.get(name), pts)
    with mpmath.workdps(30):
        ref = reference(name, "mpmath")
        want = [float(ref(mpmath.mpf(float(p)))) for p in pts]
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_baselines_are_reference_entries(catalog):
    assert [b.name for b in catalog.baselines()] == ["layernorm", "rmsnorm", "identity"]
    assert all(catalog.is_baseline(b.name) for b in catalog.baselines())
    with pytest.raises(KeyError, match="baseline"):
        catalog.get("layernorm")
    with pytest.raises(ExpressionError, match="baseline"):
        catalog.resolve("rmsnorm")
    with pytest.raises(KeyError, match="unknown candidate"):
        catalog.get("nope")


def test_get_is_cached_and_resolve_accepts_names_and_formulas(catalog):
    assert catalog.get("erf") is catalog.get("erf")
    assert catalog.resolve(" erf ") is catalog.get("erf")
    c = catalog.resolve("u/(1+abs(u))")
    assert isinstance(c, Candidate) and c.group == "user"
    with pytest.raises(ExpressionError):
        catalog.resolve("no_such_function(u)")


def test_evaluate_keeps_type_shape_and_dtype(catalog):
    c = catalog.get("tanh")
    x = torch.linspace(-3, 3, 12, dtype=torch.float32).reshape(3, 4)
    y = c(x)
    assert y.shape == (3, 4) and y.dtype == torch.float32
    torch.testing.assert_close(y, torch.tanh(x))
    fn = c.torch_fn(derivative=True)
    torch.testing.assert_close(fn(x), 1 - torch.tanh(x) ** 2)
    assert float(evaluate(c, 0.5)) == pytest.approx(np.tanh(0.5))
    # constant function keeps the input shape
    const = catalog.get("linear")  # derivative is the constant 1
    assert const.torch_fn(derivative=True)(x).shape == x.shape


def test_plot_data(catalog):
    d = plot_data(catalog.get("expsign"), lo=-5, hi=5, n=401)
    assert set(d) == {"u", "f", "df"}
    assert all(len(v) == 401 for v in d.values())
    i = d["u"].index(0.0)
    assert d["f"][i] == 0.0 and d["df"][i] == 1.0
    assert all(np.isfinite(d["df"]))
    with pytest.raises(ValueError):
        plot_data(catalog.get("erf"), lo=1, hi=0)


def test_operator_of_section_1(catalog):
    import sympy

    x, alpha, s, gamma, beta = sympy.symbols("x alpha s gamma beta", real=True)
    erf = catalog.get("erf")
    assert erf.operator() == gamma * sympy.erf(alpha * x + s) + beta
    assert erf.operator(shift=False, affine=False) == sympy.erf(alpha * x)
    assert catalog.get("tanh").model_dump(mode="json")["name"] == "tanh"

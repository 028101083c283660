"""Leaderboard statistics against values worked out by hand (t tables, not scipy calls)."""

from __future__ import annotations

import math

import pytest

from normfree.storage import stats

# Student t, two-sided 95%: t(0.975, 2) = 4.302653, t(0.975, 4) = 2.776445 (printed tables).
T2 = 4.302653
T4 = 2.776445


def test_summary_of_three_values() -> None:
    s = stats.summarize([1.0, 2.0, 3.0])
    # mean 2; squared deviations 1, 0, 1 -> variance 2 / (3 - 1) = 1 -> std 1
    assert s.n == 3
    assert s.mean == pytest.approx(2.0)
    assert s.std == pytest.approx(1.0)
    # half width t * std / sqrt(n) = 4.302653 / 1.7320508 = 2.484138
    assert s.half_width == pytest.approx(2.484138, rel=1e-6)
    assert s.low == pytest.approx(2.0 - 2.484138, rel=1e-6)
    assert s.high == pytest.approx(2.0 + 2.484138, rel=1e-6)
    assert s.bound("maximize") == s.low
    assert s.bound("minimize") == s.high


def test_summary_of_five_values() -> None:
    # 2, 4, 4, 4, 6: mean 4, deviations^2 4+0+0+0+4 = 8, variance 8/4 = 2
    s = stats.summarize([2, 4, 4, 4, 6])
    assert s.std == pytest.approx(math.sqrt(2))
    assert s.half_width == pytest.approx(T4 * math.sqrt(2) / math.sqrt(5), rel=1e-6)


def test_degenerate_samples_have_no_interval() -> None:
    assert stats.summarize([]).mean is None
    one = stats.summarize([0.7])
    assert (one.n, one.mean, one.std, one.half_width, one.low) == (1, 0.7, None, None, None)
    assert one.bound("maximize") is None


def test_welch_equal_variances() -> None:
    # means 2 vs 5, variances 1 and 1: se = sqrt(1/3 + 1/3) = 0.816497, t = -3.674235,
    # Welch df = (2/3)^2 / ((1/3)^2/2 * 2) = 4; two-sided p at |t|=3.674 with 4 df = 0.02131
    p = stats.welch_p_value([1, 2, 3], [4, 5, 6])
    assert p == pytest.approx(0.02131, abs=2e-5)
    assert not stats.indistinguishable([1, 2, 3], [4, 5, 6])


def test_welch_unequal_variances() -> None:
    # variances 1 and 20/3: se^2 = 1/3 + 5/3 = 2, t = -3/sqrt(2) = -2.1213;
    # df = 4 / ((1/3)^2/2 + (5/3)^2/3) = 4.0755; p = 0.0999 > 0.05: indistinguishable
    p = stats.welch_p_value([1, 2, 3], [2, 4, 6, 8])
    assert p == pytest.approx(0.0999, abs=5e-4)
    assert stats.indistinguishable([1, 2, 3], [2, 4, 6, 8])


def test_welch_needs_two_values_a_side() -> None:
    assert stats.welch_p_value([1.0], [1.0, 2.0]) is None
    assert stats.indistinguishable([1.0], [1.0, 2.0])  # cannot tell them apart
    assert stats.welch_p_value([1, 1], [1, 1]) == 1.0
    assert stats.welch_p_value([1, 1], [2, 2]) == 0.0


def test_paired_difference() -> None:
    # differences 0.02, 0.02, 0.04: mean 0.026667, std sqrt((2*0.006667^2 + 0.013333^2)/2)
    # = 0.011547, half width 4.302653 * 0.011547 / sqrt(3) = 0.028684
    d = stats.paired_difference([0.90, 0.92, 0.94], [0.88, 0.90, 0.90])
    assert d.mean == pytest.approx(0.026667, abs=1e-6)
    assert d.std == pytest.approx(0.011547, abs=1e-6)
    assert d.half_width == pytest.approx(T2 * 0.011547005 / math.sqrt(3), rel=1e-5)
    with pytest.raises(ValueError):
        stats.paired_difference([1, 2], [1])


def test_rank_key_orders_by_pessimistic_bound() -> None:
    precise = stats.summarize([0.80, 0.81, 0.82])  # lower bound ~0.785
    lucky = stats.summarize([0.60, 0.99, 0.95])  # higher mean, lower bound far below
    single = stats.summarize([0.99])  # no interval: after every arm with one
    ordered = sorted([single, lucky, precise], key=lambda s: stats.rank_key(s, "maximize"))
    assert ordered == [precise, lucky, single]
    # minimising: the smaller upper bound ranks first
    lo = stats.summarize([1.0, 1.1, 1.2])
    hi = stats.summarize([1.5, 1.6, 1.7])
    assert sorted([hi, lo], key=lambda s: stats.rank_key(s, "minimize")) == [lo, hi]


def test_welch_and_t_quantile_agree_with_scipy_stats() -> None:
    """The board's statistics come from scipy.special (no scipy.stats import at a server's
    first read): the same numbers as scipy.stats' Welch test and t quantiles."""
    import random

    from scipy import stats as st

    from normfree.storage.stats import t_quantile, welch_p_value

    rng = random.Random(0)
    for i in range(300):
        a = [rng.gauss(0, rng.random() + 0.01) for _ in range(rng.randint(2, 8))]
        b = [rng.gauss(rng.random(), rng.random() + 0.01) for _ in range(rng.randint(2, 8))]
        if i % 7 == 0:
            a = [1.0, 1.0, 1.0]  # one side without spread
        expected = float(st.ttest_ind(a, b, equal_var=False).pvalue)
        assert welch_p_value(a, b) == pytest.approx(expected, abs=1e-12)
    for n in (2, 3, 6, 30, 1000):
        assert t_quantile(n) == pytest.approx(float(st.t.ppf(0.975, n - 1)), rel=1e-12)

"""Split-seed rank reliability on synthetic arms whose true reliability is known.

Classical model: arm a has a true mean mu_a ~ N(0, sb^2) and each seed adds N(0, sw^2), so the
mean over n seeds has reliability R(n) = sb^2 / (sb^2 + sw^2 / n), and the single seed
rho = sb^2 / (sb^2 + sw^2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from normfree.fidelity.reliability import (
    rank_reliability,
    seeds_needed,
    spearman_brown,
    trials_reliability,
)
from normfree.fidelity.report import ProxyTrial


def synthetic(arms: int, seeds: int, sb: float, sw: float, rng_seed: int = 0) -> dict:
    rng = np.random.default_rng(rng_seed)
    mu = rng.normal(0, sb, arms)
    seed_effect = rng.normal(0, 5.0, seeds)  # paired seeds: shared by every arm, rank-neutral
    return {
        f"a{i}": {s: float(mu[i] + seed_effect[s] + rng.normal(0, sw)) for s in range(seeds)}
        for i in range(arms)
    }


@pytest.mark.parametrize(("seeds", "sw"), [(4, 1.0), (3, 1.5), (6, 2.5)])
def test_recovers_the_true_reliability(seeds: int, sw: float) -> None:
    true = 1.0 / (1.0 + sw**2 / seeds)  # sb = 1
    rel = rank_reliability(synthetic(300, seeds, 1.0, sw), bootstrap=200)
    assert rel.seeds == seeds and rel.arms == 300
    # ranks read a little below the Pearson truth under normal noise (module docstring)
    assert rel.reliability == pytest.approx(true, abs=0.05)
    assert rel.low < true + 0.02 and rel.high > true - 0.05
    rho = 1.0 / (1.0 + sw**2)
    assert rel.single_seed == pytest.approx(rho, abs=0.05)


def test_seeds_for_target_follows_spearman_brown() -> None:
    # rho = 0.5: R(4) = 0.8 exactly, so four seeds reach the target and three do not
    assert seeds_needed(0.5) == 4
    assert spearman_brown(0.5, 4) == pytest.approx(0.8)
    assert seeds_needed(0.9) == 1 and seeds_needed(0.0) is None and seeds_needed(-0.2) is None
    rel = rank_reliability(synthetic(400, 4, 1.0, 1.0, rng_seed=3), bootstrap=0)
    assert rel.seeds_for_target in (3, 4, 5)
    assert rel.low is None  # no bootstrap asked


def test_pure_noise_is_unreliable() -> None:
    rel = rank_reliability(synthetic(200, 4, 0.0, 1.0), bootstrap=200)
    assert abs(rel.reliability) < 0.2
    assert rel.low < 0 < rel.high


def test_failures_rank_last_in_either_direction() -> None:
    good = {"a": {0: 0.9, 1: 0.91}, "b": {0: 0.8, 1: 0.81}, "c": {0: 0.7, 1: 0.71}}
    failed = {**good, "d": {0: None, 1: float("nan")}}
    rel = rank_reliability(failed, bootstrap=0)
    assert rel.split_correlation == pytest.approx(1.0)
    # the same as losses: a failure is still the worst
    losses = {k: {s: (None if v is None else 1 - v) for s, v in c.items()} for k, c in good.items()}
    losses["d"] = {0: None, 1: None}
    assert rank_reliability(losses, direction="minimize", bootstrap=0).reliability == 1.0
    # a failure flipping sides on one seed reverses that arm's rank between the halves
    flip = {**good, "d": {0: None, 1: 0.95}}
    assert rank_reliability(flip, bootstrap=0).split_correlation < 1.0


def test_not_measurable_says_why() -> None:
    one_seed = {k: {0: float(i)} for i, k in enumerate("abcd")}
    rel = rank_reliability(one_seed)
    assert rel.reliability is None and "2 seeds" in rel.reason
    assert "not measurable" in rel.text()
    two_arms = {"a": {0: 1.0, 1: 1.0}, "b": {0: 2.0, 1: 2.0}}
    assert "3 arms" in rank_reliability(two_arms).reason


def test_odd_seed_counts_and_deterministic() -> None:
    vals = synthetic(60, 5, 1.0, 1.0, rng_seed=7)
    a, b = rank_reliability(vals), rank_reliability(vals)
    assert a == b and a.splits == 10  # C(5, 2) unordered splits of 2 against 3
    assert 0 < a.reliability < 1 and a.low <= a.reliability <= a.high
    assert "at 5 seeds over 60 arms" in a.text()
    assert math.isclose(a.as_dict()["reliability"], a.reliability)


def test_from_proxy_trials() -> None:
    vals = synthetic(20, 4, 1.0, 0.5, rng_seed=1)
    trials = [
        ProxyTrial(cell=arm, label=arm, seed=s, failed=False, objective=-v,
                   objective_direction="minimize")
        for arm, cells in vals.items() for s, v in cells.items()
    ]  # fmt: skip
    trials.append(ProxyTrial(cell="x", label="x", seed=0, failed=True))
    direct = rank_reliability(
        {k: {s: -v for s, v in c.items()} for k, c in vals.items()} | {"x": {0: None}},
        direction="minimize",
    )
    assert trials_reliability(trials) == direct


def _reference_split_spearman(ha: np.ndarray, hb: np.ndarray) -> float:
    """The definition, one split and one resample at a time (scipy's ranks, NaN arms left out)."""
    from scipy.stats import rankdata

    rs = []
    for a, b in zip(ha, hb, strict=True):
        keep = ~(np.isnan(a) | np.isnan(b))
        if keep.sum() < 3:
            continue
        ra, rb = rankdata(a[keep]), rankdata(b[keep])
        if ra.std() == 0 or rb.std() == 0:
            continue
        rs.append(float(np.corrcoef(ra, rb)[0, 1]))
    return float(np.mean(rs)) if rs else math.nan


@pytest.mark.parametrize("k", [25, 230, 231])  # float32 up to 230 arms (exact), then float64
def test_weighted_ranks_equal_resampling_arms_one_by_one(k: int) -> None:
    """The bootstrap's all-at-once ranks (counts of each drawn arm) give what ranking each
    resampled matrix gives, with ties, failures (-inf) and missing halves (NaN)."""
    from normfree.fidelity.reliability import _split_spearman

    rng = np.random.default_rng(7)
    ha = np.round(rng.normal(size=(6, k)), 1 if k < 100 else 3)  # rounding makes ties
    hb = np.round(ha + rng.normal(scale=0.7, size=ha.shape), 1)
    ha[0, 3] = hb[2, 5] = -math.inf
    ha[1, 4] = hb[3, 4] = ha[4, 9] = math.nan
    picks = [rng.choice(k, k, replace=True) for _ in range(40)]
    weights = np.zeros((40, k))
    for b, p in enumerate(picks):
        np.add.at(weights[b], p, 1.0)
    got = _split_spearman(ha, hb, weights)
    want = [_reference_split_spearman(ha[:, p], hb[:, p]) for p in picks]
    assert np.allclose(got, want, atol=1e-12, equal_nan=True)
    assert _split_spearman(ha, hb, np.ones((1, k)))[0] == pytest.approx(
        _reference_split_spearman(ha, hb), abs=1e-12
    )


def test_half_scores_are_the_means_of_completed_seeds_and_tie_exactly() -> None:
    """A half's score: the mean of the arm's completed seeds there, NaN with none there, -inf
    when more failed than completed; arms with the same values in another seed order tie."""
    from normfree.fidelity.reliability import _half_scores

    values = {
        "a": {0: 0.901, 1: 0.905, 2: 0.899, 3: None},
        "b": {0: 0.905, 1: 0.899, 2: 0.901, 3: 0.9},  # a's values, another order
        "c": {0: None, 1: None, 2: 0.5},
        "d": {3: 0.7},
    }
    halves = [(0, 1, 2), (1, 2, 3)]
    got = _half_scores(values, list(values), [0, 1, 2, 3], halves, -1.0)
    assert got.shape == (2, 4)
    assert got[0, 0] == got[0, 1] == pytest.approx(-(0.901 + 0.905 + 0.899) / 3, abs=1e-12)
    assert got[1, 0] == pytest.approx(-(0.905 + 0.899) / 2, abs=1e-12)  # one failure of three
    assert got[0, 2] == -math.inf  # two of its three seeds there failed
    assert got[1, 2] == pytest.approx(-0.5)  # one failed, one completed: the completed one
    assert math.isnan(got[0, 3]) and got[1, 3] == pytest.approx(-0.7)


@pytest.mark.parametrize(("a", "b"), [(1, 2), (2, 3), (3, 4), (1, 4)])
def test_the_single_seed_reliability_of_unequal_halves_solves_the_model(a: int, b: int) -> None:
    """Halves of a and b seeds correlate at sqrt(R(a) R(b)): the single-seed rho found for a
    correlation r gives back r under the classical model."""
    from normfree.fidelity.reliability import _single_seed

    for r in (0.01, 0.3, 0.5, 0.77, 0.99):
        rho = _single_seed(r, a, b)
        assert 0 < rho < 1
        assert math.sqrt(spearman_brown(rho, a) * spearman_brown(rho, b)) == pytest.approx(
            r, abs=1e-12
        )


def test_a_family_carries_its_interval_over_while_few_values_change() -> None:
    """A live board (issue 27) bootstraps again only once more than ``REUSE_SHARE`` of its
    values changed; its point estimate is always of the values given, and it says how old its
    interval is."""
    from normfree.fidelity.reliability import REUSE_SHARE, IntervalMemo

    memo = IntervalMemo()
    values = synthetic(100, 6, 1.0, 1.5)  # 600 cells: up to 12 may change
    first = rank_reliability(values, reuse="board", memo=memo)
    assert first.interval_behind == 0
    limit = int(REUSE_SHARE * 600)
    moved = {a: dict(v) for a, v in values.items()}
    for i in range(limit):
        moved[f"a{i}"][0] += 3.0  # one seed of each of `limit` arms
    carried = rank_reliability(moved, reuse="board", memo=memo)
    fresh = rank_reliability(moved)
    assert carried.interval_behind == limit
    assert (carried.low, carried.high) == (first.low, first.high)
    assert (carried.low, carried.high) != (fresh.low, fresh.high)
    assert carried.reliability == fresh.reliability  # the point estimate is current
    assert f"interval {limit} values old" in carried.text()
    # one more changed value: bootstrapped again, on these values
    moved[f"a{limit}"][1] -= 3.0
    again = rank_reliability(moved, reuse="board", memo=memo)
    assert again.interval_behind == 0
    assert again == rank_reliability(moved)
    # a new arm (the arms entering the bootstrap changed) never reuses an interval
    moved["new"] = {s: 0.0 for s in range(6)}
    assert rank_reliability(moved, reuse="board", memo=memo) == rank_reliability(moved)
    # another family, or none, is its own
    assert rank_reliability(values, reuse="other", memo=memo) == first


def test_a_reordered_family_still_carries_its_interval() -> None:
    """A board lists its arms by rank, and a commit reorders them: the same arms in another
    order are the same family's arms."""
    from normfree.fidelity.reliability import IntervalMemo

    memo = IntervalMemo()
    values = synthetic(60, 4, 1.0, 1.0)
    first = rank_reliability(values, reuse="board", memo=memo)
    moved = dict(reversed(list(values.items())))
    moved["a0"] = {**moved["a0"], 0: moved["a0"][0] + 1.0}
    carried = rank_reliability(moved, reuse="board", memo=memo)
    assert carried.interval_behind == 1 and (carried.low, carried.high) == (first.low, first.high)

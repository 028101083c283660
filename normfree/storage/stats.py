"""Leaderboard statistics over seeds: pure functions, no database.

Choices (and why):

- Confidence intervals use Student's t with n-1 degrees of freedom: proxies run 3-10 seeds, far
  too few for a normal approximation.
- Ranking uses the *lower* confidence bound when the objective is maximised (the upper one when
  minimised): a candidate ranks high only if it is good *and* measured precisely enough, so one
  lucky seed cannot top the board. Arms with fewer than two values have no interval; they rank
  after every arm that has one (then by mean).
- "Indistinguishable from the best" uses Welch's two-sided t-test (unequal variances) against the
  top-ranked arm, p > 0.05. We chose it over CI overlap because overlapping 95% intervals is a
  much stricter test than 5% significance (two intervals can overlap while the difference is
  significant), so overlap would call too many arms tied. With fewer than two values on either
  side no test is possible and the arm counts as indistinguishable (we cannot tell).
- The comparison with LayerNorm is *paired* on seeds (same seed: same data order and init), which
  removes the seed-to-seed variance both arms share; it is a t interval on the differences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal

Direction = Literal["maximize", "minimize"]
ALPHA = 0.05


@dataclass(frozen=True)
class Summary:
    """Mean and t confidence interval of a sample. Undefined parts are None (JSON-friendly)."""

    n: int
    mean: float | None
    std: float | None  # sample standard deviation (ddof=1)
    half_width: float | None  # t_{1-a/2, n-1} * std / sqrt(n)
    low: float | None
    high: float | None

    def bound(self, direction: Direction) -> float | None:
        """The pessimistic end of the interval: lower when maximising, upper when minimising."""
        return self.low if direction == "maximize" else self.high

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


@lru_cache(maxsize=4096)
def t_quantile(n: int, confidence: float = 1 - ALPHA) -> float:
    """Two-sided Student t critical value for a sample of size n (n >= 2).

    Memoised: a leaderboard asks for the same few (n, confidence) pairs for every arm, and each
    scipy call costs tens of microseconds.
    """
    # scipy.special's inverse t CDF (what scipy.stats.t.ppf computes): scipy.stats costs a
    # second or more to import, which the first leaderboard after a server's start paid
    from scipy.special import stdtrit

    return float(stdtrit(n - 1, 0.5 + confidence / 2))


def summarize(values: Sequence[float], confidence: float = 1 - ALPHA) -> Summary:
    """Mean, sample std and the t confidence interval of ``values``."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return Summary(0, None, None, None, None, None)
    mean = math.fsum(xs) / n
    if n == 1:
        return Summary(1, mean, None, None, None, None)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    hw = t_quantile(n, confidence) * std / math.sqrt(n)
    return Summary(n, mean, std, hw, mean - hw, mean + hw)


def welch_p_value(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Welch t-test p-value; None when either side has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return None
    sa, sb = summarize(a), summarize(b)
    assert sa.std is not None and sb.std is not None and sa.mean is not None
    assert sb.mean is not None
    if sa.std == 0 and sb.std == 0:  # no spread at all: the test is degenerate
        return 1.0 if sa.mean == sb.mean else 0.0
    # Welch's t and its Welch-Satterthwaite degrees of freedom, the two-sided tail from
    # scipy.special's t CDF: what scipy.stats.ttest_ind(equal_var=False) answers, without its
    # import (a second or more) and per-call overhead (a board asks once per arm)
    from scipy.special import stdtr

    va, vb = sa.std**2 / sa.n, sb.std**2 / sb.n
    t = (sa.mean - sb.mean) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (sa.n - 1) + vb**2 / (sb.n - 1))
    return float(min(1.0, 2 * stdtr(df, -abs(t))))


def indistinguishable(a: Sequence[float], best: Sequence[float], alpha: float = ALPHA) -> bool:
    """True unless Welch's test separates ``a`` from ``best`` at level ``alpha``."""
    p = welch_p_value(a, best)
    return p is None or p > alpha


def paired_difference(
    a: Sequence[float], b: Sequence[float], confidence: float = 1 - ALPHA
) -> Summary:
    """Summary of the differences a_i - b_i (paired samples, e.g. the same seeds)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    return summarize([x - y for x, y in zip(a, b, strict=True)], confidence)


def rank_key(summary: Summary, direction: Direction) -> tuple[int, float, float]:
    """Sort key, best first: by the pessimistic bound, arms without an interval last, then mean."""
    sign = -1.0 if direction == "maximize" else 1.0
    bound = summary.bound(direction)
    mean = summary.mean
    return (
        0 if bound is not None else 1 if mean is not None else 2,
        sign * bound if bound is not None else 0.0,
        sign * mean if mean is not None else 0.0,
    )

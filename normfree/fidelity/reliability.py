"""Split-seed rank reliability: how far a screen's order of its arms would reproduce itself.

A leaderboard of arms (functions, operator options) trained on several paired seeds is a
measurement; its *reliability* is the correlation one would expect between its order and the
order of the same leaderboard trained again on fresh seeds. It bounds what the order can
predict about anything else (scale included): an order that does not reproduce itself cannot
agree with scale either. Defined here once; pages, the API and the CLI show it beside every
leaderboard and fidelity report.

The estimate (psychometrics' split-half reliability, over seeds instead of test items):

1. Split the seeds into two disjoint halves (seed i is the same seed in every arm, as studies
   pair them, so the split is joint). Score every arm on each half: the mean of its completed
   seeds there, or *failed* when more of that half's seeds failed to train than completed;
   failed ranks below every value (as in the fidelity report).
2. Spearman's rank correlation between the two halves' scores, averaged over every balanced
   split (or ``max_splits`` random ones when there are more).
3. Spearman-Brown to the full seed count: with halves of a and b seeds the correlation is
   sqrt(R(a) R(b)) under the classical model R(m) = m rho / (1 + (m - 1) rho), where rho is the
   single-seed reliability; solving for rho gives R(n) at the n seeds the screen ran (for
   a = b this is the familiar 2r / (1 + r)).
4. A percentile bootstrap interval over arms (arms are resampled with replacement; the seeds and
   splits stay as they are), and the seeds that would bring R to ``target`` (0.8 by default):
   the smallest m with R(m) >= target, None when rho <= 0 (no number of seeds would).

Two honest caveats, also in the README: ranks are coarser than values, so under normal noise
the rank version reads ~0.01-0.02 below the Pearson reliability; and the interval reflects
which arms were screened, not the seed sample (with 3 seeds there is little to resample).

Pure: plain numbers in, a frozen :class:`Reliability` out (``as_dict()`` for JSON).
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

TARGET = 0.8  # the reliability a default screen must reach (issue 25)
BOOTSTRAP = 1000
BOOTSTRAP_SEED = 0  # deterministic for the same values
CONFIDENCE = 0.95
MAX_SPLITS = 64  # balanced splits enumerated up to this many; a random sample beyond
MIN_ARMS = 3  # a rank correlation over fewer arms says nothing
# A live board is rebuilt at every commit of a study writing to it (five a second, issue 27),
# and its bootstrap was most of that rebuild (bench/results/live_reads.md), while one more seed
# of one arm moves the interval far less than the interval's own resampling error. So a caller
# that names a family (``reuse=``) carries the family's last interval over while at most this
# share of its values changed since it was bootstrapped; the point estimate is always current.
REUSE_SHARE = 0.02

# arm -> seed -> value; None (or NaN) means the seed failed to train
ArmValues = Mapping[str, Mapping[int, float | None]]


@dataclass(frozen=True)
class Reliability:
    """The split-seed rank reliability of a set of arms (see the module docstring)."""

    reliability: float | None  # R at ``seeds`` seeds, Spearman-Brown corrected
    low: float | None  # bootstrap interval over arms
    high: float | None
    seeds: int  # the seed count R refers to (the seeds the arms share)
    arms: int  # arms that entered (at least one seed in each half of some split)
    split_correlation: float | None  # mean Spearman between disjoint seed halves
    single_seed: float | None  # rho: the reliability of one seed
    seeds_for_target: int | None  # smallest seed count with R >= target (None: unreachable)
    target: float
    splits: int  # seed splits averaged over
    reason: str | None = None  # why ``reliability`` is None
    # values (arm, seed) changed since the interval was bootstrapped: 0 when it is of these
    # values; a family's interval is carried over while few changed (``REUSE_SHARE``)
    interval_behind: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """One line for a CLI or a caption: ``rank reliability 0.84 [0.71, 0.92] at 3 seeds``."""
        if self.reliability is None:
            return f"rank reliability: not measurable ({self.reason})"
        out = f"rank reliability {self.reliability:.2f}"
        if self.low is not None and self.high is not None:
            out += f" [{self.low:.2f}, {self.high:.2f}]"
            if self.interval_behind:
                n = self.interval_behind
                out += f" (interval {n} value{'s' if n > 1 else ''} old)"
        out += f" at {self.seeds} seeds over {self.arms} arms"
        if self.seeds_for_target is None:
            out += f"; no seed count reaches {self.target:g}"
        elif self.reliability < self.target:
            out += f"; {self.seeds_for_target} seeds would reach {self.target:g}"
        return out


def spearman_brown(r: float, k: float) -> float:
    """The reliability of a measurement k times as long as one of reliability r."""
    if r <= -1.0:
        return -1.0
    return k * r / (1.0 + (k - 1.0) * r)


def seeds_needed(single_seed: float, target: float = TARGET) -> int | None:
    """The smallest seed count m with R(m) >= target, given the single-seed reliability."""
    if not single_seed > 0:
        return None
    if single_seed >= target:
        return 1
    m = target * (1.0 - single_seed) / (single_seed * (1.0 - target))
    return max(1, math.ceil(m - 1e-9))


def _single_seed(r: float, a: int, b: int) -> float:
    """rho such that sqrt(R(a) R(b)) = r (halves of a and b seeds); r <= 0 maps through the
    plain Spearman-Brown step (the classical model has no negative reliability to solve for)."""
    if r <= 0 or a == b:
        return spearman_brown(r, 1.0 / a) if r > -1 else -1.0  # R(a) = r -> rho
    if r >= 1:
        return 1.0
    # R(a) R(b) = r^2 with R(m) = m rho / (1 + (m - 1) rho) is the quadratic
    # (ab - r^2 (a-1)(b-1)) rho^2 - r^2 (a+b-2) rho - r^2 = 0, whose one positive root is rho
    # (a closed form: the bootstrap solves it a thousand times per board)
    r2 = r * r
    quad = a * b - r2 * (a - 1) * (b - 1)
    lin = r2 * (a + b - 2)
    return (lin + math.sqrt(lin * lin + 4.0 * quad * r2)) / (2.0 * quad)


def _splits(seeds: Sequence[int], max_splits: int, rng: np.random.Generator) -> list[tuple]:
    """Balanced (half A, half B) partitions of the seeds; each unordered split once."""
    n = len(seeds)
    a = n // 2
    combos = itertools.combinations(range(n), a)
    total = math.comb(n, a) // (2 if n % 2 == 0 else 1)
    if total <= max_splits:
        out, seen = [], set()
        for c in combos:
            rest = tuple(i for i in range(n) if i not in c)
            key = min(c, rest) if n % 2 == 0 else c
            if key in seen:
                continue
            seen.add(key)
            out.append(c)
    else:
        out = [tuple(sorted(rng.choice(n, a, replace=False).tolist())) for _ in range(max_splits)]
    return [
        (tuple(seeds[i] for i in c), tuple(seeds[i] for i in range(n) if i not in c)) for c in out
    ]


def _half_scores(
    values: ArmValues,
    arms: Sequence[str],
    seeds: Sequence[int],
    halves: Sequence[Sequence[int]],
    sign: float,
) -> np.ndarray:
    """Every arm's goodness on every half, (halves, arms): the mean of its completed seeds
    there; NaN with no seed there; -inf when more of them failed than completed. The halves
    have one size (a split's first halves, or its second).

    All at once (one Python call per arm and half was the largest part of a board's
    reliability). Each mean sums its values in sorted order, so that arms with the same values
    on a half tie exactly, whatever their seeds' order: a rank correlation over results that
    often tie must not break ties by rounding."""
    column = {s: j for j, s in enumerate(seeds)}
    value = np.full((len(arms), len(seeds)), np.nan)
    failed = np.zeros((len(arms), len(seeds)))
    for i, a in enumerate(arms):
        for s, v in values[a].items():
            if v is None or not math.isfinite(v):
                failed[i, column[s]] = 1.0
            else:
                value[i, column[s]] = sign * float(v)
    index = np.array([[column[s] for s in half] for half in halves], dtype=np.intp)
    picked = np.sort(value[:, index], axis=-1)  # (arms, halves, half size); NaN sorts last
    n_done = (~np.isnan(picked)).sum(axis=-1)
    n_failed = failed[:, index].sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.nansum(picked, axis=-1) / n_done
    score[n_failed > n_done] = -math.inf
    score[(n_done == 0) & (n_failed == 0)] = math.nan
    return score.T


# Up to this many arms the doubled ranks and their weighted sums of products stay below
# 2**24 (each sum is at most ~4 n**3 / 3 over n drawn arms), where float32 holds every integer
# exactly: the same figures as float64 at half the memory traffic. Above it, float64.
_FLOAT32_ARMS = 230


def _rank_matrices(h: np.ndarray, mask: np.ndarray, dtype: type) -> np.ndarray:
    """(k, S*k): block s holds [i, j] = 2 (h_si < h_sj) + (h_si == h_sj) for arms counted in
    split s (``mask``), so that ``weights @ block + 1`` is twice every arm's average rank
    within each weighted copy of that split's scores.

    Why a matrix product: a bootstrap resample repeats and drops arms, so its ranks are the
    counts below plus half the ties, weighted by how often each arm was drawn; that is one
    product for every resample and split at once (a per-resample sort was 2 s of a 171-arm
    board's build on a 2-core host, bench/results/live_reads.md). Doubled, every rank is an
    integer. NaN compares False: such an arm counts for nothing and its own rank is unused."""
    below = h[:, :, None] < h[:, None, :]  # (S, i, j)
    tied = h[:, :, None] == h[:, None, :]
    blocks = (2 * below + tied) * mask[:, :, None]
    return blocks.astype(dtype).transpose(1, 0, 2).reshape(h.shape[1], -1)


def _split_spearman(ha: np.ndarray, hb: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per weighting (rows of ``weights``, (B, k): how often each arm is counted), the mean over
    splits (rows of ``ha``/``hb``, (S, k)) of Spearman between the halves' scores; NaN arms are
    left out of a split, and a split with fewer than ``MIN_ARMS`` arms or a constant half
    does not count. NaN where no split counts.

    Every split and resample at once (a loop over splits was most of a board's rebuild under
    a writer, issue 27): Pearson's r of the weighted ranks, where the ranks' weighted sum is
    known (n (n + 1) / 2 over n counted arms, ties or not) and only the sums of products are
    computed."""
    n_splits, k = ha.shape
    mask = ~(np.isnan(ha) | np.isnan(hb))
    dtype = np.float32 if k <= _FLOAT32_ARMS else np.float64
    w = weights.astype(dtype)
    ra = (w @ _rank_matrices(ha, mask, dtype)).reshape(-1, n_splits, k) + 1  # 2 x rank
    rb = (w @ _rank_matrices(hb, mask, dtype)).reshape(-1, n_splits, k) + 1
    wm = w[:, None, :] * mask.astype(dtype)[None]  # (B, S, k): counted draws per split
    n = (weights @ mask.T.astype(float)).astype(float)  # (B, S)
    wra = wm * ra
    sab = np.einsum("bsk,bsk->bs", wra, rb).astype(float)
    saa = np.einsum("bsk,bsk->bs", wra, ra).astype(float)
    sbb = np.einsum("bsk,bsk->bs", wm * rb, rb).astype(float)
    centre = n * (n + 1.0) ** 2  # (sum of doubled ranks)^2 / n
    cov, var_a, var_b = sab - centre, saa - centre, sbb - centre
    den = np.sqrt(np.clip(var_a, 0, None) * np.clip(var_b, 0, None))
    ok = (n >= MIN_ARMS) & (den > 1e-9)  # doubled ranks are integers: a spread is >= 1
    corr = np.where(ok, np.clip(cov / np.where(ok, den, 1.0), -1.0, 1.0), 0.0)
    counted = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, corr.sum(axis=1) / np.maximum(counted, 1), np.nan)


class IntervalMemo:
    """The last bootstrap interval of each family (a board, a study's cells), with the values
    it was bootstrapped from: :func:`rank_reliability` reuses it while the family's values
    differ from those in at most ``REUSE_SHARE`` of their (arm, seed) cells, and the same arms
    and seed splits entered. Bounded (LRU); shared by a process's threads."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, tuple[Any, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, family: Hashable, values: ArmValues, shape: tuple[Any, ...]
    ) -> tuple[float | None, float | None, int] | None:
        """(low, high, cells changed since) of ``family``'s interval if it may be reused."""
        with self._lock:
            found = self._items.get(family)
            if found is not None:
                self._items.move_to_end(family)
        if found is None or found[0] != shape:
            return None
        _shape, then, low, high = found
        changed = _changed_cells(then, values)
        cells = sum(len(v) for v in values.values())
        if changed > max(1, int(REUSE_SHARE * cells)):
            return None
        return low, high, changed

    def put(
        self,
        family: Hashable,
        values: ArmValues,
        shape: tuple[Any, ...],
        low: float | None,
        high: float | None,
    ) -> None:
        snapshot = {a: dict(v) for a, v in values.items()}
        with self._lock:
            self._items[family] = (shape, snapshot, low, high)
            self._items.move_to_end(family)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _changed_cells(then: ArmValues, now: ArmValues) -> int:
    """(arm, seed) cells added, removed or changed between two value sets."""
    changed = 0
    for arm in then.keys() | now.keys():
        a, b = then.get(arm, {}), now.get(arm, {})
        if a == b:
            continue
        changed += sum(1 for s in a.keys() | b.keys() if a.get(s, _MISSING) != b.get(s, _MISSING))
    return changed


_MISSING = object()

# A process's intervals by family (the API's boards and study cells).
LIVE = IntervalMemo()


def rank_reliability(
    values: ArmValues,
    *,
    direction: Literal["maximize", "minimize"] = "maximize",
    target: float = TARGET,
    bootstrap: int = BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    max_splits: int = MAX_SPLITS,
    reuse: Hashable | None = None,
    memo: IntervalMemo | None = None,
) -> Reliability:
    """The split-seed rank reliability of ``values`` (arm -> seed -> value, None = failed).

    ``direction`` says which end is good (failures rank at the bad end). Deterministic for the
    same input (the bootstrap and any split sample use ``seed``). With ``reuse`` (a family's
    name) the family's last interval in ``memo`` (default :data:`LIVE`) is carried over while
    few of its values changed (``REUSE_SHARE``; the result says how many in
    ``interval_behind``); everything else is of ``values``.
    """
    sign = 1.0 if direction == "maximize" else -1.0
    arms = [a for a, cells in values.items() if cells]
    seeds = sorted({s for a in arms for s in values[a]})
    counts = [len(values[a]) for a in arms]
    n = int(statistics.median(counts)) if counts else 0

    def empty(reason: str, n_arms: int = len(arms)) -> Reliability:
        return Reliability(None, None, None, n, n_arms, None, None, None, target, 0, reason)

    if len(arms) < MIN_ARMS:
        return empty(f"needs at least {MIN_ARMS} arms, has {len(arms)}")
    if len(seeds) < 2 or n < 2:
        return empty("needs at least 2 seeds per arm to split")
    rng = np.random.default_rng(seed)
    splits = _splits(seeds, max_splits, rng)
    ha = _half_scores(values, arms, seeds, [sa for sa, _ in splits], sign)
    hb = _half_scores(values, arms, seeds, [sb for _, sb in splits], sign)
    used = ~np.all(np.isnan(ha) | np.isnan(hb), axis=0)
    r = float(_split_spearman(ha, hb, np.ones((1, len(arms))))[0])
    if not math.isfinite(r):
        return empty("the halves give no rank correlation (every arm ties)", int(used.sum()))
    # the seed count each half stands for: a split's halves of the arms' typical seed count
    a_size, b_size = n // 2, n - n // 2

    def to_r(corr: float) -> tuple[float, float]:
        rho = _single_seed(corr, a_size, b_size)
        # a negative correlation has no reliability to scale up: Spearman-Brown would take
        # -0.5 at two seeds to -2; clamped to -1 (an order that reverses itself)
        return max(-1.0, spearman_brown(rho, n)), rho

    rel, rho = to_r(r)
    low = high = None
    behind = 0
    memo = memo if memo is not None else LIVE
    # the arms that enter, in any order (a board lists them by rank, which a commit reorders)
    entered = tuple(sorted(arms[i] for i in np.flatnonzero(used)))
    shape = (direction, bootstrap, seed, confidence, n, tuple(splits), entered)
    carried = memo.get(reuse, values, shape) if reuse is not None and bootstrap > 0 else None
    if carried is not None:
        low, high, behind = carried
    elif bootstrap > 0:
        cols = np.flatnonzero(used)
        # the draws of one rng.choice(k, k) per resample, in one call (the same stream)
        picks = rng.integers(0, len(cols), size=(bootstrap, len(cols)))
        k = len(cols)  # how often each resample drew each arm: one count over all draws
        flat = (np.arange(bootstrap)[:, None] * k + picks).ravel()
        drawn = np.bincount(flat, minlength=bootstrap * k).reshape(bootstrap, k).astype(float)
        corr = _split_spearman(ha[:, cols], hb[:, cols], drawn)
        boot = [to_r(float(c))[0] for c in corr if math.isfinite(c)]
        if boot:
            tail = (1 - confidence) / 2 * 100
            low, high = (float(x) for x in np.percentile(boot, [tail, 100 - tail]))
        if reuse is not None:
            memo.put(reuse, values, shape, low, high)
    return Reliability(
        reliability=rel,
        low=low,
        high=high,
        seeds=n,
        arms=int(used.sum()),
        split_correlation=r,
        single_seed=rho,
        seeds_for_target=seeds_needed(rho, target),
        target=target,
        splits=len(splits),
        interval_behind=behind,
    )


def values_from_trials(trials: Sequence[Any], metric: str = "objective") -> dict[str, dict]:
    """``rank_reliability``'s input from fidelity :class:`~normfree.fidelity.report.ProxyTrial`
    rows (one arm per cell; a failed trial is None; the latest trial of a seed wins)."""
    out: dict[str, dict[int, float | None]] = {}
    for t in trials:
        v = None if t.failed else getattr(t, metric)
        if not t.failed and (v is None or not math.isfinite(v)):
            continue  # completed but without this metric: says nothing
        out.setdefault(t.cell, {})[int(t.seed)] = v
    return out


def trials_reliability(trials: Sequence[Any], **kwargs: Any) -> Reliability:
    """The reliability of a proxy's trials (ProxyTrial rows), in their objective's direction."""
    direction = next((t.objective_direction for t in trials), "maximize")
    return rank_reliability(values_from_trials(trials), direction=direction, **kwargs)


def board_reliability(rows: Sequence[Mapping[str, Any]], **kwargs: Any) -> Reliability:
    """The reliability of a leaderboard's arms, from its rows (``storage.leaderboard.rank``:
    each row's ``seed_values``, seed -> completed value, and ``direction``).

    A board keeps only completed seeds per arm (its summaries count failures without naming
    their seeds), so a failed seed is absent here rather than ranked last as in the fidelity
    report's rows; arms with no completed seed say nothing and are left out.
    """
    values: dict[str, dict[int, float | None]] = {}
    for r in rows:
        seeds = r.get("seed_values") or {}
        if seeds:
            key = str(r.get("arm_key") or r.get("candidate"))
            values[key] = {int(s): (None if v is None else float(v)) for s, v in seeds.items()}
    direction = next((r["direction"] for r in rows if r.get("direction")), "maximize")
    return rank_reliability(values, direction=direction, **kwargs)


__all__ = [
    "LIVE",
    "REUSE_SHARE",
    "TARGET",
    "IntervalMemo",
    "Reliability",
    "board_reliability",
    "rank_reliability",
    "seeds_needed",
    "spearman_brown",
    "trials_reliability",
    "values_from_trials",
]

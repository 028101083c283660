"""A study's progress, computed in one place for the REST API, the study page and the CLI.

What a person watching a study wants: how many trials are in each status, how fast they finish,
when the study will be done and which arm leads. Three rules live here and nowhere else:

- **The shown state follows from the same snapshot as the counts** (:func:`state_of`). The
  driver writes a study's final status a moment after its last trial finishes, and a study
  whose driver died stays ``running`` in storage; read naively, a page showed "running" beside
  "14/14 finished". A live study (``pending`` or ``running``) with trials and none waiting or
  running is shown with the outcome the driver is about to write (``lifecycle.outcome``), and
  :func:`snapshot` reads the status and the counts in one read transaction, so they always
  describe the same moment.
- **Throughput is measured on finish times, not on the clock of the reader**
  (:func:`throughput`): trials finished per minute over the last ten minutes before the latest
  finish (from the first trial's start while the study is younger than that). The ETA is an
  instant (``eta_at``: the latest finish plus the remaining trials at that rate), not a
  countdown. Both change only when a trial finishes, so a cached answer (and its ETag) stays
  right until then, and a client counts down to ``eta_at`` itself.
- **The best arm** is the arm (a function with its transform value and options; seeds merged,
  as the study's cells and the leaderboards merge them) with the best mean over its completed
  seeds (:func:`best_arm`); :func:`arm_of` is the grouping the study's cells use too.

Reused trials (an earlier study's results, ``storage.trials.reuse_finished``) count as finished
but not in the throughput: they finished when (and where) they first ran.

Remaining trials are those planned so far (waiting plus running): a search or a generate study
plans some trials as it goes, so its ETA covers what is planned now.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from normfree.specs import TRIAL_STATUSES

# Statuses a driver is (or should be) working on: what the page refreshes and the ETA is for.
DRIVEN_STATUSES = frozenset({"pending", "running"})
# Statuses whose trials have stopped for good.
_ENDED = ("COMPLETE", "DIVERGED", "PRUNED", "FAILED")
# How far back before the latest finish throughput looks, and how many finishes it reads.
WINDOW = timedelta(minutes=10)
MAX_FINISHES = 200


@dataclass(frozen=True)
class BestArm:
    """The leading arm: its label (as the cells and leaderboards write it), function, mean and
    the completed seeds behind that mean."""

    label: str
    function: str
    mean: float
    n: int
    objective: str | None = None
    direction: str = "maximize"


@dataclass(frozen=True)
class Progress:
    """A study's progress at one moment (see the module docstring for the rules)."""

    study_id: int
    status: str  # as stored
    state: str  # what a badge shows (state_of): never "running" with nothing left to run
    counts: dict[str, int]
    total: int
    finished: int
    fraction: float
    throughput_per_min: float | None = None
    window_trials: int = 0
    window_s: float | None = None
    last_finished_at: datetime | None = None
    eta_s: float | None = None
    eta_at: datetime | None = None
    best: BestArm | None = None
    notes: list[str] = field(default_factory=list)
    # trials answered by an earlier study's run (``reused_from``): finished, never trained here
    reused: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (timestamps as ISO text), for ``normfree study status --json``."""
        out = asdict(self)
        for k in ("last_finished_at", "eta_at"):
            out[k] = out[k].isoformat() if out[k] is not None else None
        return out


def state_of(status: str, counts: Mapping[str, int]) -> str:
    """The state to show beside ``counts``: the stored status, except that a live study with
    trials and none left waiting or running shows the outcome its driver writes next
    (``complete``, or ``failed`` when nothing trained: ``lifecycle.outcome``)."""
    from normfree.workers.lifecycle import outcome

    total = sum(counts.values())
    left = counts.get("WAITING", 0) + counts.get("RUNNING", 0)
    if status in DRIVEN_STATUSES and total and not left:
        return outcome(counts)
    if status == "pending" and counts.get("RUNNING", 0):
        return "running"
    return status


def throughput(
    finishes: Sequence[datetime], first_start: datetime | None, finished: int
) -> tuple[float | None, int, float | None]:
    """(trials per minute, trials counted, seconds spanned) over the window before the latest
    finish. ``finishes``: the latest finish times (any order); ``first_start``: when the study's
    first trial started; ``finished``: every finished trial. None when nothing has finished
    or no time has passed."""
    if not finishes:
        return None, 0, None
    last = max(finishes)
    start = last - WINDOW
    if first_start is not None and first_start >= start:
        # the study is younger than the window: every finished trial, from the first start
        start, n = first_start, finished
    else:
        n = sum(1 for t in finishes if t > start)
    span = (last - start).total_seconds()
    if span <= 0 or n <= 0:
        return None, n, None
    return 60.0 * n / span, n, span


def arm_of(
    trial: Mapping[str, Any], transform: str | None
) -> tuple[str, str, bool, float | None, dict[str, Any]]:
    """(function, label, baseline, transform value, options) of the study arm a trial belongs
    to, the seed dropped: the one spelling of a study's arms (its cells, its best arm, what
    ``/compare?study=N&arm=LABEL`` names). One function is one arm however it was spelled
    (``storage.leaderboard.identity``); the label (``arm_text``) names the function, the
    transform value and the options, so (label, baseline) tells arms apart.

    Remembered by its inputs: a study's cells, best arm and reliability ask it of each of its
    trials at every commit of a live study (3,000 calls a rebuild at 1,000 trials, issue 27),
    and a study has few distinct arms."""
    axes = trial.get("axis_values")
    # the seed dropped first: a study's arms, not its trials, are what is remembered
    items = (
        tuple((k, v) for k, v in axes.items() if k != "seed") if isinstance(axes, Mapping) else ()
    )
    try:
        function, label, baseline, value, ax = _arm_of(str(trial["candidate"]), items, transform)
    except TypeError:  # an unhashable axis value (a list): computed, not remembered
        function, label, baseline, value, ax = _arm_of.__wrapped__(
            str(trial["candidate"]), items, transform
        )
    return function, label, baseline, value, dict(ax)  # the caller's own options


@functools.lru_cache(maxsize=1 << 14)
def _arm_of(
    candidate: str, items: tuple[tuple[str, Any], ...], transform: str | None
) -> tuple[str, str, bool, float | None, dict[str, Any]]:
    from normfree.storage.leaderboard import arm_text, identity

    ax = dict(items)
    function = identity(str(ax.pop("function", candidate)))
    baseline = bool(ax.pop("baseline", False))
    value = ax.pop(transform, None) if transform else None
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return function, arm_text(function, value, ax), baseline, value, ax


def best_arm(
    trials: Iterable[Mapping[str, Any]], transform: str | None, direction: str = "maximize"
) -> BestArm | None:
    """The arm with the best mean over its completed seeds (ties: more seeds, then label);
    None before any trial completed."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    objective = None
    for t in trials:
        v = t.get("value")
        if t.get("status") != "COMPLETE" or v is None or not math.isfinite(v):
            continue
        function, label, _baseline, _value, _options = arm_of(t, transform)
        values[(label, function)].append(float(v))
        objective = objective or t.get("objective")
    if not values:
        return None
    sign = -1.0 if direction == "minimize" else 1.0
    key = max(values, key=lambda k: (sign * sum(values[k]) / len(values[k]), len(values[k]), k))
    vs = values[key]
    return BestArm(key[0], key[1], sum(vs) / len(vs), len(vs), objective, direction)


def summarize(
    study_id: int,
    status: str,
    counts: Mapping[str, int],
    *,
    finishes: Sequence[datetime] = (),
    first_start: datetime | None = None,
    best: BestArm | None = None,
    reused: int = 0,
) -> Progress:
    """Progress from what :func:`snapshot` read (also usable on counts alone)."""
    c = {s: int(counts.get(s, 0)) for s in TRIAL_STATUSES}
    total = sum(c.values())
    left = c["WAITING"] + c["RUNNING"]
    finished = total - left
    state = state_of(status, c)
    rate, n, span = throughput(finishes, first_start, finished - reused)
    last = max(finishes) if finishes else None
    eta_s = eta_at = None
    if state in DRIVEN_STATUSES and rate and last is not None:
        eta_s = 60.0 * left / rate
        eta_at = last + timedelta(seconds=eta_s)
    return Progress(
        study_id=study_id,
        status=status,
        state=state,
        counts=c,
        total=total,
        finished=finished,
        fraction=finished / total if total else 0.0,
        throughput_per_min=rate,
        window_trials=n,
        window_s=span,
        last_finished_at=last,
        eta_s=eta_s,
        eta_at=eta_at,
        best=best,
        reused=reused,
    )


@dataclass(frozen=True)
class Snapshot:
    """A study's status, counts and recent finish times, read in one transaction."""

    study_id: int
    status: str
    updated_at: datetime
    counts: dict[str, int]
    finishes: list[datetime]
    first_start: datetime | None
    reused: int = 0

    @property
    def key(self) -> tuple[Any, ...]:
        """What everything shown from the snapshot depends on: a trial only moves forward and
        the status and update time change with every transition."""
        return (self.status, self.updated_at.isoformat(), tuple(sorted(self.counts.items())))

    def progress(self, best: BestArm | None = None) -> Progress:
        return summarize(
            self.study_id,
            self.status,
            self.counts,
            finishes=self.finishes,
            first_start=self.first_start,
            best=best,
            reused=self.reused,
        )


def snapshot(db: Any, study_id: int) -> Snapshot | None:
    """Read a study's status, per-status counts and latest finish times in one read
    transaction (``Database.read``: one snapshot), so the state and the counts shown beside it
    describe the same moment. None when there is no such study."""
    import sqlalchemy as sa

    from normfree.storage import reads
    from normfree.storage.models import StudyRow, TrialRow

    with db.read() as conn:
        row = conn.execute(
            sa.select(StudyRow.status, StudyRow.updated_at).where(StudyRow.id == study_id)
        ).first()
        if row is None:
            return None
        counts = reads.study_counts(conn, study_id)
        finishes: list[datetime] = []
        first_start = None
        reused = 0
        if any(counts[s] for s in _ENDED):
            reused = reads.study_reused(conn, study_id)
            ran = TrialRow.reused_from.is_(None)  # reused rows finished elsewhere, earlier
            ended = (TrialRow.study_id == study_id, TrialRow.status.in_(_ENDED), ran)
            finishes = [
                t
                for (t,) in conn.execute(
                    sa.select(TrialRow.finished_at)
                    .where(*ended, TrialRow.finished_at.is_not(None))
                    .order_by(TrialRow.finished_at.desc())
                    .limit(MAX_FINISHES)
                )
            ]
            first_start = conn.scalar(
                sa.select(sa.func.min(TrialRow.started_at)).where(
                    TrialRow.study_id == study_id, ran
                )
            )
    return Snapshot(study_id, row.status, row.updated_at, counts, finishes, first_start, reused)


def read(db: Any, study_id: int, *, with_best: bool = True) -> Progress | None:
    """A study's progress (with its best arm unless ``with_best`` is False), or None when there
    is no such study: what ``normfree study status`` shows."""
    snap = snapshot(db, study_id)
    if snap is None:
        return None
    best = None
    if with_best and snap.counts.get("COMPLETE"):
        best = best_arm_of(db, study_id)
    return snap.progress(best)


def best_arm_of(db: Any, study_id: int) -> BestArm | None:
    """The study's best arm, from its completed trials."""
    import sqlalchemy as sa

    from normfree.storage import reads
    from normfree.storage.models import StudyRow

    fields = ("candidate", "status", "axis_values", "objective", "direction", "value")
    with db.read() as conn:
        spec = conn.scalar(sa.select(StudyRow.spec).where(StudyRow.id == study_id))
        trials = reads.study_trial_rows(conn, study_id, fields)
    transform = spec.get("transform") if isinstance(spec, Mapping) else None
    done = [t for t in trials if t["status"] == "COMPLETE"]
    direction = next((t["direction"] for t in done if t.get("direction")), "maximize")
    return best_arm(done, transform, direction)


__all__ = [
    "DRIVEN_STATUSES",
    "BestArm",
    "Progress",
    "Snapshot",
    "arm_of",
    "best_arm",
    "read",
    "snapshot",
    "state_of",
    "summarize",
    "throughput",
]

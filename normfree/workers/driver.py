"""The study runner: ask, lease, dispatch, collect, tell, write. Resumable at any point.

A driver owns one study's loop; everything it knows lives in storage and in Optuna's storage, so
a driver killed at any instruction is replaced by starting another (``normfree study run ID``):

- trials are rows. Grid studies insert all their rows at creation; a search inserts one row per
  Optuna ``ask``. Inserting is idempotent (unique (study, trial key)), so replanning after a crash
  adds nothing twice.
- a row is *leased* before it is dispatched (owner = this driver, expires unless renewed); both
  the driver (while the task is in flight) and the Ray task (heartbeat thread, every epoch report)
  renew it, and the task writes the result under it. If the driver dies, its Ray tasks die with
  it (the embedded cluster, or the driver's job on a cluster) or, if they survive, still finish
  their rows; the next driver requeues every RUNNING row whose lease expired (``attempt + 1``).
- a task that fails (worker process killed, node lost, exception) is requeued at once by the
  driver, up to ``max_attempts``, then marked FAILED with the reason.
- Optuna is told a trial's outcome by the driver after the row is final. On start the driver
  reconciles: rows that finished while no driver was watching are told now
  (``skip_if_finished``), and Optuna trials asked but never inserted are failed.

Pruning does not pass through the driver: the task reports each epoch to Optuna and asks
``should_prune`` itself (see :mod:`normfree.workers.execution`). Pause and cancel are study
statuses: the driver stops leasing at once, running tasks read the status at their next report.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from normfree.settings import Settings, get_settings
from normfree.specs import TERMINAL_TRIAL_STATUSES, StudySpec
from normfree.storage import LeasedTrial
from normfree.storage.db import optuna_study_name
from normfree.workers import kinds
from normfree.workers import scheduling as sch
from normfree.workers.cost import check_study
from normfree.workers.errors import failure_reason
from normfree.workers.execution import JobOutcome, RayExecutor, TrialJob, TrialStore
from normfree.workers.kinds.search import REPEAT_OF, answer_repeats
from normfree.workers.lifecycle import outcome
from normfree.workers.validation import prepare, stored_names
from normfree.workers.versions import trainer_version

__all__ = [
    "DriverSummary",
    "StudyDriver",
    "create_study",
    "optuna_study_name",
    "optuna_user_attrs",
    "recover_creations",
]

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

# Row states after which nothing runs again (and Optuna must have been told).
_TERMINAL = TERMINAL_TRIAL_STATUSES


def optuna_user_attrs(spec: StudySpec, study_id: int) -> dict[str, Any]:
    """What an Optuna study of ours says about itself (its user attributes).

    Optuna's storage holds only parameter names and numbers; a viewer of that storage alone
    (``optuna-dashboard``) shows which normfree study, proxy, kind and metric a study is only
    through these. JSON values, as Optuna stores user attributes."""
    metric, direction = sch.objective_of(spec.proxy)
    attrs: dict[str, Any] = {
        "normfree_study_id": study_id,
        "proxy": spec.proxy,
        "kind": spec.kind,
        "metric": metric,
        "direction": direction,
    }
    if spec.name:
        attrs["name"] = spec.name
    return attrs


def _load_optuna(store: TrialStore, spec: StudySpec, study_id: int) -> optuna.Study:
    _, direction = sch.objective_of(spec.proxy)
    study = optuna.create_study(
        study_name=optuna_study_name(study_id),
        storage=store.optuna_storage(),
        sampler=sch.make_sampler(spec),
        pruner=sch.make_pruner(spec),
        direction=direction,
        load_if_exists=True,
    )
    # Written when missing or different only: a study created before the attributes existed
    # gets them at its next load, and a driver restart writes nothing.
    stored = study.user_attrs
    for key, value in optuna_user_attrs(spec, study_id).items():
        if stored.get(key) != value:
            study.set_user_attr(key, value)
    return study


def create_study(
    spec: StudySpec,
    *,
    settings: Settings | None = None,
    store: TrialStore | None = None,
    validated: bool = False,
    request: bool = False,
    owner_token_id: int | None = None,
) -> int:
    """Record a study, its Optuna study and (grid kinds) all its trials; return its id.

    Nothing runs yet: ``StudyDriver(id).run()`` (or ``normfree study run ID``) does that.
    The study is validated whole and its stored candidates baked (``workers.validation``;
    ``validated``: the caller already did, with this store; ``request``: with the kinds'
    request rules, as REST and the CLI ask) before anything is written: ``StudyInvalid`` (a
    ConfigError) with every problem.

    One recoverable unit: the study row is written first as ``creating``, then its Optuna study
    and trials, and one UPDATE makes it ``pending``. A failure undoes both stores at once; a
    process killed in between leaves a ``creating`` study that the next start removes with its
    Optuna study (:func:`recover_creations`). ``owner_token_id``: the API token creating it.
    """
    settings = settings or get_settings()
    with contextlib.ExitStack() as opened:
        if store is None:
            # a handle opened for this one creation is closed with it: the API creates studies
            # in its thread pool, and undisposed engines kept their connections until the
            # garbage collector ran (three engines a study; PostgreSQL refused clients past 100)
            store = TrialStore(
                settings.database_url,
                settings.optuna_storage_url,
                max_attempts=settings.max_attempts,
            )
            opened.callback(store.close)
        store.migrate()
        if not validated:  # the one validation (as REST's), with this database's stored names
            spec = prepare(spec, stored_names(store.repo), request=request)
        check_study(spec, settings)  # params, overrides, dataset name, cost: ConfigError (-> 422)
        kind = kinds.get(spec.kind)
        kind.validate(spec)
        planned = kind.plan(spec)  # grid kinds: every trial; the others add theirs as they run
        # Two stores (ours and Optuna's) cannot share a transaction: the study is written, and on
        # any failure both are removed again, so a study exists whole or not at all.
        study_id = store.repo.create_study(spec, status="creating", owner_token_id=owner_token_id)
        try:
            _load_optuna(store, spec, study_id)
            if planned:
                store.repo.add_trials(study_id, [(p.config, p.axis_values) for p in planned])
                # a key another study already ran under this trainer code is answered, not trained
                store.repo.reuse_finished(study_id, trainer_version())
            if not store.repo.finish_creation(study_id):
                raise RuntimeError(f"study {study_id} was removed while it was being created")
        except BaseException:
            _undo_create(store, study_id)
            raise
        return study_id


def recover_creations(store: Any) -> list[int]:
    """Remove every study left ``creating`` by a process killed while creating it, with its
    trials and its Optuna study; returns their ids. Called once at a server's start (the only
    moment no creation of this server can be in flight).

    ``store``: a ``storage.Storage`` (its Optuna storage is opened only when there is work).
    """
    stuck = [int(r["id"]) for r in store.repo.list_studies(status="creating")]
    for study_id in stuck:
        log.warning("removing study %s: its creation was interrupted", study_id)
        _undo_create(store, study_id)
    return stuck


def _undo_create(store: Any, study_id: int) -> None:
    """Remove a half-created study from both stores (best effort; the error that got us here is
    the one the caller sees)."""
    try:
        optuna.delete_study(study_name=optuna_study_name(study_id), storage=store.optuna_storage())
    except Exception:  # never created, or already gone
        log.debug("no Optuna study to remove for study %s", study_id, exc_info=True)
    try:
        store.repo.delete_study(study_id)
    except Exception:
        log.exception("could not remove the half-created study %s", study_id)


@dataclass
class DriverSummary:
    """What one ``run`` did (the study's totals are in storage)."""

    study_id: int
    status: str
    dispatched: int = 0
    retried: int = 0
    requeued_expired: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    loop_s: float = 0.0  # time the loop spent outside waiting on Ray (scheduling + storage)
    trial_s: float = 0.0  # sum over collected trials of their own work (train_trial)
    report_s: float = 0.0  # sum of the trials' per-epoch report callbacks (storage, Optuna)


class StudyDriver:
    """Runs one study to completion, pause or cancellation. Safe to start again at any time."""

    def __init__(
        self,
        study_id: int,
        *,
        settings: Settings | None = None,
        executor: RayExecutor | None = None,
        store: TrialStore | None = None,
        max_parallel: int | None = None,
        poll_s: float = 0.2,
        marker_dir: str | None = None,
        on_progress: Callable[[dict[str, int]], None] | None = None,
        halt: threading.Event | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.study_id = study_id
        self.store = store or TrialStore(
            self.settings.database_url,
            self.settings.optuna_storage_url,
            max_attempts=self.settings.max_attempts,
        )
        self.executor = executor or RayExecutor(self.settings)
        self.max_parallel = max_parallel
        self.poll_s = poll_s
        self.marker_dir = marker_dir
        self.on_progress = on_progress
        # Set by the process that owns this driver when it shuts down (the server's runner):
        # stop at once, cancel what runs and hand it back; the study stays running.
        self.halt = halt or threading.Event()
        self.owner = f"driver:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.store.migrate()
        spec = self.store.repo.get_study_spec(study_id)
        if spec is None:
            raise KeyError(f"no study {study_id}")
        self.spec = spec
        self.objective, self.direction = sch.objective_of(self.spec.proxy)
        self.optuna = _load_optuna(self.store, self.spec, study_id)
        self.kind = kinds.get(self.spec.kind)
        self._inflight: dict[Any, tuple[int, int]] = {}  # ref -> (trial id, attempt)
        self.extra_planned = False  # the kind's last round (search: extra seeds) is planned
        self._numbers: dict[int, int | None] = {}  # trial id -> Optuna number (for tell)
        self.generator: Any = None  # generate studies: workers.generate.GenerativePlanner

    TERMINAL = _TERMINAL

    @property
    def in_flight(self) -> int:
        """Trials dispatched and not collected yet."""
        return len(self._inflight)

    # ---------------------------------------------------------------- Optuna bookkeeping

    def tell(self, number: int | None, status: str, value: float | None) -> None:
        """Tell Optuna how a trial ended (a value only for COMPLETE; FAIL for no value), and
        for a search kind store the study's importance now that the trial is written. A
        generate study's trials were planned, not asked (no ``number``): nothing to tell, but
        its importance is stored all the same, so its page never computes it on a read."""
        if number is not None:
            if status == "COMPLETE" and value is not None:
                self.optuna.tell(number, value, skip_if_finished=True)
            elif status == "PRUNED":
                self.optuna.tell(
                    number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True
                )
            else:  # diverged, failed, cancelled: no value for the sampler to learn from
                self.optuna.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        if self.kind.searches:
            self.store_importance()

    def store_importance(self) -> None:
        """Keep the study's property importance with its Optuna study, computed now that a
        trial finished (``storage.study_documents``): the search page then reads it instead
        of computing it, and a failure here costs the page its freshness, never the study."""
        from normfree.storage.study_documents import IMPORTANCE_ATTR
        from normfree.workers.importance import importance_with_counts

        try:
            doc = importance_with_counts(self.store.repo, self.study_id)
            self.optuna.set_user_attr(IMPORTANCE_ATTR, doc)
        except Exception:
            log.warning("study %s: importance not stored", self.study_id, exc_info=True)

    def _reconcile(self) -> None:
        """Tell Optuna about rows that ended while no driver watched; fail orphan asks."""
        rows = self.store.repo.list_trials(self.study_id)
        known = {r["optuna_number"] for r in rows if r["optuna_number"] is not None}
        open_trials = [
            t
            for t in self.optuna.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.RUNNING
        ]
        # A search's repeat ask has no row of its own: it waits for the row it repeats.
        repeats = {t.number for t in open_trials if REPEAT_OF in t.user_attrs}
        running = {t.number for t in open_trials} - repeats
        for r in rows:
            if r["optuna_number"] in running and r["status"] in _TERMINAL:
                self.tell(r["optuna_number"], r["status"], r["value"])
        for number in running - known:  # asked, then the driver died before inserting the row
            self.optuna.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        if repeats:
            answer_repeats(self)

    def _grid_number(self, leased: LeasedTrial) -> int:
        """Give a grid trial its Optuna trial (once; kept across attempts).

        Enqueue-then-ask pins the point: the grid is ours, Optuna records it (params are the
        trial's id and its axis values as user attributes, so optuna-dashboard can show them).
        """
        if leased.optuna_number is not None:
            return int(leased.optuna_number)
        params = {"trial_id": leased.id}
        dist = {"trial_id": optuna.distributions.IntDistribution(0, 2**31 - 1)}
        attrs = {**leased.axis_values, "normfree_trial": leased.id}
        self.optuna.enqueue_trial(params, user_attrs=attrs)  # the asked trial inherits them
        trial = self.optuna.ask(fixed_distributions=dist)
        self.store.repo.set_optuna_number(leased.id, trial.number)
        return trial.number

    # ---------------------------------------------------------------- the loop

    def _job(self, leased: LeasedTrial) -> TrialJob:
        prune = self.kind.prunes and self.spec.pruner != "none"
        number = leased.optuna_number
        if not self.kind.asks_optuna:
            number = self._grid_number(leased)
        self._numbers[leased.id] = number
        return TrialJob(
            trial_id=leased.id,
            study_id=self.study_id,
            config_json=leased.config.model_dump_json(),
            attempt=leased.attempt,
            owner=self.owner,
            database_url=self.store.url,
            lease_seconds=self.settings.lease_seconds,
            threads=self.settings.trial_threads,
            optuna_storage_url=self.store.optuna_url if prune and number is not None else None,
            optuna_study_name=optuna_study_name(self.study_id)
            if prune and number is not None
            else None,
            optuna_number=number if prune else None,
            objective=self.objective,
            marker_dir=self.marker_dir,
        )

    def _collect(self, ref: Any, summary: DriverSummary) -> None:
        trial_id, attempt = self._inflight.pop(ref)
        try:
            outcome: JobOutcome = self.executor.get(ref)
        except Exception as exc:  # worker killed, node lost, exception in the trainer
            # One public line with a reference id; the traceback goes to the log (and, after
            # that line, to token holders only: see api.security).
            reason = failure_reason(attempt, exc, trial_id=trial_id)
            self.store.repo.fail_trial(trial_id, self.owner, attempt, reason, retry=True)
            row = self.store.repo.get_trial(trial_id)
            assert row is not None
            if row["status"] == "WAITING":
                summary.retried += 1
            elif row["status"] in _TERMINAL:
                self.tell(row["optuna_number"], row["status"], row["value"])
            return
        summary.trial_s += outcome.trial_s
        summary.report_s += outcome.report_s
        if outcome.status in _TERMINAL:
            number = self._numbers.get(trial_id)
            self.tell(number, outcome.status, outcome.value)

    def _renew_inflight(self) -> None:
        """Keep the leases of dispatched trials alive from here too.

        The task renews its lease once it runs, but a task can wait for a worker process to
        start (seconds under load) before its body runs; the driver holds the lease meanwhile.
        A lease therefore lapses only when both the driver and the task are gone; a dead worker
        under a live driver is caught by Ray's task failure instead.
        """
        for trial_id, attempt in list(self._inflight.values()):
            self.store.repo.renew_lease(trial_id, self.owner, attempt, self.settings.lease_seconds)

    def _progress(self) -> dict[str, int]:
        counts = self.store.repo.study_progress(self.study_id)["counts"]
        if self.on_progress is not None:
            self.on_progress(counts)
        return counts

    def run(self, *, max_trials: int | None = None) -> DriverSummary:
        """Run until every trial is final, or the study is paused/cancelled.

        ``max_trials`` stops dispatching after that many trials (benchmarks, tests).
        """
        t0 = time.perf_counter()
        waited = 0.0
        summary = DriverSummary(self.study_id, "running")
        status = self.store.study_status(self.study_id)
        if status == "creating":  # half planned: running it would run half a study
            raise RuntimeError(
                f"study {self.study_id} is still being created (or its creation was cut off: "
                "the next server start removes it)"
            )
        if status in ("cancelled", "complete"):
            summary.status = status
            summary.counts = self._progress()
            return summary
        if status != "paused":
            self.store.repo.set_study_status(self.study_id, "running")
        self.executor.start()
        slots = self.max_parallel or self.executor.slots()
        self._reconcile()
        last_requeue = last_renew = 0.0
        try:
            while True:
                now = time.monotonic()
                if now - last_requeue > min(5.0, self.settings.lease_seconds / 3):
                    summary.requeued_expired += len(
                        self.store.repo.requeue_expired(max_attempts=self.settings.max_attempts)
                    )
                    last_requeue = now
                if now - last_renew > self.settings.lease_seconds / 3:
                    self._renew_inflight()
                    last_renew = now
                if self.halt.is_set():
                    break
                status = self.store.study_status(self.study_id)
                stopping = status in ("paused", "cancelled")
                budget_left = max_trials is None or summary.dispatched < max_trials
                while not stopping and budget_left and len(self._inflight) < slots:
                    leased = self.store.repo.lease_next(
                        self.study_id, self.owner, self.settings.lease_seconds
                    )
                    if leased is None and self.kind.refill(self):
                        continue
                    if leased is None:
                        break
                    job = self._job(leased)
                    self._inflight[self.executor.submit(job)] = (job.trial_id, job.attempt)
                    summary.dispatched += 1
                    budget_left = max_trials is None or summary.dispatched < max_trials
                if not self._inflight:
                    if stopping or not budget_left:
                        break
                    counts = self._progress()
                    if (
                        counts.get("WAITING", 0) + counts.get("RUNNING", 0) == 0
                        and not self.extra_planned
                        and self.kind.finish(self)
                    ):
                        continue
                    if counts.get("RUNNING", 0) == 0 and counts.get("WAITING", 0) == 0:
                        break
                    # RUNNING rows owned by a dead driver: wait for their leases to expire.
                    w0 = time.perf_counter()
                    time.sleep(min(1.0, self.settings.lease_seconds / 4))
                    waited += time.perf_counter() - w0
                    last_requeue = 0.0
                    continue
                w0 = time.perf_counter()
                done, _ = self.executor.wait(list(self._inflight), timeout=self.poll_s)
                waited += time.perf_counter() - w0
                for ref in done:
                    self._collect(ref, summary)
                if done:
                    self._progress()
        except Exception:
            # A real failure (storage, Optuna, the executor): say so instead of leaving a study
            # marked running that nothing drives; ``resume`` (or ``study run``) restarts it. An
            # interrupt is not a failure: the study stays running and a new driver picks it up.
            if self.store.study_status(self.study_id) == "running":
                self.store.repo.set_study_status(self.study_id, "failed")
            raise
        finally:
            # Leave nothing leased to this driver if we stop early (halt, KeyboardInterrupt,
            # error): cancel what runs and hand it back uncharged, so the next driver starts
            # it at once instead of waiting for the lease to lapse.
            for ref, (trial_id, attempt) in list(self._inflight.items()):
                self.executor.cancel(ref)
                self.store.repo.release_lease(trial_id, self.owner, attempt, "driver stopped")
            self._inflight.clear()
        # Rows finished by tasks this driver did not dispatch (a dead driver's, still running
        # on a cluster) were never told to Optuna by anyone: tell them now.
        self._reconcile()
        counts = self._progress()
        status = self.store.study_status(self.study_id)
        open_ = counts.get("WAITING", 0) + counts.get("RUNNING", 0)
        if status == "running" and open_ == 0 and (max_trials is None or budget_left):
            status = outcome(counts)  # complete, or failed when nothing trained (lifecycle)
            self.store.repo.set_study_status(self.study_id, status)
        summary.status = status
        summary.counts = counts
        summary.wall_s = time.perf_counter() - t0
        summary.loop_s = summary.wall_s - waited
        return summary

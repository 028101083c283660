"""A study's life: the transitions people ask for (pause, resume, cancel), and the runner that
drives studies in the API's process.

The transitions live here, once, because two front ends steer studies (the REST API and the
``normfree study`` commands) and two copies of the rules could disagree on what "resume" leads to
and what may be paused. The driver (:mod:`normfree.workers.driver`) sets the statuses that follow
from running: ``running`` when it starts, ``failed`` when it stops on an error, and when nothing is
left the outcome of its trials (:func:`outcome`, the one home of this rule):

- ``failed`` when no trial completed and at least one failed, diverged or was pruned: nothing
  was trained, whatever the reason (the reasons per arm are on the study page, the leaderboard
  and ``normfree study run``, which exits non-zero);
- ``complete`` otherwise, even when some trials failed: every view then shows how many
  (``progress.failed`` / ``progress.diverged``) and why, and the failed arms are listed apart,
  unranked (``storage.leaderboard``).

::

    pending --pause--> paused --resume--> running --pause--> paused
       |                 |                   |
       +-----cancel------+------cancel-------+--> cancelled        failed --resume--> running

``resume`` also restarts a study that has no driver (``restart=True``: left pending or running
by a stopped process, or failed): the caller then starts one, and the driver requeues the rows
whose leases expired.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from normfree.settings import Settings
    from normfree.storage.protocols import RepositoryLike

log = logging.getLogger(__name__)

Action = Literal["pause", "resume", "cancel"]
ACTIONS: tuple[Action, ...] = ("pause", "resume", "cancel")

# Study statuses after which nothing runs again.
DONE_STATUSES = frozenset({"complete", "cancelled"})

# action -> (statuses it applies to, the status it leads to)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "pause": (frozenset({"pending", "running"}), "paused"),
    "resume": (frozenset({"paused", "failed"}), "running"),
    "cancel": (frozenset({"pending", "running", "paused", "failed"}), "cancelled"),
}
# What resume also accepts when the caller is about to start a driver: a study with no driver.
_RESTARTABLE = frozenset({"pending", "running"})


def outcome(counts: Mapping[str, int]) -> str:
    """The final status of a study with nothing left to run, from its trial counts per status
    (``Repository.study_progress()["counts"]``): ``failed`` when nothing completed and something
    ran and failed (failed, diverged or pruned trials), else ``complete``."""
    ran = sum(counts.get(k, 0) for k in ("FAILED", "DIVERGED", "PRUNED"))
    return "failed" if counts.get("COMPLETE", 0) == 0 and ran > 0 else "complete"


class TransitionError(Exception):
    """An action that does not apply to the study's status (the API answers 409)."""

    def __init__(self, action: str, status: str, allowed: frozenset[str]) -> None:
        self.action, self.status, self.allowed = action, status, allowed
        super().__init__(
            f"cannot {action} a study that is {status}; {action} applies to "
            f"{', '.join(sorted(allowed))} studies"
        )


@dataclass(frozen=True)
class Transition:
    """What a transition did: the study's status before and after, and rows it dropped."""

    study_id: int
    action: str
    before: str
    after: str
    cancelled_waiting: int = 0


def allowed_from(action: str, *, restart: bool = False) -> frozenset[str]:
    """The statuses ``action`` applies to (``restart``: the caller will start a driver)."""
    if action not in TRANSITIONS:
        raise ValueError(f"unknown action {action!r}; choose from {', '.join(ACTIONS)}")
    allowed, _ = TRANSITIONS[action]
    if action == "resume" and restart:
        allowed = allowed | _RESTARTABLE
    return allowed


def steer(repo: RepositoryLike, study_id: int, action: str, *, restart: bool = False) -> Transition:
    """Apply ``action`` to the study; KeyError for no such study, TransitionError when it does
    not apply. Cancelling also drops the study's waiting trials (running ones stop at their next
    report, when they read the status)."""
    row = repo.get_study(study_id)
    if row is None:
        raise KeyError(study_id)
    allowed = allowed_from(action, restart=restart)
    before = str(row["status"])
    if before not in allowed:
        raise TransitionError(action, before, allowed)
    after = TRANSITIONS[action][1]
    repo.set_study_status(study_id, after)
    dropped = repo.cancel_waiting(study_id) if action == "cancel" else 0
    return Transition(study_id, action, before, after, dropped)


# ----------------------------------------------------------------------------- in-process runner


def _drive_with_ray(
    settings: Settings, halt: threading.Event | None = None
) -> Callable[[int], Any]:
    """The default way the runner drives a study: a StudyDriver on one shared local executor.

    ``halt`` (the runner's) stops the driver at once when the server shuts down. The executor
    advertises the cluster it starts (``settings.share_local_cluster``): study commands on this
    host join it instead of starting their own. ``drive.start()`` starts it ahead of any study
    (``StudyRunner.warm``)."""
    executor: Any = None

    def start() -> Any:
        nonlocal executor
        from normfree.workers.execution import RayExecutor

        if executor is None:
            executor = RayExecutor(settings, advertise=True).start()
            drive.executor = executor  # type: ignore[attr-defined]
        return executor

    def drive(study_id: int) -> Any:
        from normfree.workers.driver import StudyDriver

        return StudyDriver(study_id, settings=settings, executor=start(), halt=halt).run()

    drive.executor = None  # type: ignore[attr-defined]
    drive.start = start  # type: ignore[attr-defined]
    return drive


@dataclass(frozen=True)
class _Warm:
    """A queue item of the runner: start the cluster (``StudyRunner.warm``)."""

    start: Callable[[], Any]


class StudyRunner:
    """Drives studies submitted by the API, one at a time, on a daemon thread.

    The embedded default of ``normfree serve``: the API answers at once and this thread runs the
    study's driver (ask, lease, dispatch to a local Ray, collect). A paused study's run returns;
    ``resume`` submits it again. At scale studies are Ray jobs instead
    (:class:`normfree.workers.jobs.RayJobRunner`, the same duck type) and this runner is off.

    A study submitted while its previous run is still ending (a pause waits for in-flight trials
    to stop at their next epoch) is run again once that run returns: dropping it would leave a
    resumed study marked running with no driver.
    """

    def __init__(self, settings: Settings, drive: Callable[[int], Any] | None = None) -> None:
        self.settings = settings
        self._halt = threading.Event()
        self._drive = drive or _drive_with_ray(settings, self._halt)
        self._queue: queue.Queue[int | _Warm | None] = queue.Queue()
        self._active: set[int] = set()
        self._again: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._executor_down = False
        self.errors: dict[int, str] = {}

    def submit(self, study_id: int) -> None:
        """Queue a study's run; a study being run now is run once more after it returns."""
        with self._lock:
            if study_id in self._active:
                self._again.add(study_id)
                return
            self._active.add(study_id)
            self._ensure_thread()
        self._queue.put(study_id)

    def warm(self) -> bool:
        """Start the local cluster now, on the runner's thread (so a study submitted meanwhile
        waits for it rather than starting a second one), for ``normfree serve``: the first
        study, and study commands joining it, skip Ray's start-up. False when the drive
        function has no cluster to start."""
        start = getattr(self._drive, "start", None)
        if start is None:
            return False
        with self._lock:
            self._ensure_thread()
        self._queue.put(_Warm(start))
        return True

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._loop, name="normfree-study-runner", daemon=True
            )
            self._thread.start()

    def is_active(self, study_id: int) -> bool:
        with self._lock:
            return study_id in self._active

    def _loop(self) -> None:
        while True:
            study_id = self._queue.get()
            if study_id is None or self._halt.is_set():
                # Ray goes down on this thread, which started it: Ray starts its GCS and
                # raylet with PR_SET_PDEATHSIG, which the kernel fires when the *thread* that
                # forked them ends. Ended first, this thread took the cluster down under the
                # driver, whose ray.shutdown() then found the raylet dead and exited the
                # server with status 1 mid-shutdown, leaving Ray's agents running (seen with
                # `normfree serve` under a parent that had exited: nohup, systemd)
                self._shutdown_executor()
                return
            if isinstance(study_id, _Warm):
                try:
                    study_id.start()
                except Exception:  # the first study then starts it (and says why it cannot)
                    log.warning("could not start the local cluster ahead of studies", exc_info=True)
                continue
            try:
                self._drive(study_id)
                self.errors.pop(study_id, None)
            except Exception as exc:  # keep serving; the study page shows one line
                from normfree.workers.errors import new_reference

                ref = new_reference()
                log.exception("study %s stopped with an error [ref %s]", study_id, ref)
                self.errors[study_id] = (
                    f"the study's driver stopped with {type(exc).__name__} [ref {ref}]; "
                    "the details are in the server log"
                )
            finally:
                with self._lock:
                    if study_id in self._again:
                        self._again.discard(study_id)
                        self._queue.put(study_id)  # still active: run it again
                    else:
                        self._active.discard(study_id)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the study being driven (its running trials are handed back), then Ray.

        The driver thread is stopped and joined before Ray shuts down: a thread still inside
        a Ray call while the cluster goes away can crash the process. A study stopped here
        stays ``running``; the next ``resume`` or ``study run`` carries it on.
        """
        self._halt.set()
        self._queue.put(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("the study runner did not stop within %.0f s", timeout)
        self._shutdown_executor()  # done already where the runner's thread ended (_loop)

    def _shutdown_executor(self) -> None:
        """Shut the cluster's executor down, once (the runner's thread or :meth:`close`)."""
        with self._lock:
            executor = getattr(self._drive, "executor", None)
            if executor is None or self._executor_down:
                return
            self._executor_down = True
        try:
            executor.shutdown()
        except Exception:  # shutting down: nothing useful to do with the error
            log.warning("could not shut the study executor down cleanly", exc_info=True)

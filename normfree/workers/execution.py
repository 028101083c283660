"""Running one leased trial on Ray: the task, its heartbeats, and the embedded cluster.

The contract between the driver and a task is a :class:`TrialJob` (plain data: it crosses a
process boundary) and a :class:`JobOutcome` back. Everything durable goes through storage, never
through Ray: the task writes its epochs and its result itself, naming the lease it holds, so a
result is written exactly once even when a driver dies, a task is retried, or two processes race.

Why normfree owns retries, not Ray: Ray would rerun a crashed task with no idea that a database
row says who owns that trial; a retried run could then write beside a zombie. So every task runs
with ``max_retries=0``; a failure reaches the driver (or, when the driver died too, a lease that
stops being renewed) and the driver requeues the trial with ``attempt + 1``, up to
``settings.max_attempts``, then marks it FAILED with the reason.

Inside the task (:func:`run_trial_job`), one callback runs at every epoch report:

1. record the epoch's learning-curve point and renew the lease, in one transaction (a heartbeat
   thread also renews it from the moment the task starts, and the driver renews it while the
   task is in flight, so neither a cold worker nor a long epoch loses it);
2. read the study's status: paused or cancelled stops the trial at this report;
3. relay the objective to Optuna (``trial.report``) and ask ``should_prune``: the worker asks
   Optuna's storage itself, so the decision is made on the latest values of every other trial and
   reaches the running trial at that very epoch (the driver never sits in this path).

Returning True from the callback makes ``train_trial`` stop and return ``status="pruned"``; the
task then writes PRUNED (Optuna), hands the trial back to WAITING uncharged (pause), marks it
CANCELLED (cancel), or writes nothing (lease lost: someone else owns the trial now). Per-layer
diagnostics are written with the result.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from normfree.settings import Settings, get_settings
from normfree.specs import EpochRecord, TrialConfig
from normfree.storage.handle import Storage
from normfree.workers import localray
from normfree.workers.errors import ConfigError, failure_reason

log = logging.getLogger(__name__)

__all__ = ["JobOutcome", "RayExecutor", "TrialJob", "run_trial_job"]

StopReason = Literal["pruned", "paused", "cancelled", "lease_lost"]


@dataclass(frozen=True)
class TrialJob:
    """Everything a worker process needs to run one leased trial (plain, picklable data).

    The database URL travels here: each worker builds its own engine (engines do not survive a
    fork or a pickle), so a task runs the same on the local machine and on a remote Ray node.
    """

    trial_id: int
    study_id: int
    config_json: str
    attempt: int
    owner: str
    database_url: str
    lease_seconds: float
    threads: int = 1
    # Optuna relay: set for searches with a pruner (grid studies never prune).
    optuna_storage_url: str | None = None
    optuna_study_name: str | None = None
    optuna_number: int | None = None
    objective: str | None = None
    # When set, the task writes ``<marker_dir>/trial-<id>.pid`` (its worker's PID) on start:
    # operators (and the fault tests) can see which OS process runs which trial.
    marker_dir: str | None = None


@dataclass(frozen=True)
class JobOutcome:
    """What a task tells the driver. The row in storage is the truth; this is a summary."""

    trial_id: int
    attempt: int
    status: str  # COMPLETE | DIVERGED | PRUNED | FAILED | WAITING (paused) | LOST | CANCELLED
    written: bool  # whether this task's result write took effect (False: not the lease owner)
    value: float | None = None
    stop: StopReason | None = None
    worker: str | None = None
    wall_s: float = 0.0  # the whole task body, as the worker measured it
    trial_s: float = 0.0  # inside train_trial, minus the report callbacks: the trial's own work
    report_s: float = 0.0  # in the report callbacks: storage writes, lease, Optuna relay

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TrialStore(Storage):
    """The engine's handle on storage (``storage.Storage``) plus the lease operations a
    running trial needs."""

    def trial_by_key(self, study_id: int, key: str) -> dict[str, Any] | None:
        return self.repo.get_trial_by_key(study_id, key)

    def release(self, trial_id: int, owner: str, attempt: int) -> bool:
        """Give a leased trial back to WAITING, uncharged (the study was paused under it).

        The attempt number stays as the lease's fencing token (a late write from the paused run
        is still refused); storage counts the release instead, so no retry is charged.
        """
        return self.repo.release_lease(trial_id, owner, attempt, reason="study paused")

    def cancel_running(self, trial_id: int, owner: str, attempt: int) -> bool:
        """Stop a leased trial for good: CANCELLED, like the WAITING trials of its study."""
        return self.repo.cancel_running(trial_id, owner, attempt)


# One store per database URL per worker process: Ray reuses worker processes across tasks,
# and building engines per task would cost connection handshakes each time.
_STORES: dict[tuple[str, str | None], TrialStore] = {}


def _store(url: str, optuna_url: str | None = None) -> TrialStore:
    if (url, optuna_url) not in _STORES:
        _STORES[(url, optuna_url)] = TrialStore(url, optuna_url)
    return _STORES[(url, optuna_url)]


class _OptunaRelay:
    """Reports a running trial's objective to Optuna and asks its pruner, from the worker."""

    def __init__(self, job: TrialJob, store: TrialStore) -> None:
        import optuna

        assert job.optuna_study_name is not None and job.optuna_number is not None
        storage = store.optuna_storage()
        self.study = optuna.load_study(study_name=job.optuna_study_name, storage=storage)
        # Through the storage's public API: the study object's own id is private to Optuna.
        study_id = storage.get_study_id_from_name(job.optuna_study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, job.optuna_number)
        self.trial = optuna.trial.Trial(self.study, trial_id)
        self.objective = job.objective

    def should_prune(self, record: EpochRecord) -> bool:
        value = record.metrics.get(self.objective or "")
        if value is None and self.objective == "val_loss":
            value = record.val_loss
        if value is None:
            return False
        self.trial.report(float(value), step=record.epoch)
        return bool(self.trial.should_prune())


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_trial_job(job: TrialJob) -> JobOutcome:
    """Run one leased trial to its end and write the result under the lease. Pure Python.

    The Ray task is a thin wrapper around this function, so tests and benchmarks can also call it
    in-process. A ConfigError (the config itself is invalid) fails the trial here, once, with its
    reason; other exceptions propagate and the driver turns them into a retry.
    """
    t0 = time.perf_counter()
    if job.marker_dir:
        Path(job.marker_dir).mkdir(parents=True, exist_ok=True)
        (Path(job.marker_dir) / f"trial-{job.trial_id}.pid").write_text(str(os.getpid()))
    store = _store(job.database_url, job.optuna_storage_url)
    repo = store.repo
    stop: list[StopReason] = []
    done = threading.Event()

    def heartbeat() -> None:
        # Renew at a third of the lease: two renewals may be lost before the lease lapses.
        while not done.wait(job.lease_seconds / 3):
            if not repo.renew_lease(job.trial_id, job.owner, job.attempt, job.lease_seconds):
                if not stop:
                    stop.append("lease_lost")
                return

    # Heartbeats start before the heavy imports and the model build: a cold worker can spend
    # seconds there, and the lease must not lapse meanwhile.
    beat = threading.Thread(target=heartbeat, name=f"lease-{job.trial_id}", daemon=True)
    beat.start()

    try:
        return _train_and_write(job, store, stop, done, t0)
    except ConfigError as exc:
        # The config itself is wrong: another attempt would fail the same way. FAILED now, with
        # the reason (normfree's own message, public), instead of max_attempts tracebacks.
        reason = failure_reason(job.attempt, exc, trial_id=job.trial_id)
        ok = repo.fail_trial(job.trial_id, job.owner, job.attempt, reason, retry=False)
        wall = time.perf_counter() - t0
        return JobOutcome(job.trial_id, job.attempt, "FAILED", ok, None, None, worker_name(), wall)
    finally:
        done.set()  # whatever happens, this process stops renewing the lease
        beat.join(timeout=5)


def _train_and_write(
    job: TrialJob, store: TrialStore, stop: list[StopReason], done: threading.Event, t0: float
) -> JobOutcome:
    import torch

    from normfree.kernels import KernelOptions
    from normfree.workers.trainer import select_device, train_trial

    repo = store.repo
    torch.set_num_threads(max(1, job.threads))
    config = TrialConfig.model_validate_json(job.config_json)
    relay = None
    if job.optuna_study_name and job.optuna_number is not None:
        relay = _OptunaRelay(job, store)

    report_s = [0.0]

    def report(record: EpochRecord) -> bool:
        r0 = time.perf_counter()
        try:
            return _report(record)
        finally:
            report_s[0] += time.perf_counter() - r0

    def _report(record: EpochRecord) -> bool:
        if stop:
            return True
        # One transaction: the curve point and a lease renewal (a free heartbeat).
        held = repo.record_epoch(
            job.trial_id, job.owner, job.attempt, record, lease_seconds=job.lease_seconds
        )
        if not held:
            stop.append("lease_lost")
            return True
        status = store.study_status(job.study_id)
        if status in ("paused", "cancelled"):
            stop.append(status)  # type: ignore[arg-type]
            return True
        if relay is not None and relay.should_prune(record):
            stop.append("pruned")
            return True
        return False

    try:
        settings = get_settings()
        result = train_trial(
            config,
            report,
            threads=job.threads,
            device=select_device(settings),
            kernels=KernelOptions.from_settings(settings),
        )
    finally:
        done.set()
    reason = stop[0] if stop else None
    worker = worker_name()
    result = result.model_copy(update={"attempt": job.attempt, "worker": worker})

    def outcome(status: str, ok: bool, value: float | None = None) -> JobOutcome:
        wall = time.perf_counter() - t0
        trial_s = result.total_time_s - report_s[0]
        return JobOutcome(
            job.trial_id,
            job.attempt,
            status,
            ok,
            value,
            reason,
            worker,
            wall,
            trial_s,
            report_s[0],
        )

    if reason == "paused":
        return outcome("WAITING", store.release(job.trial_id, job.owner, job.attempt))
    if reason == "cancelled":
        return outcome("CANCELLED", store.cancel_running(job.trial_id, job.owner, job.attempt))
    if reason == "lease_lost":  # someone else owns this trial now: write nothing
        return outcome("LOST", False)
    ok = repo.finish_trial(job.trial_id, job.owner, job.attempt, result)
    return outcome(result.status.upper(), ok, result.value)


def _remote_body(job: TrialJob) -> JobOutcome:
    try:
        return run_trial_job(job)
    except Exception as exc:  # keep the traceback text: Ray's wrapper loses the local frames
        raise RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}") from None


class RayExecutor:
    """Submits trial jobs as Ray tasks, starting an embedded local Ray when none is given.

    ``settings.ray_address`` set: join that cluster (the trials run wherever Ray places them).
    Unset: start a private local cluster (``address="local"``, so a stale cluster file cannot make
    us join a dead cluster), bound to 127.0.0.1 only, capped object store, no dashboard (it costs
    ~1 GB), stopped with every process it started (see :mod:`normfree.workers.localray`). Only a
    cluster this object started is shut down by it; never ``ray stop``.

    Sharing (``settings.share_local_cluster``, on by default): an executor made with
    ``advertise=True`` (``normfree serve``'s) records the cluster it starts for other processes
    on this host; any other executor with no ``ray_address`` first joins such a cluster when one
    runs (``localray.running``), and starts its own only when none does or joining fails.
    ``cluster`` says which happened: ``started``, ``joined <address>`` or ``address <address>``.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        num_cpus: int | None = None,
        log_to_driver: bool = False,
        advertise: bool = False,
    ) -> None:
        self.settings = settings or get_settings()
        self.num_cpus = num_cpus
        self.log_to_driver = log_to_driver
        self.advertise = advertise
        self.owns_cluster = False
        self.joined = False
        self.cluster: str | None = None
        self._remote: Any = None

    def _join_shared(self, env: dict[str, Any]) -> bool:
        """Join the cluster another process on this host advertises; False when none runs or
        joining fails (the caller then starts its own)."""
        import ray

        if self.settings.ray_address or self.advertise or not self.settings.share_local_cluster:
            return False
        shared = localray.running()
        if shared is None:
            return False
        addr = shared.address
        try:
            localray.join(addr, shared.auth_mode, log_to_driver=self.log_to_driver, runtime_env=env)
        except Exception as exc:  # gone between the check and the join: start our own
            log.warning("could not join the local cluster at %s (%s); starting one", addr, exc)
            if ray.is_initialized():
                ray.shutdown()
            return False
        self.joined, self.cluster = True, f"joined {addr}"
        return True

    def start(self) -> RayExecutor:
        import ray

        if not ray.is_initialized():
            env = {"env_vars": {"OMP_NUM_THREADS": str(self.settings.trial_threads)}}
            if self._join_shared(env):
                pass
            elif self.settings.ray_address and localray.is_embedded(self.settings.ray_address):
                # another process's embedded (loopback-only) cluster on this host
                localray.join(
                    self.settings.ray_address, log_to_driver=self.log_to_driver, runtime_env=env
                )
            elif self.settings.ray_address:
                ray.init(
                    address=self.settings.ray_address,
                    log_to_driver=self.log_to_driver,
                    runtime_env=env,
                )
            else:
                # Private, loopback-only, and stopped whole on exit (workers.localray). Ours
                # from the first process on: an interrupted start is stopped too.
                self.owns_cluster = True
                localray.start(
                    num_cpus=self.num_cpus or os.cpu_count() or 1,
                    num_gpus=0 if not self.settings.trial_gpus else None,
                    object_store_memory=self.settings.ray_object_store_bytes,
                    include_dashboard=False,
                    log_to_driver=self.log_to_driver,
                    runtime_env=env,
                )
                self.cluster = "started"
                if self.advertise and self.settings.share_local_cluster:
                    localray.advertise()
            if self.cluster is None:
                self.cluster = f"address {self.settings.ray_address}"
        self._remote = ray.remote(max_retries=0)(_remote_body).options(
            num_cpus=self.settings.trial_cpus,
            num_gpus=self.settings.trial_gpus,
            max_retries=0,
            retry_exceptions=False,
        )
        return self

    def slots(self) -> int:
        """How many trials fit side by side on the cluster's current resources."""
        import ray

        res = ray.cluster_resources()
        by_cpu = int(res.get("CPU", 1) // max(self.settings.trial_cpus, 1e-9))
        if self.settings.trial_gpus:
            by_cpu = min(by_cpu, int(res.get("GPU", 0) // self.settings.trial_gpus))
        return max(1, by_cpu)

    def submit(self, job: TrialJob) -> Any:
        if self._remote is None:
            self.start()
        return self._remote.remote(job)

    @staticmethod
    def wait(refs: list[Any], timeout: float) -> tuple[list[Any], list[Any]]:
        import ray

        if not refs:
            return [], []
        return ray.wait(refs, num_returns=1, timeout=timeout)

    @staticmethod
    def get(ref: Any) -> JobOutcome:
        import ray

        return ray.get(ref)

    @staticmethod
    def cancel(ref: Any) -> None:
        import ray

        ray.cancel(ref, force=True)

    def shutdown(self) -> None:
        """Stop the cluster this executor started; leave a joined one running (only this
        process's connection to it ends)."""
        if self.owns_cluster:
            localray.stop()
        elif self.joined:
            import ray

            ray.shutdown()
        self.owns_cluster = self.joined = False
        self._remote = None

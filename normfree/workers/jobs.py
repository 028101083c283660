"""Studies as Ray jobs: at most one running driver per study, idempotent by study id.

Why jobs: a study's driver (:class:`normfree.workers.driver.StudyDriver`) may run for hours. On a
cluster it should live *on the cluster*, not inside the API process or a laptop's shell that may
go away. The Ray Jobs API runs a shell command (the job's *entrypoint*) under a supervisor on the
head node and keeps its status and logs; our entrypoint is the engine's own resumable runner,
``normfree study run ID --json``, so a job is nothing more than "a driver that Ray babysits".

Why idempotent by study id: job ids are a pure function of the study id and the run number
(:func:`job_submission_id`: ``normfree-study-7`` for the first driver, ``normfree-study-7-r1``
for the next, ...), so "submit study 7" asked twice (a retried HTTP request, two API replicas,
an impatient user) yields one job. The rule, applied by :func:`submit_study` to the study's
latest job:

- it is PENDING or RUNNING: return it, submit nothing;
- the study is complete or cancelled: return the latest job (if any), submit nothing;
- the study is paused: submit nothing (a driver would stop at once); resume it, then submit;
- otherwise (no job yet, or the latest ended while the study still has work: a driver that
  crashed, a lost node, a study resumed after a pause): submit run ``n + 1``. Drivers are
  resumable (leases, results written once), so the new driver continues where the old one
  stopped and nothing is trained twice.

Two submitters racing compute the same next id; Ray refuses the second ``submit_job`` ("already
exists") and we answer with the job the first one created.

Why a new id per run instead of reusing one: Ray names a job's supervisor actor after its
submission id, and a stopped job's supervisor lingers for a moment after the job reads STOPPED;
a job resubmitted under the same id in that window is failed by Ray ("Job supervisor actor
died"). Fresh ids also keep every earlier driver's log for the post-mortem.

Environment of the job: the cluster's own (``NORMFREE_*`` set on the head node, e.g. by
docker-compose) plus what the submitter passes here: its database URL (so the job drives the
study in the database where it was created; turn off with ``pass_database_url=False`` when the
cluster's URL differs, e.g. a host name only resolvable inside the cluster network) and
``NORMFREE_RAY_ADDRESS=auto``, which makes the driver join the cluster that runs the job
(Ray sets ``RAY_ADDRESS`` for job entrypoints) instead of starting an embedded local Ray.
Token authentication (on by default in this Ray) is Ray's business: clients and nodes read
``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN`` themselves, or a caller passes ``token=`` explicitly.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import asdict, dataclass
from typing import Any

from normfree.settings import Settings, get_settings

__all__ = [
    "ACTIVE_JOB_STATES",
    "RayJobRunner",
    "StudyJob",
    "job_log",
    "job_submission_id",
    "stop_study_job",
    "study_entrypoint",
    "study_job",
    "submit_study",
    "wait_for_study_job",
]

ACTIVE_JOB_STATES = ("PENDING", "RUNNING")
_DONE_STUDY_STATES = ("complete", "cancelled")


def job_submission_id(study_id: int, run: int = 0) -> str:
    """The Ray job id of a study's ``run``-th driver: a pure function (the idempotency key)."""
    base = f"normfree-study-{int(study_id)}"
    return base if run == 0 else f"{base}-r{int(run)}"


def _run_of(study_id: int, submission_id: str | None) -> int | None:
    """The run number encoded in a job id of this study; None for other ids."""
    m = re.fullmatch(rf"normfree-study-{int(study_id)}(?:-r(\d+))?", submission_id or "")
    if m is None:
        return None
    return int(m.group(1) or 0)


def study_entrypoint(
    study_id: int, *, command: str = "normfree", parallel: int | None = None
) -> str:
    """The shell command the job runs: the engine's resumable driver for this study.

    ``command`` is how the ``normfree`` CLI is invoked on the cluster's head node (the image puts
    it on ``PATH``); it is quoted, so a path with spaces cannot turn into extra arguments.
    """
    parts = [*shlex.split(command), "study", "run", str(int(study_id)), "--json"]
    if parallel is not None:
        parts += ["--parallel", str(int(parallel))]
    return shlex.join(parts)


@dataclass(frozen=True)
class StudyJob:
    """A study's Ray job as the submitter sees it (plain data: printed by the CLI as JSON)."""

    study_id: int
    submission_id: str
    status: str | None  # Ray's JobStatus name, None when no job exists (or none was submitted)
    submitted: bool  # this call created (or re-created) the job
    reason: str  # why this call did or did not submit, in words
    entrypoint: str | None = None
    message: str | None = None  # Ray's message for the job (e.g. the failure of its entrypoint)
    address: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _client(address: str, token: str | None = None) -> Any:
    """A Jobs API client. ``token``: send this Ray auth token explicitly.

    Without it, Ray attaches the token itself when the process runs with
    ``RAY_AUTH_MODE=token`` (Ray reads that mode once per process, at first use). An explicit
    token serves a process that holds it elsewhere (a secret store, a test harness).
    """
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    return JobSubmissionClient(address, headers=headers)


def _resolve_address(address: str | None, settings: Settings) -> str:
    address = address or settings.ray_jobs_address
    if not address:
        raise ValueError(
            "no Ray Jobs address: pass one (e.g. http://ray-head:8265) or set "
            "NORMFREE_RAY_JOBS_ADDRESS"
        )
    return address


def _latest(client: Any, study_id: int) -> tuple[int, Any | None]:
    """The study's latest run number and its job (-1, None when the cluster has none)."""
    runs = {}
    for info in client.list_jobs():
        run = _run_of(study_id, getattr(info, "submission_id", None))
        if run is not None:
            runs[run] = info
    if not runs:
        return -1, None
    run = max(runs)
    return run, runs[run]


def _job_info(client: Any, submission_id: str) -> Any | None:
    """Ray's JobDetails for the id, None when Ray has no such job (it answers 404 then)."""
    try:
        return client.get_job_info(submission_id)
    except RuntimeError as exc:
        if "404" in str(exc) or "does not exist" in str(exc):
            return None
        raise


def _status_name(info: Any) -> str | None:
    if info is None:
        return None
    status = info.status
    return str(getattr(status, "value", status))


def _study_status(settings: Settings, study_id: int) -> str:
    """The study's status in storage; KeyError when there is no such study (fail before Ray)."""
    from sqlalchemy.exc import DBAPIError

    from normfree import storage

    store = storage.open(settings, migrate=False)
    try:
        study = store.repo.get_study(study_id)
    except DBAPIError as exc:  # no schema there (a wrong URL, or nothing created yet)
        raise KeyError(f"no study {study_id} in {settings.database_url}: {exc.orig}") from None
    finally:
        store.close()
    if study is None:
        raise KeyError(f"no study {study_id} in {settings.database_url}")
    return str(study["status"])


def _job_env(settings: Settings, pass_database_url: bool) -> dict[str, str]:
    env = {"NORMFREE_RAY_ADDRESS": "auto"}
    if pass_database_url:
        env["NORMFREE_DATABASE_URL"] = settings.database_url
        if settings.optuna_storage_url:
            env["NORMFREE_OPTUNA_STORAGE_URL"] = settings.optuna_storage_url
    return env


def study_job(
    study_id: int,
    *,
    address: str | None = None,
    settings: Settings | None = None,
    token: str | None = None,
) -> StudyJob:
    """The study's latest Ray job (status None when the cluster has none)."""
    settings = settings or get_settings()
    address = _resolve_address(address, settings)
    run, info = _latest(_client(address, token), study_id)
    return StudyJob(
        study_id=study_id,
        submission_id=job_submission_id(study_id, max(run, 0)),
        status=_status_name(info),
        submitted=False,
        reason="status" if info is not None else "no job for this study on the cluster",
        entrypoint=getattr(info, "entrypoint", None),
        message=getattr(info, "message", None),
        address=address,
    )


def submit_study(
    study_id: int,
    *,
    address: str | None = None,
    settings: Settings | None = None,
    command: str = "normfree",
    parallel: int | None = None,
    pass_database_url: bool = True,
    env: dict[str, str] | None = None,
    token: str | None = None,
) -> StudyJob:
    """Make sure the study's driver runs as a Ray job on the cluster at ``address``.

    Idempotent by study id (see the module docstring for the rule). ``address`` is the cluster's
    Jobs API (``http://head:8265``; default ``settings.ray_jobs_address``). ``env`` adds
    environment variables for the job (after ours, so it may override them).

    Raises ``KeyError`` when the study does not exist in ``settings.database_url`` (checked
    before anything reaches the cluster), ``ValueError`` without an address, and Ray's own errors
    when the cluster cannot be reached.
    """
    settings = settings or get_settings()
    address = _resolve_address(address, settings)
    study_status = _study_status(settings, study_id)
    client = _client(address, token)
    run, info = _latest(client, study_id)
    status = _status_name(info)
    entrypoint = study_entrypoint(study_id, command=command, parallel=parallel)

    def answer(submitted: bool, reason: str, sid: str, current: Any) -> StudyJob:
        return StudyJob(
            study_id=study_id,
            submission_id=sid,
            status=_status_name(current),
            submitted=submitted,
            reason=reason,
            entrypoint=getattr(current, "entrypoint", None) or (entrypoint if submitted else None),
            message=getattr(current, "message", None),
            address=address,
        )

    latest_sid = job_submission_id(study_id, max(run, 0))
    if status in ACTIVE_JOB_STATES:
        return answer(False, f"a job for this study is already {status.lower()}", latest_sid, info)
    if study_status in _DONE_STUDY_STATES:
        return answer(False, f"the study is {study_status}; nothing to run", latest_sid, info)
    if study_status == "paused":
        return answer(False, "the study is paused; resume it, then submit", latest_sid, info)
    sid = job_submission_id(study_id, run + 1)
    runtime_env = {"env_vars": {**_job_env(settings, pass_database_url), **(env or {})}}
    try:
        client.submit_job(
            entrypoint=entrypoint,
            submission_id=sid,
            runtime_env=runtime_env,
            metadata={"normfree_study_id": str(study_id), "normfree_run": str(run + 1)},
        )
    except RuntimeError as exc:
        if "already exists" not in str(exc):
            raise
        # Another submitter won the race for this id: theirs is the study's job.
        first = _job_info(client, sid)
        return answer(False, "another submitter created this study's job first", sid, first)
    reason = f"resubmitted after {latest_sid} ended ({status})" if status else "submitted"
    return answer(True, reason, sid, _job_info(client, sid))


def job_log(
    study_id: int,
    *,
    address: str | None = None,
    settings: Settings | None = None,
    token: str | None = None,
) -> str:
    """The latest job's log: the driver's output (its ``--json`` summary is the last line)."""
    settings = settings or get_settings()
    client = _client(_resolve_address(address, settings), token)
    run, _ = _latest(client, study_id)
    return str(client.get_job_logs(job_submission_id(study_id, max(run, 0))))


def stop_study_job(
    study_id: int,
    *,
    address: str | None = None,
    settings: Settings | None = None,
    timeout: float = 60.0,
    token: str | None = None,
) -> bool:
    """Stop the study's driver job and wait until Ray reports it ended (True if it was active).

    This kills the driver, not the study: its running trials lose their owner, their leases
    lapse, and the next submission (same job id) requeues and finishes them. To halt a study,
    pause or cancel it instead (``normfree study pause|cancel``). Waiting makes "stop, then
    submit again" safe to script: a submission while the old job still winds down would be
    answered "already running".
    """
    settings = settings or get_settings()
    client = _client(_resolve_address(address, settings), token)
    run, info = _latest(client, study_id)
    sid = job_submission_id(study_id, max(run, 0))
    if _status_name(info) not in ACTIVE_JOB_STATES:
        return False
    stopped = bool(client.stop_job(sid))
    deadline = time.monotonic() + timeout
    while _status_name(_job_info(client, sid)) in ACTIVE_JOB_STATES:
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
    return stopped


def wait_for_study_job(
    study_id: int,
    *,
    address: str | None = None,
    settings: Settings | None = None,
    timeout: float = 600.0,
    poll_s: float = 1.0,
    token: str | None = None,
) -> StudyJob:
    """Poll until the study's job ends (or ``timeout`` seconds pass); return its last state."""
    deadline = time.monotonic() + timeout
    while True:
        job = study_job(study_id, address=address, settings=settings, token=token)
        if job.status not in ACTIVE_JOB_STATES or time.monotonic() > deadline:
            return job
        time.sleep(poll_s)


class RayJobRunner:
    """Drop-in for the API's in-process ``StudyRunner``: ``submit`` hands a study to the cluster.

    Same duck type (``submit``, ``is_active``, ``close``, ``errors``), so the API can switch from
    driving studies itself (embedded default) to submitting them as Ray jobs when
    ``settings.ray_jobs_address`` is set, and stay a thin, restartable web process.
    """

    def __init__(
        self, settings: Settings, *, command: str = "normfree", token: str | None = None
    ) -> None:
        self.settings = settings
        self.command = command
        self.token = token
        self.errors: dict[int, str] = {}
        self.jobs: dict[int, StudyJob] = {}

    def submit(self, study_id: int) -> None:
        try:
            self.jobs[study_id] = submit_study(
                study_id, settings=self.settings, command=self.command, token=self.token
            )
            self.errors.pop(study_id, None)
        except Exception as exc:  # the API keeps serving; the study page shows the reason
            self.errors[study_id] = f"{type(exc).__name__}: {exc}"

    def is_active(self, study_id: int) -> bool:
        try:
            job = study_job(study_id, settings=self.settings, token=self.token)
            return job.status in ACTIVE_JOB_STATES
        except Exception:  # cluster unreachable: we cannot claim the study is being driven
            return False

    def close(self) -> None:
        """Nothing to stop: the jobs belong to the cluster and outlive this process by design."""

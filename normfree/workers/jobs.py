"""Studies as Ray jobs: one job per study, idempotent by study id.

Why jobs: a study's driver (:class:`normfree.workers.driver.StudyDriver`) may run for hours. On a
cluster it should live *on the cluster*, not inside the API process or a laptop's shell that may
go away. The Ray Jobs API runs a shell command (the job's *entrypoint*) under a supervisor on the
head node and keeps its status and logs; our entrypoint is the engine's own resumable runner,
``normfree study run ID --json``, so a job is nothing more than "a driver that Ray babysits".

Why idempotent by study id: the job's ``submission_id`` is derived from the study id
(:func:`job_submission_id`), so "submit study 7" asked twice (a retried HTTP request, two API
replicas, an impatient user) yields one job. The rule, applied by :func:`submit_study`:

- a job for the study is PENDING or RUNNING: return it, submit nothing;
- the study is complete or cancelled: return the last job (if any), submit nothing;
- the study is paused: submit nothing (a driver would stop at once); resuming it and submitting
  again starts a fresh driver;
- otherwise (no job yet, or the last job ended while the study still has work: a driver that
  crashed, a node lost, a study resumed after a pause): delete the ended job record and submit
  again under the *same* id. Drivers are resumable (leases, idempotent result writes), so a new
  driver continues where the old one stopped and nothing is trained twice.

Two submitters racing for the same id are settled by Ray itself: the second ``submit_job`` is
refused with "already exists", and we answer with the job the first one created.

Environment of the job: the cluster's own (``NORMFREE_*`` set on the head node, e.g. by
docker-compose) plus what the submitter passes here: its database URL (so the job drives the
study in the database where it was created; turn off with ``pass_database_url=False`` when the
cluster's URL differs, e.g. a host name only resolvable inside the cluster network) and
``NORMFREE_RAY_ADDRESS=auto``, which makes the driver join the cluster that runs the job
(Ray sets ``RAY_ADDRESS`` for job entrypoints) instead of starting an embedded local Ray.
Token authentication (Ray >= 2.5x, on by default) is Ray's business: the client and the cluster
read ``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN`` themselves.
"""

from __future__ import annotations

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
_ENDED_JOB_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
_DONE_STUDY_STATES = ("complete", "cancelled")


def job_submission_id(study_id: int) -> str:
    """The Ray job id of a study's driver: a pure function of the study id (the idempotency key)."""
    return f"normfree-study-{int(study_id)}"


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


def _client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address)


def _resolve_address(address: str | None, settings: Settings) -> str:
    address = address or settings.ray_jobs_address
    if not address:
        raise ValueError(
            "no Ray Jobs address: pass one (e.g. http://ray-head:8265) or set "
            "NORMFREE_RAY_JOBS_ADDRESS"
        )
    return address


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

    from normfree.storage import Database, Repository

    db = Database(settings.database_url)
    try:
        study = Repository(db).get_study(study_id)
    except DBAPIError as exc:  # no schema there (a wrong URL, or nothing created yet)
        raise KeyError(f"no study {study_id} in {settings.database_url}: {exc.orig}") from None
    finally:
        db.dispose()
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
    study_id: int, *, address: str | None = None, settings: Settings | None = None
) -> StudyJob:
    """The current Ray job of a study (status None when the cluster has none)."""
    settings = settings or get_settings()
    address = _resolve_address(address, settings)
    sid = job_submission_id(study_id)
    info = _job_info(_client(address), sid)
    return StudyJob(
        study_id=study_id,
        submission_id=sid,
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
    sid = job_submission_id(study_id)
    study_status = _study_status(settings, study_id)
    client = _client(address)
    info = _job_info(client, sid)
    status = _status_name(info)
    entrypoint = study_entrypoint(study_id, command=command, parallel=parallel)

    def answer(submitted: bool, reason: str, current: Any) -> StudyJob:
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

    if status in ACTIVE_JOB_STATES:
        return answer(False, f"a job for this study is already {status.lower()}", info)
    if study_status in _DONE_STUDY_STATES:
        return answer(False, f"the study is {study_status}; nothing to run", info)
    if study_status == "paused":
        return answer(False, "the study is paused; resume it, then submit", info)
    if status in _ENDED_JOB_STATES:
        # The last driver ended with work left (crash, lost node, resumed after a pause): its
        # record goes, the id is reused, so "one job id per study" still holds.
        client.delete_job(sid)
    runtime_env = {"env_vars": {**_job_env(settings, pass_database_url), **(env or {})}}
    try:
        client.submit_job(
            entrypoint=entrypoint,
            submission_id=sid,
            runtime_env=runtime_env,
            metadata={"normfree_study_id": str(study_id)},
        )
    except RuntimeError as exc:
        if "already exists" not in str(exc):
            raise
        # Another submitter won the race for this id: theirs is the study's job.
        first = _job_info(client, sid)
        return answer(False, "another submitter created this study's job first", first)
    reason = "resubmitted after the previous job ended" if status else "submitted"
    return answer(True, reason, _job_info(client, sid))


def job_log(study_id: int, *, address: str | None = None, settings: Settings | None = None) -> str:
    """The study job's log: the driver's output (its final ``--json`` summary is the last line)."""
    settings = settings or get_settings()
    client = _client(_resolve_address(address, settings))
    return str(client.get_job_logs(job_submission_id(study_id)))


def stop_study_job(
    study_id: int,
    *,
    address: str | None = None,
    settings: Settings | None = None,
    timeout: float = 60.0,
) -> bool:
    """Stop the study's driver job and wait until Ray reports it ended (True if it was active).

    This kills the driver, not the study: its running trials lose their owner, their leases
    lapse, and the next submission (same job id) requeues and finishes them. To halt a study,
    pause or cancel it instead (``normfree study pause|cancel``). Waiting makes "stop, then
    submit again" safe to script: a submission while the old job still winds down would be
    answered "already running".
    """
    settings = settings or get_settings()
    client = _client(_resolve_address(address, settings))
    sid = job_submission_id(study_id)
    if _status_name(_job_info(client, sid)) not in ACTIVE_JOB_STATES:
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
) -> StudyJob:
    """Poll until the study's job ends (or ``timeout`` seconds pass); return its last state."""
    deadline = time.monotonic() + timeout
    while True:
        job = study_job(study_id, address=address, settings=settings)
        if job.status not in ACTIVE_JOB_STATES or time.monotonic() > deadline:
            return job
        time.sleep(poll_s)


class RayJobRunner:
    """Drop-in for the API's in-process ``StudyRunner``: ``submit`` hands a study to the cluster.

    Same duck type (``submit``, ``is_active``, ``close``, ``errors``), so the API can switch from
    driving studies itself (embedded default) to submitting them as Ray jobs when
    ``settings.ray_jobs_address`` is set, and stay a thin, restartable web process.
    """

    def __init__(self, settings: Settings, *, command: str = "normfree") -> None:
        self.settings = settings
        self.command = command
        self.errors: dict[int, str] = {}
        self.jobs: dict[int, StudyJob] = {}

    def submit(self, study_id: int) -> None:
        try:
            self.jobs[study_id] = submit_study(
                study_id, settings=self.settings, command=self.command
            )
            self.errors.pop(study_id, None)
        except Exception as exc:  # the API keeps serving; the study page shows the reason
            self.errors[study_id] = f"{type(exc).__name__}: {exc}"

    def is_active(self, study_id: int) -> bool:
        try:
            return study_job(study_id, settings=self.settings).status in ACTIVE_JOB_STATES
        except Exception:  # cluster unreachable: we cannot claim the study is being driven
            return False

    def close(self) -> None:
        """Nothing to stop: the jobs belong to the cluster and outlive this process by design."""

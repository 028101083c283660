"""``normfree study submit`` and ``normfree study job``: studies as Ray jobs on a cluster.

``normfree study property ... --detach`` creates a study; ``normfree study submit ID`` then hands
its driver to the cluster as a Ray job (one per study, idempotent by id: see
:mod:`normfree.workers.jobs`), so the shell that created the study can go away. The commands join
the engine's ``study`` group (they are about studies) but live here, with the deployment code.
"""

from __future__ import annotations

from typing import Any

import click

from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option
from normfree.cli.study import study

address_option = click.option(
    "--address",
    default=None,
    metavar="URL",
    help="The cluster's Ray Jobs API, e.g. http://ray-head:8265 (default: "
    "NORMFREE_RAY_JOBS_ADDRESS).",
)


def _settings(database_url: str | None) -> Any:
    from normfree.settings import get_settings

    base = get_settings()
    return base.model_copy(update={"database_url": database_url}) if database_url else base


def _human(job: dict[str, Any]) -> None:
    state = job["status"] or "no job"
    click.echo(f"study {job['study_id']}: job {job['submission_id']} {state} ({job['reason']})")
    if job.get("message"):
        click.echo(job["message"].strip().splitlines()[0], err=True)


@study.command("submit")
@click.argument("study_id", type=int)
@address_option
@click.option("--parallel", type=int, default=None, help="Trials side by side in the job.")
@click.option(
    "--command",
    default="normfree",
    show_default=True,
    help="How the normfree CLI is invoked on the cluster's head node.",
)
@click.option(
    "--cluster-db",
    is_flag=True,
    help="Let the job use the cluster's NORMFREE_DATABASE_URL instead of passing this one.",
)
@click.option("--wait", is_flag=True, help="Block until the job ends; exit 1 unless it succeeded.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="For --wait.")
@db_option
@json_option
def study_submit(
    study_id: int,
    address: str | None,
    parallel: int | None,
    command: str,
    cluster_db: bool,
    wait: bool,
    timeout: float,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Run study STUDY_ID's driver as a Ray job on a cluster (submitting twice is harmless)."""
    from normfree.workers.jobs import submit_study, wait_for_study_job

    settings = _settings(database_url)
    try:
        job = submit_study(
            study_id,
            address=address,
            settings=settings,
            command=command,
            parallel=parallel,
            pass_database_url=not cluster_db,
        )
    except (KeyError, ValueError) as exc:
        fail(str(exc).strip("'\""), as_json, code=1)
    except Exception as exc:  # cluster unreachable, auth refused: say which and where
        fail(f"cannot submit to the Ray cluster: {type(exc).__name__}: {exc}", as_json, code=1)
    if wait:
        job = wait_for_study_job(study_id, address=job.address, settings=settings, timeout=timeout)
    emit(job.as_dict(), as_json, _human)
    if wait and job.status != "SUCCEEDED":
        raise SystemExit(1)


@study.command("job")
@click.argument("study_id", type=int)
@address_option
@click.option("--logs", is_flag=True, help="Also print the job's log (the driver's output).")
@click.option(
    "--stop",
    is_flag=True,
    help="Stop the driver job (the study keeps its state: submit again to resume; to halt the "
    "study itself use `normfree study pause`).",
)
@json_option
def study_job_cmd(
    study_id: int, address: str | None, logs: bool, stop: bool, as_json: bool
) -> None:
    """Status of study STUDY_ID's Ray job (and its log with --logs)."""
    from normfree.workers.jobs import job_log, stop_study_job, study_job

    try:
        stopped = stop_study_job(study_id, address=address) if stop else None
        job = study_job(study_id, address=address).as_dict()
        if stop:
            job["stopped"] = stopped
        if logs and job["status"] is not None:
            job["logs"] = job_log(study_id, address=address)
    except ValueError as exc:
        fail(str(exc), as_json, code=1)
    except Exception as exc:  # cluster unreachable, auth refused
        fail(f"cannot reach the Ray cluster: {type(exc).__name__}: {exc}", as_json, code=1)

    def human(r: dict[str, Any]) -> None:
        _human(r)
        if r.get("logs"):
            click.echo(r["logs"])

    emit(job, as_json, human)

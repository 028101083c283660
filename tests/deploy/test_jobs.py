"""Ray job submission without a cluster: ids, entrypoints and the errors a user sees first.

The cluster behaviour (one job per study, resubmission after a lost driver) is tested against a
real multi-node Ray in ``test_multinode.py``; these checks cover what must hold before any
request reaches Ray.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from normfree.cli import main
from normfree.settings import Settings
from normfree.workers.jobs import _run_of, job_submission_id, study_entrypoint, submit_study


def test_job_ids_are_a_function_of_study_and_run() -> None:
    assert job_submission_id(7) == "normfree-study-7"
    assert job_submission_id(7, 2) == "normfree-study-7-r2"
    assert _run_of(7, "normfree-study-7") == 0
    assert _run_of(7, "normfree-study-7-r12") == 12
    # Another study's ids (a prefix match would confuse study 1 with 10) and foreign jobs.
    for other in ("normfree-study-70", "normfree-study-7-rx", "raysubmit_abc", None, ""):
        assert _run_of(7, other) is None
    assert _run_of(1, "normfree-study-10") is None


def test_entrypoint_runs_the_engine_driver_and_is_quoted() -> None:
    assert study_entrypoint(3) == "normfree study run 3 --json"
    assert study_entrypoint(3, parallel=4).endswith("--json --parallel 4")
    cmd = study_entrypoint(3, command="'/opt/my env/bin/normfree'")
    assert shlex.split(cmd)[:4] == ["/opt/my env/bin/normfree", "study", "run", "3"]


def test_no_address_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'nf.db'}", ray_jobs_address=None)
    with pytest.raises(ValueError, match="NORMFREE_RAY_JOBS_ADDRESS"):
        submit_study(1, settings=settings)


def test_unknown_study_fails_before_contacting_ray(tmp_path: Path) -> None:
    from normfree.storage import Database

    url = f"sqlite:///{tmp_path / 'nf.db'}"
    Database(url).migrate()
    # Port 1 refuses connections: reaching Ray at all would raise a connection error instead.
    settings = Settings(database_url=url, ray_jobs_address="http://127.0.0.1:1")
    with pytest.raises(KeyError, match="no study 42"):
        submit_study(42, settings=settings)
    args = ["study", "submit", "42", "--db", url, "--address", "http://127.0.0.1:1", "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1
    assert "no study 42" in json.loads(res.output.strip().splitlines()[-1])["error"]


def test_unreachable_cluster_is_reported(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["study", "job", "1", "--address", "http://127.0.0.1:1", "--json"]
    )
    assert res.exit_code == 1
    assert (
        "cannot reach the Ray cluster" in json.loads(res.output.strip().splitlines()[-1])["error"]
    )


def test_api_submits_studies_as_ray_jobs_when_a_jobs_address_is_set(tmp_path: Path) -> None:
    """With a Ray jobs address the API hands studies to the cluster instead of driving them."""
    from normfree.api.services import ServiceState, StudyRunner
    from normfree.workers.jobs import RayJobRunner

    url = f"sqlite:///{tmp_path / 'api.db'}"
    on_cluster = ServiceState.open(
        Settings(database_url=url, ray_jobs_address="http://127.0.0.1:1"), prescreen=False
    )
    embedded = ServiceState.open(Settings(database_url=url), prescreen=False)
    try:
        assert isinstance(on_cluster.runner, RayJobRunner)
        assert isinstance(embedded.runner, StudyRunner)
    finally:
        for state in (on_cluster, embedded):
            state.runner.close()
            state.repo.db.dispose()

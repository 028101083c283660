"""Issue 16 over REST: every probe of the hostile-user session, as a regression test.

Real app, real SQLite, real HTTP through the ASGI app; the trial that fails on a bad config runs
the real worker body (``run_trial_job``) in-process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from normfree.storage import optuna_storage_url
from tests.api import bodies
from tests.api.conftest import Api, internal_error

STUDY = bodies.study()


def _refused(api: Api, body: dict[str, Any] | str, code: str = "invalid_study") -> dict:
    if isinstance(body, str):
        r = api.client.post(
            "/api/studies",
            content=body,
            headers={**api.auth, "Content-Type": "application/json"},
        )
    else:
        r = api.client.post("/api/studies", json=body, headers=api.auth)
    assert r.status_code == 422, (r.status_code, r.text)
    err = r.json()
    assert err["error"] in (code, "validation_error"), err
    return err


def _nothing_written(api: Api) -> None:
    assert api.repo.list_studies() == []
    assert optuna.get_all_study_names(optuna_storage_url(api.settings)) == []


# -- 1: exponent towers -------------------------------------------------------------------


def test_power_tower_is_refused_before_any_printer(api: Api) -> None:
    tower = "((((((tanh(u)**32)**32)**32)**32)**32)**32)"
    r = api.client.post(
        "/api/candidates", json={"name": "tower", "formula": tower}, headers=api.auth
    )
    assert r.status_code == 422
    assert "too large once powers are expanded" in r.json()["message"]
    assert api.repo.get_candidate("tower") is None
    got = api.client.get(f"/api/candidates/{tower}")
    assert got.status_code == 422 and "too large" in got.json()["message"]


# -- 2: data sources named, never pathed ----------------------------------------------------


@pytest.mark.parametrize(
    "dataset", ["npz:/etc/shadow", "folder:/root", "../../etc/passwd", "/etc/passwd", "a/b"]
)
def test_study_datasets_are_names_not_paths(api: Api, dataset: str) -> None:
    err = _refused(api, {**STUDY, "params": {"dataset": dataset}})
    assert "dataset" in err["message"]
    _nothing_written(api)


def test_datasets_resolve_inside_the_data_root_only(make_api, sqlite_database_url, tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    np.savez(root / "mine.npz", x=np.zeros((20, 8, 8)), y=np.arange(20) % 2)
    (root / "escape.npz").symlink_to("/etc/hostname")  # a link out of the root
    api = make_api(sqlite_database_url, data_root=root)
    err = _refused(api, {**STUDY, "params": {"dataset": "escape"}})
    assert "outside the data root" in err["message"]
    ok = api.client.post(
        "/api/studies", json={**STUDY, "params": {"dataset": "mine"}}, headers=api.auth
    )
    assert ok.status_code == 201, ok.text


# -- 3 + 4: one public line with a reference; a bad config fails once --------------------------


def test_config_error_fails_once_and_errors_are_one_public_line(
    make_api, sqlite_database_url: str, tmp_path: Path
) -> None:
    from normfree.workers.errors import failure_reason
    from normfree.workers.execution import TrialJob, run_trial_job

    root = tmp_path / "data"
    root.mkdir()
    np.savez(root / "gone.npz", x=np.zeros((20, 8, 8)), y=np.arange(20) % 2)
    api = make_api(sqlite_database_url, data_root=root, max_attempts=3)
    r = api.client.post(
        "/api/studies",
        json={**STUDY, "values": [0.5, 1.0], "params": {"dataset": "gone"}},
        headers=api.auth,
    )
    assert r.status_code == 201, r.text
    study_id = r.json()["id"]
    (root / "gone.npz").unlink()  # valid at creation, invalid when the trial runs
    repo = api.repo
    repo.set_study_status(study_id, "running")
    leased = repo.lease_next(study_id, "test-owner", 60.0)
    assert leased is not None
    job = TrialJob(
        trial_id=leased.id,
        study_id=study_id,
        config_json=leased.config.model_dump_json(),
        attempt=leased.attempt,
        owner="test-owner",
        database_url=api.settings.database_url,
        lease_seconds=60.0,
    )
    # The worker resolves the dataset name against the data root of its own settings.
    from normfree import settings as settings_module
    from normfree.workers import data

    settings_module.get_settings.cache_clear()
    data.get_dataset.cache_clear()
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMFREE_DATA_ROOT", str(root))
    try:
        outcome = run_trial_job(job)
    finally:
        mp.undo()
        settings_module.get_settings.cache_clear()
    assert outcome.status == "FAILED"
    row = repo.get_trial(leased.id)
    assert row["status"] == "FAILED" and row["attempt"] == 1  # not retried
    assert "configuration error: unknown dataset 'gone'" in row["error"]

    # Any other failure: one public line with a reference id, the traceback for token holders.
    other = repo.lease_next(study_id, "test-owner", 60.0)
    assert other is not None
    secret = 'Traceback (most recent call last):\n  File "/srv/normfree/x.py", line 1\nip=10.1.2.3'
    reason = failure_reason(1, RuntimeError(f"ValueError: boom\n{secret}"), trial_id=other.id)
    assert repo.fail_trial(other.id, "test-owner", other.attempt, reason, retry=False)
    public = api.client.get(f"/api/trials/{other.id}").json()["error"]
    assert "\n" not in public and "[ref " in public and "/srv" not in public
    assert "10.1.2.3" not in public
    private = api.client.get(f"/api/trials/{other.id}", headers=api.auth).json()["error"]
    assert private.startswith(public) and "/srv/normfree/x.py" in private


def test_internal_errors_answer_one_line_with_a_reference(api: Api) -> None:
    r = internal_error(api, "secret /srv/path detail")
    assert r.status_code == 500
    body = r.json()
    assert body["detail"]["reference"] in body["message"]
    assert "/srv/path" not in r.text


# -- 3 (cost): budgets, overrides, estimate -----------------------------------------------


def test_creation_answers_the_estimate(api: Api) -> None:
    r = api.client.post("/api/studies", json=STUDY, headers=api.auth)
    assert r.status_code == 201
    est = r.json()["estimate"]
    assert est["trials"] == 1 and 0 < est["trial_seconds"] <= est["budget_seconds"]


@pytest.mark.parametrize(
    ("options", "params", "needle"),
    [
        ({"dim": [1_000_000_000]}, {}, "dim"),
        ({}, {"overrides": {"__init__": 1}}, "__init__"),
        ({}, {"overrides": {"depth": 2.5}}, "integer"),
        ({}, {"overrides": {"qkv_bias": "no"}}, "true or false"),
        ({}, {"overrides": {"dim": 30, "heads": 4}}, "divisible"),
    ],
)
def test_overrides_checked_against_the_preset(api: Api, options, params, needle) -> None:
    body = {**STUDY, "kind": "options" if options else "property", "options": options}
    body["params"] = params
    if options:
        body.pop("transform")
        body.pop("values")
    err = _refused(api, body)
    assert needle in err["message"]
    _nothing_written(api)


def test_study_cost_budget(make_api, sqlite_database_url: str) -> None:
    api = make_api(sqlite_database_url, max_study_trial_seconds=100.0)
    err = _refused(api, {**STUDY, "epochs": 1000})
    assert "NORMFREE_MAX_STUDY_TRIAL_SECONDS" in err["message"]
    _nothing_written(api)
    assert api.client.post("/api/studies", json=STUDY, headers=api.auth).status_code == 201


# -- 5: rate limits and headers -----------------------------------------------------------


def test_anonymous_formula_reads_are_rate_limited(make_api, sqlite_database_url: str) -> None:
    api = make_api(sqlite_database_url, anonymous_parses_per_minute=3)
    for i in range(3):
        assert api.client.get(f"/api/candidates/tanh(u)+0.00{i + 1}").status_code == 200
    r = api.client.get("/api/candidates/tanh(u)+0.004")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert api.client.get("/api/candidates/erf").status_code == 200  # catalog names: a lookup
    authed = api.client.get("/api/candidates/tanh(u)+0.005", headers=api.auth)
    assert authed.status_code == 200  # token holders are not limited


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/health", None),
        ("GET", "/api/studies/999", None),
        ("GET", "/static/style.css", None),
        ("POST", "/api/candidates", "x" * 20_000),
    ],
)
def test_security_headers_on_every_response(api: Api, method, path, body) -> None:
    r = api.client.request(method, path, content=body, headers=api.auth)
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert r.headers["Referrer-Policy"]


def test_not_found_names_the_real_list_route(api: Api) -> None:
    msg = api.client.get("/api/studies/999").json()["message"]
    assert "/api/studies" in msg and "studys" not in msg


# -- 6: the whole real line ----------------------------------------------------------------


@pytest.mark.parametrize("formula", ["sqrt(150-abs(u))", "1/(exp(u-150)-1)"])
def test_domain_beyond_the_grid_is_refused(api: Api, formula: str) -> None:
    body = {"name": "beyond", "formula": formula}
    r = api.client.post("/api/candidates", json=body, headers=api.auth)
    assert r.status_code == 422 and r.json()["error"] == "invalid_formula", r.text
    assert "u=" in r.json()["message"]


# -- 7 + 8: one transaction; strict, finite params ------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {**STUDY, "params": {"seed0": 10**30}},
        {**STUDY, "params": {"seed0": -10}},
        {**STUDY, "params": {"seed0": 1.5}},
        {**STUDY, "params": {"lr": -1}},
        {**STUDY, "params": {"lr": 1e308}},
        {**STUDY, "params": {"warmup_epochs": 1e9}},
        {**STUDY, "params": {"affine": "no"}},
        {**STUDY, "seeds": 2, "params": {"seed0": 2**31 - 1}},
    ],
)
def test_nonsensical_params_are_422_and_write_nothing(api: Api, body: dict[str, Any]) -> None:
    _refused(api, body)
    _nothing_written(api)


@pytest.mark.parametrize(
    "raw",
    [
        '"params": {"lr": NaN}',
        '"params": {"weight_decay": Infinity}',
        '"params": {"overrides": {"layerscale_init": -Infinity}}',
        '"kind": "options", "options": {"alpha0": [NaN]}',
    ],
)
def test_non_finite_numbers_are_refused(api: Api, raw: str) -> None:
    base = {k: v for k, v in STUDY.items() if k != "kind"}
    if '"kind"' in raw:
        base = {k: v for k, v in base.items() if k not in ("transform", "values")}
    text = json.dumps(base)[:-1] + ", " + raw + "}"
    if '"kind"' not in raw:
        text = text[:-1] + ', "kind": "property"}'
    _refused(api, text)
    _nothing_written(api)


def test_a_failure_after_the_first_write_leaves_nothing(api: Api) -> None:
    from normfree.storage import Repository

    mp = pytest.MonkeyPatch()

    def broken(self: Any, *_a: Any, **_k: Any) -> Any:
        raise OverflowError("the database refused a value")

    from normfree.api import services
    from normfree.api.errors import ApiError
    from normfree.api.schemas import StudyCreate

    # The REST route plans in a worker process (api.offload), out of this patch's reach; the
    # in-process path runs the same check and plan (services.check_request, services.plan).
    mp.setattr(Repository, "add_trials", broken)
    try:
        with pytest.raises(ApiError) as err:
            services.create_study(api.app.state.services, StudyCreate(**STUDY))
    finally:
        mp.undo()
    assert err.value.status_code == 422
    _nothing_written(api)


def test_public_trial_hides_worker_hosts(make_api, sqlite_database_url: str) -> None:
    """A worker id is ``host:pid``: anonymous readers get an opaque stable id, and an error
    stored before errors had a public line (a lost lease names its worker) is masked too."""
    from normfree.workers.errors import public_worker

    api = make_api(sqlite_database_url)
    r = api.client.post("/api/studies", json={**STUDY, "values": [0.5]}, headers=api.auth)
    assert r.status_code == 201, r.text
    study_id = r.json()["id"]
    repo = api.repo
    repo.set_study_status(study_id, "running")
    owner = "10.0.0.7:4242"
    leased = repo.lease_next(study_id, owner, 60.0)
    assert leased is not None
    old_style = f"lease expired on attempt 1 (worker {owner} lost) on host fe80::1:2:3"
    assert repo.fail_trial(leased.id, owner, leased.attempt, old_style, retry=False)
    body = api.client.get(f"/api/trials/{leased.id}")
    assert body.status_code == 200
    assert "10.0.0.7" not in body.text and "fe80::1:2:3" not in body.text
    public = body.json()
    assert public["error"].startswith("lease expired on attempt 1 (worker ")
    if public.get("worker"):
        assert public["worker"] == public_worker(owner)
    private = api.client.get(f"/api/trials/{leased.id}", headers=api.auth).json()
    assert owner in private["error"]


def test_a_refused_formula_in_a_candidate_url_says_why(api: Api) -> None:
    """Not a 404 as if it were an unknown name: the parser's reason, as on submission."""
    r = api.client.get("/api/candidates/sqrt(150-abs(u))")
    assert r.status_code == 422, r.text
    assert "u" in r.json()["message"] and r.json()["message"] != ""
    assert api.client.get("/api/candidates/nosuchfunction").status_code == 404
    assert api.client.get("/api/candidates/shift_h(erf,%200.5)").status_code == 200

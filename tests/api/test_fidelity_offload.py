"""Issue 28, point 1: fidelity reports are computed in the offload's worker processes.

A report's bootstrap and trial reads are CPU seconds; in the server's thread pool they held the
GIL while every other client waited. The in-app tests check the report a worker computes is the
one the server would have computed; the flood test uses a real server, as ``test_offload``.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import httpx
from sqlalchemy import select

from normfree.api import fidelity
from normfree.settings import Settings
from normfree.storage.models import ReferenceEntryRow, ReferenceSetRow
from normfree.testing.live import live_server
from normfree.testing.seeding import seed_property_study
from tests.api.flood import HEALTH_LIMIT_S, health_during_flood


def test_the_fidelity_report_is_computed_in_a_worker_and_unchanged(
    make_api: Any, sqlite_database_url: str
) -> None:
    api = make_api(sqlite_database_url, prescreen=False)
    sid = seed_property_study(api.settings).study_id
    pool = api.app.state.offload
    assert not any(s.pid for s in pool.slots)
    r = api.client.get(f"/api/fidelity?study_id={sid}")
    assert r.status_code == 200, r.text
    assert any(s.pid for s in pool.slots)  # a worker process computed it
    # the same report as the server's own process computes (bootstrap seeds are fixed)
    here = fidelity.report(api.app.state.services, study_id=sid)
    assert r.json() == _json(here)
    assert r.json()["summary"]["pairs_resolvable"] >= 4
    # refusals travel back from the worker as themselves
    assert api.client.get("/api/fidelity?proxy=nope").status_code == 404
    assert api.client.get("/api/fidelity?study_id=999").status_code == 404
    assert api.client.get(f"/api/fidelity?study_id={sid}&reference=nope").status_code == 404
    assert api.client.get("/api/fidelity").status_code == 422
    # the page too: its report from a worker, its figures drawn here
    page = api.client.get(f"/fidelity?study_id={sid}")
    assert page.status_code == 200 and 'id="fidelity-figure-0"' in page.text
    assert api.client.get("/fidelity?proxy=nope").status_code == 404


def test_a_fidelity_report_past_the_time_limit_is_refused(
    make_api: Any, sqlite_database_url: str
) -> None:
    api = make_api(sqlite_database_url, prescreen=False, offload_workers=1)
    sid = seed_property_study(api.settings).study_id
    pool = api.app.state.offload
    pool.slots[0]._start()
    pool.seconds = 0.001  # the report's limit is the larger of the pool's and a floor
    orig = fidelity.FIDELITY_SECONDS_FLOOR
    fidelity.FIDELITY_SECONDS_FLOOR = 0.001
    try:
        r = api.client.get(f"/api/fidelity?study_id={sid}")
    finally:
        fidelity.FIDELITY_SECONDS_FLOOR = orig
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "too_expensive" and "fidelity report" in r.json()["message"]
    assert pool.slots[0].replaced == 1


def _json(report: Any) -> Any:
    import json

    return json.loads(report.model_dump_json())


def test_health_answers_while_one_client_floods_fidelity_reports(
    sqlite_database_url: str,
) -> None:
    """One client asks for 20 reports of distinct settings (proxies, the study, reference sets)
    at once: every one is computed (none cached), and /api/health answers within a second."""
    sid = seed_property_study(Settings(database_url=sqlite_database_url)).study_id
    env = {"NORMFREE_OFFLOAD_QUEUE_PER_CLIENT": "30"}
    queries = [f"study_id={sid}"] + [f"study_id={sid}&reference=nope{i}" for i in range(3)]
    queries += [f"proxy={p}" for p in ("vit-tiny", "vit-screen", "dit-tiny", "dit-screen")]
    queries += [f"study_id={sid + 1 + i}" for i in range(12)]
    with live_server(sqlite_database_url, "--no-run-studies", env=env) as base:
        with concurrent.futures.ThreadPoolExecutor(2) as ex:  # both workers started
            list(ex.map(lambda q: httpx.get(f"{base}api/fidelity?{q}", timeout=120), ["a", "b"]))

        worst, codes = health_during_flood(base, [f"api/fidelity?{q}" for q in queries])
    assert worst < HEALTH_LIMIT_S, f"/api/health took {worst:.2f} s during the flood"
    assert codes[0] == 200 and set(codes) <= {200, 404}, codes


def test_the_reference_list_is_cached_until_a_set_is_stored_or_deleted(
    make_api: Any, sqlite_database_url: str
) -> None:
    """A read of the list no longer rechecks the built-in set's rows (27 ms a read under the
    hostile benchmark): it is cached on the references' read version, which every write moves."""
    api = make_api(sqlite_database_url, prescreen=False)
    first = api.client.get("/api/references")
    etag = first.headers["etag"]
    assert [i["name"] for i in first.json()["items"]] == ["published"]
    assert api.client.get("/api/references", headers={"If-None-Match": etag}).status_code == 304
    body = {"name": "mine", "source": "s", "rows": [{"setting": "s", "family": "vit",
            "metric": "accuracy", "direction": "maximize", "cell": {"function": "tanh"},
            "value_low": 80, "value_high": 80}]}  # fmt: skip
    assert api.client.post("/api/references", json=body, headers=api.auth).status_code == 201
    after = api.client.get("/api/references", headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.headers["etag"] != etag
    assert [i["name"] for i in after.json()["items"]] == ["published", "mine"]
    assert api.client.delete("/api/references/mine", headers=api.auth).status_code == 200
    assert [i["name"] for i in api.client.get("/api/references").json()["items"]] == ["published"]


def test_a_candidate_s_curve_is_computed_once_per_function() -> None:
    """The hostile benchmark's readers: half a candidate read's server time was its curve."""
    from normfree.api import services
    from normfree.api.services.candidates import _plot
    from normfree.search_space import catalog

    erf, tanh = catalog.resolve("erf"), catalog.resolve("tanh")
    first = services.candidate_plot(erf)
    assert services.candidate_plot(erf) is first  # remembered
    assert first == _plot(erf)  # and the same as computed afresh
    assert services.candidate_plot(tanh).f != first.f  # per function


def test_an_import_parsed_in_a_worker_is_stored_without_parsing_again(
    make_api: Any, sqlite_database_url: str, monkeypatch: Any
) -> None:
    """The import's formulas are parsed in a worker process; storing the set (the server's
    thread pool) resolved every cell again for its key: sympy with the GIL held, ~1 s for
    bench_hostile's 4 long formulas, during which the event loop (``/api/health``) waited for
    the GIL at every switch. The keys the worker computed now travel with the set."""
    from normfree.fidelity import reference

    api = make_api(sqlite_database_url, prescreen=False)
    formulas = [
        f"tanh(u*{i + 2}.37)*exp(-u**2*0.0{i + 1})+atan(u*{i + 3})*0.{i + 1}" for i in range(3)
    ]
    rows = "".join(f"h,vit,accuracy,maximize,,{f},,,{80 + i}\n" for i, f in enumerate(formulas))
    parsed_here: list[str] = []
    real = reference._fingerprint

    def fingerprint(function: str) -> str:  # the server process must not parse the import's
        if function in formulas:
            parsed_here.append(function)
        return real(function)

    monkeypatch.setattr(reference, "_fingerprint", fingerprint)
    r = api.client.post(
        "/api/references?name=keys-travel&source=test",
        content="setting,family,metric,direction,resolution,function,shift,alpha,value\n" + rows,
        headers={**api.auth, "Content-Type": "text/csv"},
    )
    assert r.status_code == 201, r.text
    assert parsed_here == []
    assert any(s.pid for s in api.app.state.offload.slots)  # a worker process parsed them
    monkeypatch.undo()
    # the stored keys are the ones the server would have computed
    with api.app.state.services.db.read() as conn:
        stored = conn.execute(
            select(ReferenceEntryRow.function, ReferenceEntryRow.cell_key)
            .join(ReferenceSetRow, ReferenceSetRow.id == ReferenceEntryRow.set_id)
            .where(ReferenceSetRow.name == "keys-travel")
            .order_by(ReferenceEntryRow.position)
        ).all()
    assert [f for f, _k in stored] == formulas
    assert [k for _f, k in stored] == [
        reference.cell_key(reference.Cell(function=f)) for f in formulas
    ]

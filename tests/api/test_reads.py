"""Reads at scale through real HTTP: cached answers that follow the data, ETags, paged trials,
and a candidate's results found under every name and label its function ran as."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.testing.seeding import Seeded
from tests.api.conftest import Api, wait_for_analyses

HTML = {"Accept": "text/html"}


def _finish(repo, study_id: int, value: float = 0.9, limit: int | None = None) -> list[int]:
    """Act as a worker: lease and finish the study's waiting trials (at most ``limit``)."""
    done = []
    while (limit is None or len(done) < limit) and (
        lease := repo.lease_next(study_id, "reader-test", 60)
    ) is not None:
        result = TrialResult(
            status="complete", objective="val_acc", direction="maximize",
            metrics={"val_acc": value + lease.config.seed / 100},
        )  # fmt: skip
        assert repo.finish_trial(lease.id, "reader-test", lease.attempt, result)
        done.append(lease.id)
    return done


def _study(repo, names: list[NormSpec], seeds: int = 2, proxy: str = "vit-tiny") -> int:
    sid = repo.create_study(StudySpec(kind="options", proxy=proxy, name="reads"))
    items = [
        (TrialConfig(proxy=proxy, norm=n, seed=s, epochs=1), {"function": n.name, "seed": s})
        for n in names
        for s in range(seeds)
    ]
    repo.add_trials(sid, items)
    repo.set_study_status(sid, "running")
    return sid


@pytest.mark.postgres
def test_cached_reads_follow_a_finishing_trial(half_finished: tuple[Api, int]) -> None:
    api, sid = half_finished
    c, repo = api.client, api.repo
    urls = [
        "/api/leaderboards/vit-tiny",
        f"/api/studies/{sid}?trials=false",
        "/?proxy=vit-tiny",
        f"/studies/{sid}",
    ]
    first = {u: c.get(u, headers=HTML) for u in urls}
    for u, r in first.items():
        assert r.status_code == 200, (u, r.text)
        etag = r.headers["etag"]
        assert r.headers["cache-control"] == "no-cache"
        again = c.get(u, headers={**HTML, "If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    assert first["/?proxy=vit-tiny"].headers["content-encoding"] == "gzip"  # stored gzipped once
    board = first["/api/leaderboards/vit-tiny"].json()
    assert sum(r["n_total"] for r in board["rows"]) == 2
    summary = first[f"/api/studies/{sid}?trials=false"].json()
    assert summary["progress"]["complete"] == 2
    # a worker finishes the rest: every cached read answers anew
    _finish(repo, sid)
    for u, r in first.items():
        fresh = c.get(u, headers={**HTML, "If-None-Match": r.headers["etag"]})
        assert fresh.status_code == 200, u
        assert fresh.headers["etag"] != r.headers["etag"], u
    board = c.get("/api/leaderboards/vit-tiny").json()
    assert sum(r["n_total"] for r in board["rows"]) == 4
    assert {r["n"] for r in board["rows"]} == {2}
    summary = c.get(f"/api/studies/{sid}?trials=false").json()
    assert summary["progress"]["complete"] == 4 and summary["trials"] == []
    assert {cell["n"] for cell in summary["cells"]} == {2}
    # the detail agrees with the summary (cells) and lists its trials (one page: all 4)
    full = c.get(f"/api/studies/{sid}").json()
    assert full["cells"] == summary["cells"] and len(full["trials"]) == 4
    # storing a candidate changes the groups a leaderboard shows
    etag = c.get("/api/leaderboards/vit-tiny").headers["etag"]
    repo.upsert_candidate({"name": "erf", "group": "mine", "properties": {}})
    after = c.get("/api/leaderboards/vit-tiny", headers={"If-None-Match": etag})
    assert after.status_code == 200
    assert {r["group"] for r in after.json()["rows"]} == {"mine", "baseline"}


def test_a_lease_moves_a_studys_progress_not_its_cells(
    make_api: Callable[..., Api], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's lease (half of a study's commits) shows in the study's progress at once,
    while its cells, which read only finished trials, are not built again; a finish builds
    them."""
    from normfree.api.services import studies

    api = make_api(database_url, prescreen=False)
    sid = _study(api.repo, [NormSpec(name="erf"), NormSpec(name="tanh")])
    _finish(api.repo, sid, limit=1)
    built: list[int] = []
    cells = studies._cells

    def counted(trials: object, spec: object) -> object:
        built.append(1)
        return cells(trials, spec)  # type: ignore[arg-type]

    monkeypatch.setattr(studies, "_cells", counted)
    url = f"/api/studies/{sid}?trials=false"
    first = api.client.get(url).json()
    assert first["progress"]["running"] == 0 and len(built) == 1
    lease = api.repo.lease_next(sid, "reader-test", 60)
    assert lease is not None
    leased = api.client.get(url).json()
    assert leased["progress"]["running"] == 1 and leased["cells"] == first["cells"]
    assert len(built) == 1  # the cells were not built again
    result = TrialResult(
        status="complete", objective="val_acc", direction="maximize", metrics={"val_acc": 0.5}
    )
    assert api.repo.finish_trial(lease.id, "reader-test", lease.attempt, result)
    done = api.client.get(url).json()
    assert done["progress"]["complete"] == 2 and len(built) == 2
    assert sum(c["n"] for c in done["cells"]) == 2


def test_trial_etag_changes_with_every_write(api: Api) -> None:
    repo = api.repo
    sid = _study(repo, [NormSpec(name="erf")], seeds=1)
    (tid,) = [t["id"] for t in repo.list_trials(sid)]
    first = api.client.get(f"/api/trials/{tid}")
    assert first.json()["status"] == "WAITING"
    etag = first.headers["etag"]
    assert api.client.get(f"/api/trials/{tid}", headers={"If-None-Match": etag}).status_code == 304
    _finish(repo, sid)
    done = api.client.get(f"/api/trials/{tid}", headers={"If-None-Match": etag})
    assert done.status_code == 200 and done.json()["status"] == "COMPLETE"
    page = api.client.get(f"/trials/{tid}", headers=HTML)
    assert page.status_code == 200 and "COMPLETE" in page.text


def test_candidate_list_is_cached_until_a_candidate_is_stored(api: Api) -> None:
    first = api.client.get("/api/candidates?source=user")
    assert first.json()["count"] == 0
    etag = first.headers["etag"]
    assert (
        api.client.get("/api/candidates?source=user", headers={"If-None-Match": etag}).status_code
        == 304
    )
    api.client.post(
        "/api/candidates", json={"name": "squash3", "formula": "u/(3+abs(u))"}, headers=api.auth
    )
    after = api.client.get("/api/candidates?source=user", headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.json()["items"][0]["name"] == "squash3"


@pytest.mark.postgres
def test_a_candidate_is_cached_until_a_write_it_shows(
    make_api: Callable[..., Api], database_url: str
) -> None:
    """``GET /api/candidates/{name}`` and its page are built once per version (issue 28: the
    one read built on every request), and move with its results, its row and its prescreen."""
    api = make_api(database_url, prescreen=False)
    sid = _study(api.repo, [NormSpec(name="erf"), NormSpec(name="tanh")])
    _finish(api.repo, sid, limit=2)  # erf's two seeds
    c, cache = api.client, api.app.state.services.cache
    urls = ["/api/candidates/tanh", "/candidates/tanh"]
    first = {u: c.get(u, headers=HTML) for u in urls}
    # a read may queue an analysis: its end moves every board's key. Until two rounds of reads
    # answer alike, an analysis was still landing (one did in CI right after the wait)
    for _ in range(60):
        wait_for_analyses(api)
        again = {u: c.get(u, headers=HTML) for u in urls}
        if all(again[u].headers.get("etag") == first[u].headers.get("etag") for u in urls):
            break
        first = again
        time.sleep(0.5)
    assert all(r.status_code == 200 for r in first.values())
    misses = cache.misses
    for u, r in first.items():
        again = c.get(u, headers=HTML)
        assert again.status_code == 200 and again.headers["etag"] == r.headers["etag"], u
        assert c.get(u, headers={"If-None-Match": r.headers["etag"]}).status_code == 304
    assert cache.misses == misses  # answered from the cache: nothing built
    n_before = sum(r["n_total"] for r in first[urls[0]].json()["results"])
    _finish(api.repo, sid)  # tanh's trials finish: its results change
    for u, r in first.items():
        fresh = c.get(u, headers={**HTML, "If-None-Match": r.headers["etag"]})
        assert fresh.status_code == 200, u
    after = c.get(urls[0]).json()
    assert sum(r["n_total"] for r in after["results"]) > n_before
    # a stored candidate's prescreen written later (by the process that ran it) moves its read
    c.post("/api/candidates", json={"name": "sq3", "formula": "u/(3+abs(u))"}, headers=api.auth)
    # a new function's analysis moves every candidate's key when it lands: let it land first
    wait_for_analyses(api)
    mine = c.get("/api/candidates/sq3")
    assert mine.status_code == 200
    other = c.get(urls[0]).headers["etag"]
    done = {"status": "done", "ok": True, "proxy": "vit-tiny", "seconds": 1.0}
    assert api.repo.set_candidate_prescreen("sq3", done)
    moved = c.get("/api/candidates/sq3", headers={"If-None-Match": mine.headers["etag"]})
    assert moved.status_code == 200 and moved.json()["prescreen"]["status"] == "done"
    # ... and only its own: another candidate's answer is still the cached one
    assert c.get(urls[0], headers={"If-None-Match": other}).status_code == 304
    # a formula's answer is built, never stored (distinct formulas would push the rest out)
    entries = len(cache._entries)
    assert c.get("/api/candidates/u*0.5+tanh(u)*0.25").status_code == 200
    assert len(cache._entries) == entries


@pytest.mark.postgres
def test_a_study_is_paged_by_default(make_api: Callable[..., Api], database_url: str) -> None:
    """``GET /api/studies/N`` as documented lists one page of trials, never all of them (issue
    27: 1,030 embedded trials were 225 KB at 41 requests/s), cached until the study moves."""
    api = make_api(database_url, prescreen=False)
    sid = _study(api.repo, [NormSpec(name="erf")], seeds=130)
    _finish(api.repo, sid, limit=5)
    c = api.client
    first = c.get(f"/api/studies/{sid}")
    body = first.json()
    assert len(body["trials"]) == 100 and body["trials_next_cursor"] == str(
        body["trials"][-1]["id"]
    )
    assert body["progress"]["complete"] == 5
    assert (
        c.get(f"/api/studies/{sid}", headers={"If-None-Match": first.headers["etag"]}).status_code
        == 304
    )
    rest = c.get(f"/api/studies/{sid}?trials_cursor={body['trials_next_cursor']}").json()
    same = c.get(f"/api/studies/{sid}/trials?cursor={body['trials_next_cursor']}").json()
    assert [t["id"] for t in rest["trials"]] == [t["id"] for t in same["items"]]
    assert len(rest["trials"]) == 30 and rest["trials_next_cursor"] is None
    small = c.get(f"/api/studies/{sid}?trials_limit=7").json()
    assert [t["id"] for t in small["trials"]] == [t["id"] for t in body["trials"][:7]]
    assert c.get(f"/api/studies/{sid}?trials=false").json()["trials"] == []
    assert c.get(f"/api/studies/{sid}?trials_limit=1001").status_code == 422
    assert c.get(f"/api/studies/{sid}?trials_cursor=x").status_code == 422
    _finish(api.repo, sid, limit=1)  # a trial finishes: the page answers anew
    moved = c.get(f"/api/studies/{sid}", headers={"If-None-Match": first.headers["etag"]})
    assert moved.status_code == 200 and moved.json()["progress"]["complete"] == 6


@pytest.mark.postgres
def test_paging_while_trials_are_written(make_api: Callable[..., Api], database_url: str) -> None:
    """Stable order, no trial twice and none skipped while a worker finishes trials."""
    api = make_api(database_url, prescreen=False)
    repo = api.repo
    names = [NormSpec(name=n) for n in ("erf", "tanh", "arctan", "isru", "layernorm")]
    sid = _study(repo, names, seeds=9)  # 45 trials
    expected = [t["id"] for t in repo.list_trials(sid)]
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set() and _finish(repo, sid, limit=1):
            pass

    writer = threading.Thread(target=worker)
    writer.start()
    try:
        for _round in range(3):
            seen: list[int] = []
            statuses: set[str] = set()
            cursor = None
            while True:
                params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
                page = api.client.get(f"/api/studies/{sid}/trials", params=params).json()
                seen += [t["id"] for t in page["items"]]
                statuses |= {t["status"] for t in page["items"]}
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert seen == expected  # in id order, each once, none missing
    finally:
        stop.set()
        writer.join()
    done = api.client.get(
        f"/api/studies/{sid}/trials", params={"status": "COMPLETE", "limit": 1000}
    )
    assert len(done.json()["items"]) == len([t for t in repo.list_trials(sid, status="COMPLETE")])
    assert api.client.get(f"/api/studies/{sid}/trials?cursor=x").status_code == 422
    assert api.client.get("/api/studies/999/trials").status_code == 404


def test_candidate_results_under_options_and_identity_transforms(api: Api, seeded: Seeded) -> None:
    """erf's page finds erf run with options (label 'erf + s') and as shift_h(erf, 0)
    (the identity transform), which the seeded property study ran; not shift_h(erf, 1)."""
    repo = api.repo
    sid = _study(repo, [NormSpec(name="erf", shift="scalar"), NormSpec(name="layernorm")])
    _finish(repo, sid)
    res = api.client.get("/api/candidates/erf/results")
    assert res.status_code == 200
    labels = {r["candidate"] for r in res.json()}
    assert labels == {"erf + s", "shift_h(erf, 0)"}
    assert {r["function"] for r in res.json()} == {"erf", "shift_h(erf, 0)"}
    assert all(r["proxy"] == "vit-tiny" for r in res.json())
    detail = api.client.get("/api/candidates/erf").json()
    assert {r["candidate"] for r in detail["results"]} == labels
    html = api.client.get("/candidates/erf", headers=HTML).text
    assert "No finished trials" not in html and "erf + s" in html
    # the identity transform's own page finds erf's results too, and not the shifted ones
    same = api.client.get("/api/candidates/shift_h(erf, 0)/results").json()
    assert {r["candidate"] for r in same} == labels
    shifted = api.client.get("/api/candidates/shift_h(erf, 1)/results").json()
    assert {r["candidate"] for r in shifted} == {"shift_h(erf, 1)"}
    assert api.client.get("/api/candidates/arctan/results").json() == []
    assert api.client.get("/api/candidates/nosuchname/results").status_code == 404


def test_study_page_loads_its_trials_from_the_paged_api(api: Api, seeded: Seeded) -> None:
    html = api.client.get(f"/studies/{seeded.study_id}", headers=HTML).text
    assert 'id="trial-table"' in html and f"loadTrials({seeded.study_id}" in html
    assert f"Trials ({len(seeded.trial_ids)})" in html


def test_unfiltered_board_shows_analyses_as_they_finish(api: Api) -> None:
    """A leaderboard never waits for sympy on an unfiltered read: functions not analysed yet
    are queued, and the board (a new ETag) shows them once done; a filter waits for them."""
    import time

    from normfree.api import services

    repo = api.repo
    name = "shift_v(isru, 0.375)"  # analysed by no other test
    sid = _study(repo, [NormSpec(name=name), NormSpec(name="layernorm")])
    _finish(repo, sid)
    first = api.client.get("/api/leaderboards/vit-tiny")
    row = next(r for r in first.json()["rows"] if r["function"] == name)
    deadline = time.monotonic() + 60
    while services.ENRICHER.peek(name) is services.MISSING and time.monotonic() < deadline:
        time.sleep(0.05)
    if not row["properties"]:  # shown without them at first: the analysis gives a new ETag
        later = api.client.get(
            "/api/leaderboards/vit-tiny", headers={"If-None-Match": first.headers["etag"]}
        )
        assert later.status_code == 200
    again = api.client.get("/api/leaderboards/vit-tiny").json()
    row = next(r for r in again["rows"] if r["function"] == name)
    assert row["group"] == "transformed" and row["properties"]["bounded"] is True
    filtered = api.client.get("/api/leaderboards/vit-tiny", params={"property": "bounded"})
    assert name in {r["function"] for r in filtered.json()["rows"]}


def test_a_cached_read_answers_while_every_api_thread_is_busy(make_api, sqlite_database_url):
    """Cached answers are served on the event loop (api.cache.serve): with the API's only
    thread (NORMFREE_API_THREADS=1) held by a blocking call, a cached read still answers at
    once (before, every route and dependency queued for a thread)."""
    import time

    import anyio.to_thread

    api = make_api(sqlite_database_url, api_threads=1)
    portal = api.client.portal
    assert portal.call(lambda: anyio.to_thread.current_default_thread_limiter().total_tokens) == 1
    assert api.client.get("/api/candidates").status_code == 200  # built once, now cached
    release = threading.Event()
    threading.Timer(20, release.set).start()  # never hang the suite if the assertion fails
    portal.start_task_soon(anyio.to_thread.run_sync, release.wait)
    time.sleep(0.2)  # the blocking call holds the only thread
    t0 = time.perf_counter()
    r = api.client.get("/api/candidates")
    waited = time.perf_counter() - t0
    release.set()
    assert r.status_code == 200 and r.json()["items"]
    assert waited < 5, f"a cached read waited {waited:.1f} s for the thread pool"


class _Concurrency:
    """A blocking call (50 ms) that counts how many of it run at once (``peak``)."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.running = self.peak = 0

    def __call__(self) -> int:
        import time

        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.05)
        with self._lock:
            self.running -= 1
        return 1


def test_short_work_runs_in_its_own_few_threads(
    make_api: Callable[..., Api], sqlite_database_url: str
) -> None:
    """``reads.quick`` (a submission, a known function's check) runs at most ``quick_threads``
    at once, apart from the default pool, whatever the number waiting."""
    import anyio

    from normfree.api import reads

    api = make_api(sqlite_database_url, quick_threads=2, api_threads=8)
    state = api.app.state.services
    work = _Concurrency()

    async def many() -> int:
        results: list[int] = []

        async def one() -> None:
            results.append(await reads.quick(state, work))

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(one)
        return sum(results)

    assert api.client.portal.call(many) == 8  # type: ignore[union-attr]
    assert work.peak == 2


def test_small_reads_on_a_server_database_have_threads_of_their_own(
    make_api: Callable[..., Api], postgres_database_url: str
) -> None:
    """On PostgreSQL a key's small read (``reads.small_read``) holds its thread through a round
    trip: it runs on ``server_read_threads`` of its own, at most that many at once, and never
    queues behind the short CPU work of ``reads.quick`` (two threads there queued 32 readers
    behind each other's round trips)."""
    import threading

    import anyio

    from normfree.api import reads

    api = make_api(postgres_database_url, quick_threads=1, server_read_threads=3)
    state = api.app.state.services
    count = _Concurrency()
    release = threading.Event()

    def read() -> int:  # a real read: small_read finds nothing kept, so it takes a thread
        with state.db.read() as conn:
            conn.execute(text("SELECT 1"))
        return count()

    async def many() -> int:
        results: list[int] = []

        async def one() -> None:
            results.append(await reads.small_read(state, read))

        async with anyio.create_task_group() as tg:
            # the one quick thread is held throughout: small reads must not need it
            tg.start_soon(reads.quick, state, release.wait)
            for _ in range(9):
                tg.start_soon(one)
            try:
                with anyio.fail_after(30):
                    while len(results) < 9:
                        await anyio.sleep(0.01)
            finally:
                release.set()  # a thread cannot be cancelled: let it end either way
        return sum(results)

    assert api.client.portal.call(many) == 9  # type: ignore[union-attr]
    assert count.peak == 3


def test_a_small_read_kept_for_its_generation_is_answered_on_the_loop(
    make_api: Callable[..., Api], postgres_database_url: str
) -> None:
    """On PostgreSQL ``reads.small_read`` first tries its function on the event loop with the
    database out of reach (``storage.db.without_io``): a key read kept for the request's
    generation (``reads.at_generation``) answers there, without a thread's hand-off; a read
    not kept goes to a thread, and a function that turns a failed read into another answer
    (``except Exception``) cannot mistake the guard for a failure."""
    from normfree.api import fastlane, reads

    api = make_api(postgres_database_url)
    state = api.app.state.services

    def value() -> tuple[int, int]:
        with state.db.read() as conn:
            return threading.get_ident(), conn.execute(text("SELECT 7")).scalar_one()

    def key() -> tuple[int, tuple[int, int]]:
        return threading.get_ident(), reads.at_generation(state, ("test-key",), value)

    def tolerant() -> Any:
        try:
            return value()[1]
        except Exception:  # what a fallback would do on a failed read
            return "fallback"

    async def scenario() -> tuple[int, Any, Any, Any, Any]:
        fastlane.GENERATION.set(("test", 1))
        first = await reads.small_read(state, key)
        second = await reads.small_read(state, key)
        fastlane.GENERATION.set(("test", 2))
        third = await reads.small_read(state, key)
        return threading.get_ident(), first, second, third, await reads.small_read(state, tolerant)

    loop, first, second, third, read = api.client.portal.call(scenario)  # type: ignore[union-attr]
    assert first[0] != loop and first[1][0] != loop and first[1][1] == 7  # read in a thread
    assert second == (loop, first[1])  # kept for generation 1: on the loop, no new read
    assert third[0] != loop and third[1][0] != loop  # a new generation reads again
    assert read == 7


def test_a_server_start_builds_the_last_updated_studies(
    make_api: Callable[..., Api], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``app.warm_studies`` (run by a server's warm-up) builds the summaries and the fidelity
    lines of the studies updated last, newest first, archived ones left out: their first read
    after a start is a cache hit, and a commit to one of them still shows at once."""
    from normfree.api.app import warm_studies

    api = make_api(database_url, prescreen=False)
    older = _study(api.repo, [NormSpec(name="erf")])
    _finish(api.repo, older)
    newer = _study(api.repo, [NormSpec(name="tanh")])
    _finish(api.repo, newer, limit=1)
    gone = _study(api.repo, [NormSpec(name="arctan")])
    _finish(api.repo, gone)
    api.repo.set_study_status(gone, "complete")
    api.repo.archive_study(gone)
    state = api.app.state.services

    assert warm_studies(state, limit=5) == [newer, older]
    assert warm_studies(state, limit=1) == [newer]
    from normfree.api import services

    built: list[int] = []
    get_study = services.get_study

    def counted(state_: object, study_id: int, **kw: object) -> object:
        built.append(study_id)
        return get_study(state_, study_id, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(services, "get_study", counted)
    from normfree.api import fidelity

    lined: list[object] = []
    summary_anywhere = fidelity.summary_anywhere

    def line_counted(state_: object, **kw: object) -> object:
        lined.append(kw)
        return summary_anywhere(state_, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(fidelity, "summary_anywhere", line_counted)
    first = api.client.get(f"/api/studies/{newer}?trials=false")
    assert first.status_code == 200 and first.json()["progress"]["complete"] == 1
    assert built == []  # its summary was built at the start, not by its first reader
    assert api.client.get(f"/studies/{older}").status_code == 200 and built == []
    assert lined == []  # and its page's fidelity line (the page waited for it: 0.25 s)

    _finish(api.repo, newer)  # a worker's commit: the warmed build is not served
    assert api.client.get(f"/api/studies/{newer}?trials=false").json()["progress"]["complete"] == 2
    assert built == [newer]

    # the read builder's warm-up (``api.builder``): the summaries only, never a fidelity line
    # (its server sends the lines it has)
    from normfree.api import lines

    asked: list[int] = []
    monkeypatch.setattr(lines, "study_line", lambda _state, sid: asked.append(sid))
    state.cache.clear()
    built.clear()
    assert warm_studies(state, limit=5, with_lines=False) == [newer, older]
    assert sorted(built) == sorted([newer, older]) and asked == []
    assert warm_studies(state, limit=1) == [newer] and asked == [newer]

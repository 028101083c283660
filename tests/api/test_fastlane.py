"""The fast lane (api.fastlane): cached answers replayed before routing, exactly while the
database is unchanged, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from normfree.api import fastlane
from tests.api.conftest import Api, wait_for_analyses
from tests.api.test_reads import _finish


def lane_of(app: Any) -> fastlane.FastLane:
    """The app's FastLane instance (Starlette builds the middleware stack on first use)."""
    node = fastlane.of(app)
    assert node is not None, "no FastLane in the middleware stack"
    return node


def _comparable(r: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
    headers = sorted((k, v) for k, v in r.headers.items() if k != "date")
    return r.status_code, r.content, headers


@pytest.mark.postgres
def test_replays_the_routes_answer_until_a_write(half_finished: tuple[Api, int]) -> None:
    api, sid = half_finished
    c, repo = api.client, api.repo
    urls = ["/api/leaderboards/vit-tiny", "/?proxy=vit-tiny", f"/api/studies/{sid}?trials=false",
            f"/studies/{sid}", "/api/candidates"]  # fmt: skip
    for u in urls:
        c.get(u)
    wait_for_analyses(api)  # the first answers queued analyses: each one moves the epoch
    lane = lane_of(api.app)
    for _ in range(20):  # PostgreSQL's snapshot is the server's: autovacuum may move it
        first = {u: c.get(u) for u in urls}
        hits = lane.hits
        again = {u: c.get(u) for u in urls}
        if lane.hits == hits + len(urls):
            break
    assert lane.hits == hits + len(urls)  # every one replayed
    for u in urls:  # byte for byte, headers included (security headers, ETag, gzip)
        assert first[u].status_code == 200, u
        assert _comparable(again[u]) == _comparable(first[u]), u
    assert again["/?proxy=vit-tiny"].headers["content-encoding"] == "gzip"
    # a worker (another connection) finishes the study: nothing stale is replayed
    _finish(repo, sid)
    board = c.get("/api/leaderboards/vit-tiny")
    assert lane.hits == hits + len(urls)
    assert sum(r["n_total"] for r in board.json()["rows"]) == 4
    summary = c.get(f"/api/studies/{sid}?trials=false").json()
    assert summary["progress"]["complete"] == 4
    assert c.get("/api/leaderboards/vit-tiny").content == board.content
    assert lane.hits == hits + len(urls) + 1  # the new answer is replayed in turn
    # the server's health says how its reads were answered (the figures the benchmark reads)
    figures = c.get("/api/health").json()["fast_lane"]
    assert figures["replayed"] == lane.hits and figures["routed"] == lane.routed
    assert figures["revalidated"] <= figures["replayed"] and figures["routed"] > 0


def test_only_anonymous_unconditional_reads_take_the_lane(api: Api) -> None:
    c = api.client
    first = c.get("/api/candidates")
    lane = lane_of(api.app)
    hits = lane.hits
    assert c.get("/api/candidates", headers=api.auth).status_code == 200  # a token holder
    conditional = c.get("/api/candidates", headers={"If-None-Match": first.headers["etag"]})
    assert conditional.status_code == 304  # the usual way, to its 304
    assert c.get("/api/version").status_code == 200  # not marked by its route: never stored
    assert c.get("/api/version").status_code == 200
    assert lane.hits == hits
    assert c.get("/api/candidates").content == first.content
    assert lane.hits == hits + 1
    # other encodings and hosts are other entries (pages print absolute links from the host)
    plain = c.get("/api/candidates", headers={"Accept-Encoding": "identity"})
    assert plain.json() == first.json() and "content-encoding" not in plain.headers
    assert lane.hits == hits + 1


@pytest.mark.postgres
def test_a_trial_is_answered_directly_as_its_route_answers_it(
    half_finished: tuple[Api, int],
) -> None:
    """The direct route (routers.trials.direct): an anonymous trial read skips routing and
    dependencies but answers exactly what the route answers; anything else goes the usual way."""
    api, sid = half_finished
    c = api.client
    lane = lane_of(api.app)
    tid = api.repo.list_trials(sid, status="COMPLETE")[0]["id"]
    direct = c.get(f"/api/trials/{tid}")
    assert direct.status_code == 200 and lane.direct_answers == 1
    # a conditional request that matches nothing goes through the route: the same answer
    routed = c.get(f"/api/trials/{tid}", headers={"If-None-Match": '"other"'})
    assert lane.direct_answers == 1
    assert _comparable(direct) == _comparable(routed)
    assert direct.json()["id"] == tid and direct.json()["status"] == "COMPLETE"
    assert (
        c.get(f"/api/trials/{tid}", headers={"If-None-Match": direct.headers["etag"]}).status_code
        == 304
    )
    # no such trial, an id past the keys' range: the app answers (its 404 and 422 bodies)
    missing = c.get("/api/trials/999999")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert c.get("/api/trials/99999999999").status_code == 422
    assert c.get(f"/api/trials/{tid}", headers=api.auth).status_code == 200  # a token holder
    assert lane.direct_answers == 1
    # a running trial (no document yet) is answered directly too, from its rows
    lease = api.repo.lease_next(sid, "w", 60)
    assert lease is not None
    running = c.get(f"/api/trials/{lease.id}")
    assert running.json()["status"] == "RUNNING" and lane.direct_answers == 2


def test_a_trials_nonfinite_numbers_read_as_null_on_every_path(
    half_finished: tuple[Api, int],
) -> None:
    """A diverged trial's NaN and infinities (a metric, a curve point) are null in its answer
    whichever way it is read: from its stored document (directly, or through the route for a
    token holder) or from its rows while it runs, and from a document that holds JSON's NaN
    (``storage.reads.current_document(finite=True)`` reads them as None)."""
    from normfree.specs import EpochRecord, TrialResult

    api, sid = half_finished
    c = api.client
    lease = api.repo.lease_next(sid, "w", 60)
    assert lease is not None
    point = EpochRecord(
        epoch=0, step=5, train_loss=float("inf"), val_loss=float("nan"),
        metrics={"val_acc": float("nan")}, lr=1e-3, wall_time_s=1.0,
    )  # fmt: skip
    assert api.repo.record_epoch(lease.id, "w", lease.attempt, point)
    running = c.get(f"/api/trials/{lease.id}").json()
    assert running["curves"][0]["train_loss"] is None and running["curves"][0]["val_loss"] is None
    result = TrialResult(
        status="diverged", objective="val_acc",
        metrics={"val_acc": float("nan"), "val_loss": float("inf"), "train_time_s": 1.0},
        curves=[point],
    )  # fmt: skip
    assert api.repo.finish_trial(lease.id, "w", lease.attempt, result)
    # the writer stores them as null; a document written otherwise (by an older version) may
    # hold JSON's NaN and Infinity: put them back, the row's stamp left as it is
    with api.repo.db.session() as s:
        s.execute(
            text(
                "UPDATE trials SET document = replace(replace(document, "
                "'\"val_acc\": null', '\"val_acc\": NaN'), "
                "'\"val_loss\": null', '\"val_loss\": -Infinity') WHERE id = :i"
            ),
            {"i": lease.id},
        )
        doc = s.execute(text("SELECT document FROM trials WHERE id = :i"), {"i": lease.id})
        assert "NaN" in doc.scalar_one()
    for headers in ({}, api.auth):
        body = c.get(f"/api/trials/{lease.id}", headers=headers).json()
        assert body["status"] == "DIVERGED"
        assert body["metrics"]["val_acc"] is None and body["metrics"]["val_loss"] is None
        assert body["curves"] and body["curves"][0]["val_loss"] is None
        assert body["curves"][0]["train_loss"] is None
        assert body["curves"][0]["metrics"]["val_acc"] is None


def test_closed_when_reads_are_private(make_api: Callable[..., Api], sqlite_database_url: str):
    api = make_api(sqlite_database_url, public_reads=False)
    for _ in range(3):
        assert api.client.get("/api/candidates", headers=api.auth).status_code == 200
        assert api.client.get("/api/candidates").status_code == 401
    lane = lane_of(api.app)
    assert (lane.hits, lane.stored) == (0, 0)


def test_off_by_setting(make_api: Callable[..., Api], sqlite_database_url: str) -> None:
    api = make_api(sqlite_database_url, fast_lane=False)
    for _ in range(3):
        assert api.client.get("/api/candidates").status_code == 200
    assert lane_of(api.app).hits == 0


def test_a_new_analysis_closes_the_lane_for_boards(api: Api) -> None:
    """A board also depends on the analyses this process has done (api.enrich's epoch)."""
    from normfree.api import services

    c = api.client
    c.get("/api/leaderboards/vit-tiny")
    lane = lane_of(api.app)
    for _ in range(100):  # until the start-up analyses (another thread) leave the epoch alone
        wait_for_analyses(api)
        hits = lane.hits
        c.get("/api/leaderboards/vit-tiny")
        if lane.hits == hits + 1:
            break
    assert lane.hits == hits + 1
    services.ENRICHER.get("shift_v(tanh, 0.3125)")  # analysed by no other test: a new epoch
    c.get("/api/leaderboards/vit-tiny")
    assert lane.hits == hits + 1


def test_sqlite_generation_follows_other_connections(tmp_path: Any) -> None:
    path = tmp_path / "g.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    gen = fastlane.generation_for(f"sqlite:///{path}")
    assert isinstance(gen, fastlane.SqliteGeneration)

    async def read() -> Any:
        return await gen()

    g0 = asyncio.run(read())
    with engine.connect() as conn:
        conn.execute(text("SELECT * FROM t")).all()  # a read is not a change
    assert asyncio.run(read()) == g0
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    g1 = asyncio.run(read())
    assert g1 != g0
    assert asyncio.run(read()) == g1
    asyncio.run(gen.aclose())  # a stopped app may start again: a new connection, a new series
    assert asyncio.run(read()) not in (g0, g1)
    asyncio.run(gen.aclose())
    engine.dispose()
    assert fastlane.generation_for("sqlite://") is None  # in memory: no lane


@pytest.mark.postgres
def test_postgres_generation_is_shared_and_never_older_than_the_request(
    postgres_database_url: str,
) -> None:
    from normfree.storage import normalize_url

    url = normalize_url(postgres_database_url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    # the snapshot: what the lane reads on a database without commit notices (not migrated)
    gen = fastlane.PostgresGeneration(url)
    queries = 0
    real = gen._query

    async def counted() -> Any:
        nonlocal queries
        queries += 1
        return await real()

    gen._query = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        before = await gen()
        assert before is not None and await gen() == before  # nothing committed
        n0 = queries
        many = await asyncio.gather(*(gen() for _ in range(50)))
        assert len(set(many)) == 1 and queries - n0 <= 2  # one round trip serves them all
        with engine.begin() as conn:  # a commit elsewhere, then a request: a new snapshot
            conn.execute(text("INSERT INTO t VALUES (1)"))
        after = await gen()
        assert after != before
        await gen.aclose()

    asyncio.run(scenario())
    engine.dispose()


async def _moved(gen: Any, old: Any, within_s: float = 3.0) -> Any:
    """The generation once it differs from ``old`` (and is not None), or ``old`` at the end."""
    deadline = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < deadline:
        now = await gen()
        if now is not None and now != old:
            return now
        await asyncio.sleep(0.01)
    return old


@pytest.mark.postgres
def test_postgres_generation_counts_commit_notices(postgres_database_url: str) -> None:
    """On a migrated database the generation is a count of commit notices read from memory:
    a commit elsewhere moves it within milliseconds, a read or a rollback does not, this
    process's own commit at once, and a lost connection starts a new series (nothing stamped
    before it is replayed after)."""
    from normfree.storage import Database

    db = Database(postgres_database_url)
    db.migrate()
    gen = fastlane.generation_for(db.url)
    assert isinstance(gen, fastlane.PostgresNotifyGeneration)

    async def scenario() -> None:
        g0 = await gen()
        assert g0 is not None and gen.fallback is None
        with db.engine.connect() as conn:  # a read, then a write rolled back: no commit
            conn.execute(text("SELECT count(*) FROM trials")).all()
            conn.execute(text("DELETE FROM reference_sets"))
            conn.rollback()
        assert await _moved(gen, g0, within_s=0.5) == g0
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE candidates SET name = name"))
        g1 = await _moved(gen, g0)
        assert g1 != g0
        many = await asyncio.gather(*(gen() for _ in range(50)))
        assert set(many) == {g1}  # no round trip: every request reads the same count
        # this process's own commit moves it before its notice can be read (no await between
        # the commit and the read, so the loop cannot have read the notice): read-your-writes
        with db.session() as session:
            session.execute(text("UPDATE candidates SET name = name"))
        mine = await gen()
        assert mine != g1 and mine[1] == g1[1]
        g1 = await _moved(gen, mine)  # and then its notice
        assert g1[1] == mine[1] + 1
        with db.engine.begin() as conn:  # the LISTEN connection dies
            killed = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :name AND datname = current_database()"
                ),
                {"name": fastlane.APPLICATION_NAME},
            ).all()
        assert killed == [(True,)]
        g2 = await _moved(gen, g1, within_s=5.0)
        assert g2 not in (g0, g1) and g2[0] == g1[0] + 1  # a new series, not a replay
        await gen.aclose()

    try:
        asyncio.run(scenario())
    finally:
        db.dispose()


@pytest.mark.postgres
def test_postgres_generation_without_notices_reads_the_snapshot(
    postgres_database_url: str,
) -> None:
    """A database whose tables send no notices (not migrated to 0014) falls back to the
    snapshot, which still sees every commit."""
    from normfree.storage import normalize_url

    url = normalize_url(postgres_database_url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    gen = fastlane.generation_for(url)
    assert isinstance(gen, fastlane.PostgresNotifyGeneration)

    async def scenario() -> None:
        g0 = await gen()
        assert g0 is not None and isinstance(gen.fallback, fastlane.PostgresGeneration)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
        assert await gen() != g0
        await gen.aclose()

    asyncio.run(scenario())
    engine.dispose()


def test_concurrent_misses_share_one_pass_through_the_app() -> None:
    """At a miss, requests for the same read at the same generation wait for the one already
    going through the app and replay its answer; a request at a newer generation never does."""
    calls = 0
    generation = 1
    delay = fastlane.SHARE_WAIT_S / 5

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal calls
        calls += 1
        body = f"answer {calls} at {generation}".encode()
        await asyncio.sleep(delay)  # a route's slow path
        fastlane.allow(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def current() -> int:
        return generation

    lane = fastlane.FastLane(app, generation=current)

    async def get() -> bytes:
        scope = {"type": "http", "method": "GET", "path": "/x", "query_string": b"",
                 "headers": [(b"host", b"h")], "scheme": "http"}  # fmt: skip
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        await lane(scope, None, send)
        return b"".join(m.get("body", b"") for m in sent)

    async def scenario() -> None:
        nonlocal generation, delay
        bodies = await asyncio.gather(*(get() for _ in range(20)))
        assert calls == 1 and set(bodies) == {b"answer 1 at 1"} and lane.shared == 19
        generation = 2  # a commit: the next request goes through the app again
        first = asyncio.ensure_future(get())
        await asyncio.sleep(delay / 2)
        generation = 3  # another commit while that one is in flight
        late = await get()
        assert await first == b"answer 2 at 2"
        assert late == b"answer 3 at 3" and calls == 3
        # a rebuild (slower than the lane waits): the second request goes its own way, to
        # the route's previous version, instead of waiting for the rebuild
        delay, generation = fastlane.SHARE_WAIT_S * 4, 4
        await asyncio.gather(get(), get())
        assert calls == 5

    asyncio.run(scenario())


@pytest.mark.postgres
def test_postgres_generation_without_a_database_closes_the_lane(postgres_server_url: str) -> None:
    """No snapshot (a database that is gone): None, so requests take the usual path; and no
    reconnect per request while it stays gone."""
    from sqlalchemy.engine import make_url

    from normfree.storage import normalize_url

    url = make_url(normalize_url(postgres_server_url)).set(database="normfree_gone_db")
    gen = fastlane.PostgresGeneration(url.render_as_string(hide_password=False))

    async def scenario() -> None:
        assert await gen() is None
        retry_at = gen._retry_at
        assert await gen() is None and gen._retry_at == retry_at  # not tried again yet
        await gen.aclose()

    asyncio.run(scenario())


@pytest.mark.postgres
def test_a_keys_database_reads_are_kept_for_one_generation(
    half_finished: tuple[Api, int],
) -> None:
    """Two reads of one study (its JSON and its page) at one generation read its stamp once;
    a worker's commit moves the generation, and the next read sees the commit (issue 27: the
    event loop spent half its time under a writer in these small queries)."""
    api, sid = half_finished
    c, memo = api.client, api.app.state.services.generation_memo
    lane = lane_of(api.app)
    for _ in range(20):  # PostgreSQL's snapshot is the server's: autovacuum may move it
        hits, replays = memo.hits, lane.hits
        assert c.get(f"/api/studies/{sid}?trials=false&x={_}").status_code == 200
        assert c.get(f"/studies/{sid}?x={_}").status_code == 200  # another URL: not a replay
        if memo.hits > hits and lane.hits == replays:
            break
    assert memo.hits > hits  # the page's key took the summary's read of the study
    _finish(api.repo, sid)  # another connection commits
    summary = c.get(f"/api/studies/{sid}?trials=false&x=after").json()
    assert summary["progress"]["complete"] == 4
    page = c.get(f"/studies/{sid}?x=after").text
    assert "4/4" in page or "4 of 4" in page


def test_without_a_generation_nothing_is_kept() -> None:
    """A read outside the lane (a token holder, a test's direct call) always reads."""
    from normfree.api.reads import GenerationMemo

    memo, calls = GenerationMemo(), []

    def read() -> int:
        calls.append(1)
        return len(calls)

    assert memo.read("x", read) == 1 and memo.read("x", read) == 2
    token = fastlane.GENERATION.set(("lane", 7))
    try:
        assert memo.read("x", read) == 3 and memo.read("x", read) == 3  # kept for generation 7
        fastlane.GENERATION.set(("lane", 8))
        assert memo.read("x", read) == 4  # a commit moved it
    finally:
        fastlane.GENERATION.reset(token)
    assert memo.hits == 1


def test_a_read_in_flight_at_one_generation_is_shared() -> None:
    """Requests at one generation that want the same key's read while it is in flight wait
    for it instead of each making the round trip (on PostgreSQL each held a thread the others
    queued for); a read that fails leaves the waiters to read for themselves."""
    import threading
    import time

    from normfree.api.reads import GenerationMemo

    def race(memo: GenerationMemo, lead: Callable[[], int], follow: Callable[[], int]) -> list:
        """``lead`` read on one thread, then ``follow`` on three more while it runs."""
        got: list[Any] = []
        started = threading.Event()

        def request(fn: Callable[[], int]) -> None:
            token = fastlane.GENERATION.set(("lane", 1))
            try:
                got.append(memo.read("study", fn))
            except RuntimeError as exc:
                got.append(str(exc))
            finally:
                fastlane.GENERATION.reset(token)

        def leader() -> int:
            started.set()
            time.sleep(0.3)
            return lead()

        threads = [threading.Thread(target=request, args=(leader,))]
        threads[0].start()
        assert started.wait(10)
        threads += [threading.Thread(target=request, args=(follow,)) for _ in range(3)]
        for t in threads[1:]:
            t.start()
        for t in threads:
            t.join(10)
        return sorted(map(str, got))

    memo, calls = GenerationMemo(), []

    def read() -> int:
        calls.append(1)
        return 42

    assert race(memo, read, read) == ["42"] * 4
    assert len(calls) == 1 and memo.shared == 3

    def failing() -> int:
        raise RuntimeError("connection lost")

    # the leader fails: every follower reads for itself
    assert race(GenerationMemo(), failing, lambda: 7) == ["7", "7", "7", "connection lost"]


@pytest.mark.postgres
def test_a_commit_elsewhere_revalidates_instead_of_routing(
    half_finished: tuple[Api, int],
) -> None:
    """After a commit, an answer whose key did not move (another study leased a trial: no
    board, no other study changed) is replayed once its key is read again, without the app;
    the study the commit touched goes through and shows it. Byte for byte as the route."""
    from normfree.specs import NormSpec
    from tests.api.test_reads import _study

    api, sid = half_finished
    c, repo = api.client, api.repo
    other = _study(repo, [NormSpec(name="tanh")], seeds=20)
    urls = ["/api/leaderboards/vit-tiny", "/?proxy=vit-tiny", f"/api/studies/{sid}",
            f"/studies/{sid}"]  # fmt: skip
    wait_for_analyses(api)
    lane = lane_of(api.app)
    assert c.get(f"/api/studies/{other}").json()["progress"]["running"] == 0
    leased = 0
    for _ in range(19):  # PostgreSQL's snapshot is the server's: autovacuum moves it
        first = {u: c.get(u) for u in urls}
        assert repo.lease_next(other, "elsewhere", 60) is not None  # a worker's commit
        leased += 1
        before = lane.revalidated
        again = {u: c.get(u) for u in urls}
        if lane.revalidated == before + len(urls):
            break
    assert lane.revalidated == before + len(urls)  # none went through the app
    for u in urls:
        assert first[u].status_code == 200, u
        assert _comparable(again[u]) == _comparable(first[u]), u
    touched = c.get(f"/api/studies/{other}").json()["progress"]
    assert touched["running"] == leased  # the study the commit moved is answered anew
    _finish(repo, sid)  # moves the board and the study: neither is revalidated
    before = lane.revalidated
    board = c.get("/api/leaderboards/vit-tiny").json()
    assert sum(r["n_total"] for r in board["rows"]) == 4
    assert c.get(f"/api/studies/{sid}").json()["progress"]["complete"] == 4
    assert lane.revalidated == before

"""The read builder process (``api.builder``) and the read cache's rule for what it builds.

Real parts: a real builder process over a real SQLite file answers through the same app; a
real server under a real writer (``normfree serve``) sends its hot rebuilds there.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from normfree.api.app import create_app
from normfree.api.builder import Builder
from normfree.api.cache import Cached, ResponseCache
from normfree.settings import Settings
from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Database, Repository
from normfree.testing.live import live_server
from tests.boards import PROXY, seed_board


def _wait(predicate: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def board_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'builder.db'}"
    seed_board(url, [("erf", [0.9, 0.91, 0.92]), ("tanh", [0.88, 0.9, 0.89])])
    return url


def test_the_builder_answers_a_read_as_the_server_would(board_url: str) -> None:
    settings = Settings(database_url=board_url, read_stale_window_s=2.0)
    with TestClient(create_app(settings, run_studies=False, prescreen=False)) as client:
        here = client.get(f"/api/leaderboards/{PROXY}").json()
    builder = Builder(settings)
    builder.start()
    try:
        _wait(lambda: builder.ready, 120, "the builder's start")
        got = builder.build(f"http://127.0.0.1:8123/api/leaderboards/{PROXY}")
        assert got is not None
        media_type, body, gz = got
        assert media_type == "application/json"
        there = json.loads(body)
        assert [(r["candidate"], r["n"], r["mean"]) for r in there["rows"]] == [
            (r["candidate"], r["n"], r["mean"]) for r in here["rows"]
        ]
        assert gz is None or len(gz) < len(body)
        # a page's links name the server the request came to, not the builder's client
        built_page = builder.build(f"http://127.0.0.1:8123/?proxy={PROXY}")
        assert built_page is not None
        page = built_page[1]
        assert b'action="http://127.0.0.1:8123/"' in page
        assert b"testserver" not in page
        # a read it cannot answer with a 200 is left to the server
        assert builder.build("http://127.0.0.1:8123/api/leaderboards/no-such-proxy") is None
        assert builder.refused == 1
    finally:
        builder.close()


def test_a_killed_builder_is_replaced_and_its_read_built_here(board_url: str) -> None:
    builder = Builder(Settings(database_url=board_url, read_stale_window_s=2.0))
    builder.start()
    try:
        _wait(lambda: builder.ready, 120, "the builder's start")
        first = builder.pid
        assert first is not None
        os.kill(first, 9)
        # the build in flight (or the next) finds the pipe closed: refused, and started again
        assert builder.build(f"http://127.0.0.1:8123/api/leaderboards/{PROXY}") is None
        _wait(lambda: builder.ready and builder.pid not in (None, first), 120, "a new builder")
        assert builder.build(f"http://127.0.0.1:8123/api/leaderboards/{PROXY}") is not None
    finally:
        builder.close()


def test_an_answer_built_there_serves_only_while_its_family_is_hot() -> None:
    cache = ResponseCache(stale_window_s=0.4, fresh_wait_s=5.0)
    asked: list[str] = []

    def remote(target: str) -> tuple[str, bytes, bytes | None]:
        asked.append(target)
        return "application/json", b'"there"', None

    cache.remote = remote
    local = lambda v: lambda: Cached(json.dumps(v).encode(), "application/json")  # noqa: E731
    # a quiet family builds here
    _k, v1 = cache.lookup(("board", 1), local("here-1"), target="/board")
    assert v1.body == b'"here-1"' and not v1.remote
    # a new version after a quiet spell: built there, and its reader waits for it (a lone
    # write is read back at once); built here, it shared the server with every reader
    _k, v2 = cache.lookup(("board", 2), local("here-2"), target="/board")
    assert v2.remote and v2.body == b'"there"' and asked == ["/board"]
    # another right after: a stream of writes, so its background build goes there too
    _k, v3 = cache.lookup(("board", 3), local("here-3"), target="/board")
    assert asked == ["/board", "/board"]
    assert v3.remote and v3.body == b'"there"'
    assert cache.get(("board", 3)) is v3  # served while hot
    builds = cache.builds
    time.sleep(0.6)  # the stream of writes has ended
    # the fast lane's stamp moved (answers built there are not replayed any longer) ...
    _wait(lambda: cache.builds > builds, 5, "the sweep")
    # ... and the entry is dropped: the next reader builds the family here
    assert cache.get(("board", 3)) is None
    _k, v3 = cache.lookup(("board", 3), local("here-3"), target="/board")
    assert v3.body == b'"here-3"' and not v3.remote
    # without a target (a read this process drives) nothing goes there
    cache.lookup(("board", 4), local("here-4"))
    cache.lookup(("board", 5), local("here-5"))
    assert asked == ["/board", "/board"]


def test_a_server_under_a_writer_sends_its_rebuilds_to_the_builder(board_url: str) -> None:
    repo = Repository(Database(board_url), max_attempts=3)
    sid = repo.create_study(StudySpec(kind="options", proxy=PROXY, functions=["erf"]))
    items = [
        (TrialConfig(proxy=PROXY, norm=NormSpec(name="erf"), seed=10 + i), {"seed": i}, None)
        for i in range(40)
    ]
    repo.add_trials(sid, items)
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:  # five finished trials a second, as a study's workers write them
        while not stop.is_set() and (lease := repo.lease_next(sid, "w", 60)) is not None:
            result = TrialResult(status="complete", metrics={"val_acc": 0.9}, objective="val_acc")
            assert repo.finish_trial(lease.id, "w", lease.attempt, result)
            written.append(lease.id)
            time.sleep(0.2)

    env = {"NORMFREE_READ_STALE_WINDOW_S": "2"}
    with live_server(board_url, "--no-run-studies", timeout=180, env=env) as url:
        base = url.rstrip("/")
        _wait(
            lambda: (httpx.get(f"{base}/api/health").json().get("read_builder") or {}).get("ready"),
            120,
            "the server's builder",
        )
        # the first reads wait for their fidelity lines (the suite waits up to 120 s for exact
        # lines; on a loaded CI host a line took over httpx's 5 s): taken before the stream
        board, page = f"{base}/api/leaderboards/{PROXY}", f"{base}/studies/{sid}"
        for first in (board, page):
            assert httpx.get(first, timeout=150).status_code == 200
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        pages: list[str] = []
        try:
            end = time.monotonic() + 6
            while time.monotonic() < end:
                assert httpx.get(board, timeout=60).status_code == 200
                r = httpx.get(page, timeout=60)
                assert r.status_code == 200
                pages.append(r.text)
        finally:
            stop.set()
            thread.join(30)
        health = httpx.get(f"{base}/api/health").json()["read_builder"]
        assert health["built"] > 0, health
        # every page, built there or here, links to this server
        host = base.split("//")[1]
        for page in pages:
            assert "testserver" not in page
            assert re.search(rf'href="http://{re.escape(host)}/', page)
        # the stream has ended (and with it the window): the board shows every write
        assert written
        time.sleep(2.5)
        board = httpx.get(f"{base}/api/leaderboards/{PROXY}").json()
        erf = next(r for r in board["rows"] if r["candidate"] == "erf")
        assert erf["n_total"] == 3 + len(written)


def test_a_builder_shows_the_lines_and_analyses_its_server_sent() -> None:
    from normfree.api.enrich import Enricher
    from normfree.api.lines import FidelityLines

    lines = FidelityLines()
    target = ("proxy", "vit-tiny")
    lines.borrow({target: ("v1", "line one")})
    computed: list[int] = []
    # it shows the line it was sent, of whatever version, and computes none itself
    assert lines.line(target, "v2", lambda: computed.append(1), wait_s=5.0) == "line one"
    assert lines.line(("study", 3), "v1", lambda: computed.append(1), wait_s=5.0) is None
    assert computed == []
    stamp, epoch = lines.stamp(target), lines.epoch
    lines.borrow({target: ("v1", "line one")})  # the same: nothing moves
    assert (lines.stamp(target), lines.epoch) == (stamp, epoch)
    lines.borrow({target: ("v2", "line two")})  # a new line moves the reads that show it
    assert lines.stamp(target) == stamp + 1 and lines.epoch == epoch + 1
    assert lines.line(target, "v2", lambda: computed.append(1), wait_s=0) == "line two"

    server = Enricher(lambda name: ("group", {"name": name}))
    assert server.get("erf") == ("group", {"name": "erf"})
    server.get("tanh")
    builder = Enricher(lambda _name: None)
    builder.adopt(server.known_after(0))
    assert builder.peek("tanh") == ("group", {"name": "tanh"})
    assert builder.epoch == 2
    assert server.known_after(2) == []


def test_what_cannot_be_sent_refuses_one_build_and_keeps_the_builder(board_url: str) -> None:
    from normfree.api.lines import LINES

    builder = Builder(Settings(database_url=board_url, read_stale_window_s=2.0))
    builder.start()
    target = ("proxy", "unsendable")
    try:
        _wait(lambda: builder.ready, 120, "the builder's start")
        pid = builder.pid
        with LINES._lock:
            LINES._done[target] = ("v1", lambda: None)  # a line no pipe can carry
        assert builder.build(f"http://127.0.0.1:8123/api/leaderboards/{PROXY}") is None
        assert builder.refused == 1 and builder.pid == pid and builder.ready
        with LINES._lock:
            del LINES._done[target]
        assert builder.build(f"http://127.0.0.1:8123/api/leaderboards/{PROXY}") is not None
        assert builder.pid == pid
    finally:
        with LINES._lock:
            LINES._done.pop(target, None)
        builder.close()

"""Function analyses survive a restart (``api.enrich`` with ``storage.analyses``, issue 27).

A server analyses each arm's function once (sympy, 50-300 ms a name) and stores it; the next
start, a new process, adopts what is stored and analyses nothing, so its first boards show every
arm's group and properties and no finishing analysis moves their cache keys while people read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

from normfree.specs import NormSpec
from normfree.storage import analyses
from normfree.workers.versions import catalog_version
from tests.api.conftest import Api
from tests.api.test_reads import _finish, _study

# analysed by no other test: a name this process knows already would not be analysed (or
# stored) for this database
NAMES = ["shift_v(isru, 0.4375)", "clip(arctan, 0.8125)"]

RESTART = """
import json, sys, time
from fastapi.testclient import TestClient
from normfree.api import create_app, services
from normfree.settings import Settings

calls = []
analyse = services.ENRICHER._analyse
services.ENRICHER._analyse = lambda name: calls.append(name) or analyse(name)
names = json.loads(sys.argv[2])
app = create_app(Settings(database_url=sys.argv[1]), run_studies=False, prescreen=False)
with TestClient(app) as client:  # its start adopts the stored analyses (a warm-up thread)
    deadline = time.monotonic() + 60
    while any(services.ENRICHER.peek(n) is services.MISSING for n in names):
        assert time.monotonic() < deadline, "the start adopted nothing"
        time.sleep(0.02)
    rows = client.get("/api/leaderboards/vit-tiny").json()["rows"]
    shown = {r["function"]: [r["group"], r["properties"].get("bounded")] for r in rows}
print(json.dumps({"analysed": calls, "shown": shown, "pending": services.ENRICHER.pending()}))
"""


def test_a_restarted_server_adopts_the_analyses_it_stored(
    make_api: Callable[..., Api], sqlite_database_url: str
) -> None:
    from normfree.api import services

    api = make_api(sqlite_database_url, prescreen=False)
    sid = _study(api.repo, [NormSpec(name=n) for n in NAMES] + [NormSpec(name="layernorm")])
    _finish(api.repo, sid)
    services.warm_up(api.app.state.services)  # a start over these trials queues their names
    db, version = api.app.state.services.db, catalog_version()
    deadline = time.monotonic() + 120
    while {n for n, _i in analyses.load(db, version)} < set(NAMES):
        assert time.monotonic() < deadline, "the analyses were not stored"
        time.sleep(0.05)
    stored = dict(analyses.load(db, version))
    assert stored[NAMES[0]] == services.ENRICHER.peek(NAMES[0])  # as analysed, exactly

    out = subprocess.run(
        [sys.executable, "-c", RESTART, sqlite_database_url, json.dumps(NAMES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["analysed"] == [] and got["pending"] == 0  # nothing redone after the restart
    assert got["shown"][NAMES[0]] == ["transformed", True]  # on the first board, at once
    assert got["shown"][NAMES[1]][1] is True


def test_a_builder_stores_no_analysis() -> None:
    """A read builder borrows its analyses from its server: a name it was not sent reads as
    "not a catalog function" there, which must never be stored as that name's analysis."""
    from normfree.api.enrich import MISSING, Enricher

    kept: list[list[tuple[str, object]]] = []
    enricher = Enricher(lambda name: ("natural", {"name": name}))
    enricher.borrow()
    enricher.attach([("erf", ("natural", {}))], kept.append)
    assert enricher.get("tanh") is None and enricher.flush() == 0 and kept == []
    assert enricher.peek("erf") is MISSING  # nothing adopted from the store either ...
    enricher.adopt([("erf", ("natural", {}))])  # ... only what its server sends
    assert enricher.peek("erf") == ("natural", {})


def test_a_store_that_fails_loses_no_analysis_shown() -> None:
    """A database that refuses the write (locked, gone) costs the next start a re-analysis,
    never a board's properties now, and never an error in the analysing thread."""
    from normfree.api.enrich import Enricher

    def refuse(_items: object) -> None:
        raise OSError("disk I/O error")

    enricher = Enricher(lambda name: ("natural", {"name": name}))
    enricher.attach([], refuse)
    enricher.want(["erf", "tanh"])
    deadline = time.monotonic() + 10
    while enricher.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert enricher.peek("tanh") == ("natural", {"name": "tanh"})
    assert enricher.flush() == 0

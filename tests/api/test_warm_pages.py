"""A server asks its recent studies' JSON and pages of itself once warm (``app.warm_pages``):
their first readers at the URL it printed get answers already built (issue 27: 32 readers
finding twenty answers cold at once were a window's first second, p99 ~300 ms)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from normfree.specs import NormSpec
from normfree.testing.live import live_server
from tests.api.test_reads import _finish, _study


def _lane(http: httpx.Client) -> dict[str, int]:
    return http.get("api/health").json()["fast_lane"]


def test_a_server_builds_its_recent_studies_pages_before_their_readers(tmp_path: Path) -> None:
    from normfree import storage
    from normfree.settings import Settings

    url = f"sqlite:///{tmp_path / 'warm.db'}"
    store = storage.open(Settings(database_url=url))
    ids = []
    for name in ("erf", "tanh"):
        sid = _study(store.repo, [NormSpec(name=name)])
        _finish(store.repo, sid)
        store.repo.set_study_status(sid, "complete")
        ids.append(sid)
    store.close()

    with (
        live_server(url, "--no-run-studies", timeout=180) as base,
        httpx.Client(base_url=base, timeout=60) as http,
    ):
        # the warm-up asks the home page and each study's JSON and page once it is done
        # (each health read is routed too: counted apart)
        polls, deadline = 0, time.monotonic() + 120
        while True:
            polls += 1
            if _lane(http)["routed"] - polls >= 1 + 2 * len(ids):
                break
            assert time.monotonic() < deadline, "the server asked for no page of its own"
            time.sleep(0.5)
        time.sleep(2.0)  # its lines settled: nothing moves the studies' keys any more
        before = _lane(http)
        for sid in ids:
            for path in (f"api/studies/{sid}", f"studies/{sid}"):
                r = http.get(path)
                assert r.status_code == 200, (path, r.text[:300])
        after = _lane(http)
    # the first reader of each got the answer built at the start, without the app
    assert after["replayed"] - before["replayed"] == 2 * len(ids), (before, after)
    assert after["routed"] - before["routed"] == 1  # the health read only

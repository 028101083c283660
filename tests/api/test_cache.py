"""The response cache: one build per key, the family's latest while another request builds."""

from __future__ import annotations

import threading
import time

from normfree.api.cache import Cached, ResponseCache


def test_one_build_per_key_for_concurrent_misses() -> None:
    cache = ResponseCache()
    calls = []
    release = threading.Event()

    def build() -> Cached:
        calls.append(1)
        release.wait(5)
        return Cached(b"v1", "text/plain")

    key = (("board", "p"), 1)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get_or_build(key, build)))]
    threads += [
        threading.Thread(target=lambda: got.append(cache.get_or_build(key, build)))
        for _ in range(7)
    ]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join()
    assert len(calls) == 1  # no family version existed yet: everyone waited for the one build
    assert {g.body for g in got} == {b"v1"}  # type: ignore[attr-defined]


def test_latest_version_served_while_a_newer_one_builds() -> None:
    cache = ResponseCache()
    family = ("board", "p")
    cache.get_or_build((family, 1), lambda: Cached(b"v1", "text/plain"))
    started, release = threading.Event(), threading.Event()

    def slow() -> Cached:
        started.set()
        release.wait(5)
        return Cached(b"v2", "text/plain")

    builder = threading.Thread(target=lambda: cache.get_or_build((family, 2), slow))
    builder.start()
    assert started.wait(5)
    # a reader of version 2 (or 3) while 2 builds: the latest built (1), labelled as such
    served, value = cache.lookup((family, 2), lambda: Cached(b"never", "text/plain"))
    assert (served, value.body) == ((family, 1), b"v1")
    assert cache.lookup((family, 3), slow, stale_ok=True)[1].body == b"v1"
    release.set()
    builder.join()
    assert cache.lookup((family, 2), slow) == ((family, 2), cache.get((family, 2)))
    # other families never see each other's values
    other = cache.lookup((("board", "q"), 2), lambda: Cached(b"q", "text/plain"))
    assert other[1].body == b"q"
    # with nothing building, a new version is built by the request that asks for it
    assert cache.lookup((family, 4), lambda: Cached(b"v4", "text/plain"))[1].body == b"v4"


def test_lru_bound_and_gzip_once() -> None:
    cache = ResponseCache(max_entries=3)
    for i in range(5):
        cache.get_or_build((("f", i), 0), lambda i=i: Cached(bytes([i]) * 2000, "text/plain"))
    assert cache.get((("f", 0), 0)) is None and cache.get((("f", 4), 0)) is not None
    entry = cache.get((("f", 4), 0))
    assert entry.gzipped() is entry.gzipped() and len(entry.gzipped()) < 100


def test_a_hot_familys_reader_gets_the_previous_version_while_its_build_runs() -> None:
    """Under a stream of writes no reader waits out a build (issue 27's live reads); a lone
    write is still read back at once."""
    cache = ResponseCache(stale_window_s=5.0, fresh_wait_s=0.05)
    family = ("board", "p")
    cache.get_or_build((family, 1), lambda: Cached(b"v1", "text/plain"))
    # version 2 after a quiet spell: its reader waits for the build (read-your-writes)
    assert cache.lookup((family, 2), lambda: Cached(b"v2", "text/plain"))[1].body == b"v2"
    # the family just changed: it is hot, and version 3's slow build does not hold its reader
    release = threading.Event()

    def slow() -> Cached:
        release.wait(5)
        return Cached(b"v3", "text/plain")

    t0 = time.monotonic()
    served, value = cache.lookup((family, 3), slow)
    assert (served, value.body) == ((family, 2), b"v2") and time.monotonic() - t0 < 2
    # a second reader shares the build in flight (no second build), and also gets v2
    assert cache.lookup((family, 3), lambda: Cached(b"never", "text/plain"))[1].body == b"v2"
    release.set()
    deadline = time.monotonic() + 5
    while cache.get((family, 3)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.lookup((family, 3), slow) == ((family, 3), cache.get((family, 3)))
    assert cache.get((family, 3)).body == b"v3"
    # a build that fails in the background is raised to a reader that waits for it
    cold = ResponseCache(stale_window_s=0.0)
    cold.get_or_build((family, 1), lambda: Cached(b"v1", "text/plain"))
    cold.get_or_build((family, 2), lambda: Cached(b"v2", "text/plain"))

    def broken() -> Cached:
        raise RuntimeError("build failed")

    try:
        cold.lookup((family, 3), broken)
    except RuntimeError as exc:
        assert "build failed" in str(exc)
    else:
        raise AssertionError("a failing build was not raised to its reader")


def test_only_the_reader_that_starts_a_build_waits_for_it() -> None:
    """The second reader of a key building in the background takes the previous version at
    once, even with a long fresh wait (each waiting in turn was every read's p99 under a
    writer); the build count moves once the build that outdated a served answer is in."""
    cache = ResponseCache(stale_window_s=5.0, fresh_wait_s=30.0)
    family = ("board", "p")
    cache.get_or_build((family, 1), lambda: Cached(b"v1", "text/plain"))
    cache.get_or_build((family, 2), lambda: Cached(b"v2", "text/plain"))  # now hot
    assert cache.builds == 0  # nothing stale was served: the fast lane's stamp stays
    started, release = threading.Event(), threading.Event()

    def slow() -> Cached:
        started.set()
        release.wait(10)
        return Cached(b"v3", "text/plain")

    first: list[tuple] = []
    leader = threading.Thread(target=lambda: first.append(cache.lookup((family, 3), slow)))
    leader.start()  # waits up to 30 s for its build
    assert started.wait(5)
    follower: list[tuple] = []
    t = threading.Thread(target=lambda: follower.append(cache.lookup((family, 3), slow)))
    t.start()
    t.join(5)
    assert not t.is_alive(), "the second reader waited for the build"
    assert follower[0][0] == (family, 2) and follower[0][1].body == b"v2"
    assert cache.builds == 0  # the newer version is not in yet
    release.set()
    leader.join(5)
    assert first[0][1].body == b"v3"
    assert cache.builds == 1  # a stale answer went out: answers stamped before are void


def test_a_rebuild_voids_the_replays_of_its_own_family_only() -> None:
    """The fast lane's check of an answer (``guard``, from the family's epoch read before the
    lookup): a stale answer stops being replayed once its family's newer version is in, and
    answers of other families stay replayable (one count for all closed the lane for every
    page at each rebuild under a writer)."""
    cache = ResponseCache(stale_window_s=5.0, fresh_wait_s=0.0)
    board, study = ("board", "p"), ("study", 1)
    for v in (1, 2):  # both families hot
        cache.get_or_build((board, v), lambda v=v: Cached(b"b%d" % v, "text/plain"))
        cache.get_or_build((study, v), lambda v=v: Cached(b"s%d" % v, "text/plain"))
    fresh = cache.guard(study, cache.epoch(study))
    assert cache.get((study, 2)) is not None and fresh()
    release = threading.Event()

    def slow() -> Cached:
        release.wait(5)
        return Cached(b"b3", "text/plain")

    epoch = cache.epoch(board)
    served, value = cache.lookup((board, 3), slow)  # no wait: the previous version
    assert served == (board, 2) and value.body == b"b2"
    stale = cache.guard(board, epoch)
    assert stale() and fresh()  # the newer board is not in yet: both replayable
    release.set()
    deadline = time.monotonic() + 5
    while stale() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not stale()  # the board's newer version is in: its stale answer is void
    assert fresh()  # the study's answer was not touched
    assert cache.get((board, 3)).body == b"b3"


def test_a_builds_parts_are_built_in_full_not_taken_stale() -> None:
    """A page built in the background from its model: the model's new version, never the
    previous one stored under the page's new key."""
    cache = ResponseCache(stale_window_s=5.0, fresh_wait_s=0.01)
    model, page = ("model", 1), ("page", 1)
    for v in (1, 2):  # both families hot
        cache.get_or_build((model, v), lambda v=v: Cached(b"m%d" % v, "text/plain"))
        cache.get_or_build((page, v), lambda v=v: Cached(b"p%d" % v, "text/plain"))

    def slow_model() -> Cached:
        time.sleep(0.2)  # longer than fresh_wait_s
        return Cached(b"m3", "text/plain")

    def build_page() -> Cached:
        part = cache.get_or_build((model, 3), slow_model)
        return Cached(b"page of " + part.body, "text/plain")

    assert cache.lookup((page, 3), build_page)[0] == (page, 2)  # its reader: the previous page
    deadline = time.monotonic() + 5
    while cache.get((page, 3)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.get((page, 3)).body == b"page of m3"


def test_a_failed_build_voids_the_previous_version_it_let_out() -> None:
    """A background build that fails moves the build count like one that succeeds: the fast
    lane replayed its family's previous version while it ran, and would go on replaying it
    until the next commit with no reader left to build the new version again."""
    cache = ResponseCache(stale_window_s=5.0, fresh_wait_s=0.01)
    family = ("board", "p")
    cache.get_or_build((family, 1), lambda: Cached(b"v1", "text/plain"))
    cache.get_or_build((family, 2), lambda: Cached(b"v2", "text/plain"))  # now hot
    release = threading.Event()

    def broken() -> Cached:
        release.wait(5)
        raise RuntimeError("build failed")

    served, value = cache.lookup((family, 3), broken)  # waits 10 ms, then the previous version
    assert served == (family, 2) and value.body == b"v2"
    assert cache.builds == 0
    release.set()
    deadline = time.monotonic() + 5
    while cache.builds == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.builds == 1
    # the next reader of the new version builds it again (here it succeeds)
    assert cache.lookup((family, 3), lambda: Cached(b"v3", "text/plain"))[1].body == b"v3"


def test_a_new_version_drops_the_one_it_supersedes() -> None:
    """Under a writer each commit builds a family's next version; the one it replaces is not
    kept (models of every row of a board or a study, which each full garbage collection walked
    while the LRU filled), other families' entries are, and an older key asked again builds."""
    cache = ResponseCache(stale_window_s=0.0)
    board, study = ("board", "p"), ("study", 1)
    cache.get_or_build((study, 1), lambda: Cached(b"s1", "text/plain"))
    for v in (1, 2, 3):
        cache.get_or_build((board, v), lambda v=v: Cached(b"b%d" % v, "text/plain"))
    assert cache.get((board, 1)) is None and cache.get((board, 2)) is None
    assert cache.get((board, 3)).body == b"b3" and cache.get((study, 1)).body == b"s1"
    assert cache.get_or_build((board, 2), lambda: Cached(b"b2 again", "text/plain")).body == (
        b"b2 again"
    )

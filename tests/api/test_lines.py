"""Fidelity lines beside the reads (api.lines): a board never waits for its line past the
setting, shows the latest line done, and is built again when the current one is done."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from normfree.api.lines import FidelityLines
from normfree.specs import NormSpec
from tests.api.conftest import Api, wait_for_analyses
from tests.api.test_reads import _finish, _study


def _until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_line_is_computed_once_per_version_and_never_waited_for_past_the_limit() -> None:
    lines = FidelityLines()
    release = threading.Event()
    calls: list[int] = []

    def slow(v: int) -> Callable[[], str]:
        def compute() -> str:
            calls.append(v)
            release.wait(10)
            return f"line {v}"

        return compute

    target = ("proxy", ("db", "p"))
    t0 = time.perf_counter()
    assert lines.line(target, 1, slow(1), wait_s=0.05) is None  # nothing done yet
    assert time.perf_counter() - t0 < 2
    release.set()
    _until(lambda: lines.stamp(target) == 1)
    assert lines.line(target, 1, slow(1), wait_s=0) == "line 1" and calls == [1]
    # a new version: the latest line done is shown while the new one computes
    release.clear()
    assert lines.line(target, 2, slow(2), wait_s=0.05) == "line 1"
    release.set()
    assert lines.line(target, 2, slow(2), wait_s=10) == "line 2"
    assert calls == [1, 2] and lines.stamp(target) == 2
    # once a line is done, a new version's build waits ``rewait_s`` (none on a server)
    release.clear()
    t0 = time.perf_counter()
    assert lines.line(target, 5, slow(5), wait_s=30, rewait_s=0) == "line 2"
    assert time.perf_counter() - t0 < 5
    release.set()
    assert lines.line(target, 5, slow(5), wait_s=30) == "line 5"
    assert lines.stamp(target) == 3  # an older line was shown for version 5
    # a line every build waited for moves nothing: they show it already
    assert lines.line(target, 4, lambda: "line 4", wait_s=10) == "line 4"
    assert lines.stamp(target) == 3
    assert lines.stamp(("proxy", ("db", "q"))) == 0  # other targets never move

    def broken() -> str:
        raise ValueError("unreadable reference")

    with pytest.raises(ValueError, match="unreadable"):
        lines.line(target, 3, broken, wait_s=10)  # the build that waits sees the failure
    assert lines.line(target, 3, broken, wait_s=0) == "line 4"  # one that does not: the latest


def test_a_targets_first_line_is_waited_for_once() -> None:
    """While a target's first line computes (a server's first seconds), only the first build
    waits ``wait_s`` for it; later builds of newer versions show none at once."""
    lines = FidelityLines()
    release = threading.Event()

    def slow() -> str:
        release.wait(10)
        return "line"

    target = ("proxy", ("db", "first"))
    t0 = time.perf_counter()
    assert lines.line(target, 1, slow, wait_s=0.5, rewait_s=0) is None
    assert time.perf_counter() - t0 >= 0.45  # the first build waited
    t0 = time.perf_counter()
    assert lines.line(target, 2, slow, wait_s=0.5, rewait_s=0) is None
    assert lines.line(target, 3, slow, wait_s=0.5, rewait_s=0) is None
    assert time.perf_counter() - t0 < 0.3  # the next ones did not
    release.set()
    _until(lambda: lines.line(target, 3, slow, wait_s=0, rewait_s=0) == "line")
    # without rewait_s (the test suite's exact waits), every build waits as asked
    other = ("proxy", ("db", "exact"))
    assert lines.line(other, 1, lambda: "exact 1", wait_s=10) == "exact 1"


def test_the_next_line_waits_spacing_times_the_last_ones_cost() -> None:
    """A server spaces a target's lines (``fidelity_line_spacing``, 9x): the next one starts no
    sooner than that multiple of the last one's cost; 0 (the test suite) starts it at once."""
    lines = FidelityLines()
    target = ("proxy", ("db", "spaced"))

    def costs_half_a_second(v: int) -> Callable[[], int]:
        def compute() -> int:
            time.sleep(0.5)
            return v

        return compute

    assert lines.line(target, 1, costs_half_a_second(1), wait_s=10, spacing=10) == 1
    # the next may start ~5 s (10 x 0.5 s) after: a build that waits 1 s sees the old line
    assert lines.line(target, 2, costs_half_a_second(2), wait_s=1, rewait_s=1, spacing=10) == 1
    assert lines.line(target, 2, costs_half_a_second(2), wait_s=30, rewait_s=30, spacing=0) == 2
    t0 = time.perf_counter()
    assert lines.line(target, 3, costs_half_a_second(3), wait_s=30, rewait_s=30, spacing=0) == 3
    assert time.perf_counter() - t0 < 3  # unspaced: at once (0.5 s; the default 9x: 4.5 s)


def test_a_process_exit_waits_for_the_line_being_computed_and_starts_no_other() -> None:
    """The lines' thread is a daemon: left inside scipy's native code when the interpreter
    finalized, it aborted the process (``normfree export leaderboard`` exited 134 after writing
    its file). ``close`` (registered with ``atexit``) waits for the running line, cancels the
    wanted ones and ends the thread; a line asked for afterwards starts nothing."""
    lines = FidelityLines()
    finished: list[int] = []

    def slow(v: int) -> Callable[[], int]:
        def compute() -> int:
            time.sleep(0.5)
            finished.append(v)
            return v

        return compute

    assert lines.line(("proxy", ("db", "a")), 1, slow(1), wait_s=0) is None  # running
    time.sleep(0.1)
    assert lines.line(("proxy", ("db", "b")), 1, slow(2), wait_s=0) is None  # wanted
    thread = lines._thread
    assert thread is not None and thread.is_alive()
    lines.close()
    assert finished == [1] and not thread.is_alive()
    assert lines.line(("proxy", ("db", "c")), 1, slow(3), wait_s=0.2) is None
    time.sleep(0.7)
    assert finished == [1] and not lines.busy()


def test_a_lines_spacing_has_a_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line's cost is its wall time, which for a server's first line includes its background
    worker's start: spaced 9x, the next line of that target waited 100 s and moved its reads'
    keys long after the warm-up built them. The wait is capped (``MAX_SPACING_S``)."""
    from normfree.api import lines as lines_module

    monkeypatch.setattr(lines_module, "MAX_SPACING_S", 0.5)
    lines = FidelityLines()
    target = ("study", ("db", 1))

    def slow(v: int) -> Callable[[], int]:
        def compute() -> int:
            time.sleep(0.4)
            return v

        return compute

    assert lines.line(target, 1, slow(1), wait_s=10, spacing=100) == 1  # spaced 40 s uncapped
    t0 = time.perf_counter()
    assert lines.line(target, 2, slow(2), wait_s=30, rewait_s=30, spacing=100) == 2
    assert time.perf_counter() - t0 < 5
    assert not lines.busy()


def test_a_board_answers_before_its_line_and_shows_it_when_done(
    make_api: Callable[..., Api], sqlite_database_url: str
) -> None:
    api = make_api(sqlite_database_url, prescreen=False, fidelity_line_wait_s=0)
    sid = _study(api.repo, [NormSpec(name="erf"), NormSpec(name="tanh")])
    _finish(api.repo, sid)
    wait_for_analyses(api)
    c = api.client
    first = c.get("/api/leaderboards/vit-tiny")
    assert first.status_code == 200 and len(first.json()["rows"]) == 2

    def shown() -> bool:
        return c.get("/api/leaderboards/vit-tiny").json()["fidelity"] is not None

    _until(shown)  # the line computed beside the reads arrives without a write
    done = c.get("/api/leaderboards/vit-tiny")
    assert done.headers["etag"] != first.headers["etag"]
    assert done.json()["fidelity"]["url"] == "/fidelity?proxy=vit-tiny"
    # the study page answers at once too, and shows its own line once done
    assert c.get(f"/studies/{sid}").status_code == 200
    _until(lambda: "its fidelity report" in c.get(f"/studies/{sid}").text)

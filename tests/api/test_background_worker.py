"""Issue 27, point 1: a server's own background computations run in its background worker.

The fidelity lines, the catalog's public rows and the arms' function analyses are seconds of
pure Python and sympy; on the server's threads they held the GIL while the first requests after a
start and every reader under a writer waited. In a server they come from one worker process
(``api.offload.BackgroundWorker``); these tests check they are the values the server would have
computed itself, that a killed worker is replaced, and that without a worker (an app built in a
test's process) they are computed in the process as before.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from normfree.api import fidelity, offload
from normfree.api.services import candidates, leaderboards
from normfree.testing.seeding import seed_property_study


@pytest.fixture
def background() -> Iterator[offload.BackgroundWorker]:
    offload.start_background()
    worker = offload._BACKGROUND
    assert worker is not None
    try:
        yield worker
    finally:
        offload.close_background()


@pytest.fixture
def seeded(make_api: Any, sqlite_database_url: str) -> tuple[Any, int]:
    """An app's service state (built in this process) and a finished property study's id."""
    api = make_api(sqlite_database_url, prescreen=False)
    return api.app.state.services, seed_property_study(api.settings).study_id


def test_lines_catalog_and_analyses_come_from_the_worker_unchanged(
    background: offload.BackgroundWorker, seeded: tuple[Any, int]
) -> None:
    state, sid = seeded
    lines = background.jobs["normfree.api.fidelity:summary_dict"]
    line = fidelity.summary_anywhere(state, study_id=sid)
    assert background.jobs["normfree.api.fidelity:summary_dict"] == lines + 1
    assert line == fidelity.summary(state, study_id=sid)
    assert line is not None and line.url.endswith(f"study_id={sid}")
    # niced, not at the idle class of the parse workers: a host training on every core must
    # not starve the server's own pages
    pid = background.pid
    assert pid is not None and os.sched_getscheduler(pid) != os.SCHED_IDLE
    assert os.getpriority(os.PRIO_PROCESS, pid) >= os.getpriority(os.PRIO_PROCESS, 0) + 1
    # an analysis of a transform call: the worker's is the process's own
    assert leaderboards._catalog_info("shift_h(erf, 0.25)") == leaderboards.describe(
        "shift_h(erf, 0.25)"
    )
    assert background.jobs["normfree.api.services.leaderboards:describe"] >= 1
    rows = candidates.catalog_public_rows()
    done, from_worker = offload.in_background(
        "normfree.api.services.candidates:catalog_public_rows", what="the catalog", seconds=300
    )
    assert done and from_worker == rows and len(rows) >= 16


def test_a_killed_background_worker_is_replaced(
    background: offload.BackgroundWorker, seeded: tuple[Any, int]
) -> None:
    state, sid = seeded
    assert fidelity.summary_anywhere(state, study_id=sid) is not None
    first = background.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    # the next computation notices the dead process and starts a fresh one
    assert fidelity.summary_anywhere(state, study_id=sid) == fidelity.summary(state, study_id=sid)
    assert background.pid not in (None, first)


def test_without_a_worker_the_process_computes_them(seeded: tuple[Any, int]) -> None:
    assert offload._BACKGROUND is None  # an app built in a test's process starts none
    state, sid = seeded
    assert offload.in_background("os:getpid", what="a pid", seconds=5) == (False, None)
    assert fidelity.summary_anywhere(state, study_id=sid) == fidelity.summary(state, study_id=sid)


def test_a_stopping_server_computes_no_background_work_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once a server stops (its app's shutdown closes the worker for good), background work
    asked for is refused, not computed here: a fidelity line still queued at a stop had run
    sympy on a daemon thread that the interpreter's exit aborted (status 134). A worker closed
    otherwise (tests) leaves the usual fallback."""
    monkeypatch.setattr(offload, "_STOPPING", False)  # restored after the test
    offload.close_background()  # not final: nothing changes
    assert offload.in_background("math:sqrt", 4.0, what="x", seconds=5.0) == (False, None)
    offload.close_background(final=True)
    with pytest.raises(offload.ServerStopping, match="the fidelity line: the server is stopping"):
        offload.in_background("math:sqrt", 4.0, what="the fidelity line", seconds=5.0)

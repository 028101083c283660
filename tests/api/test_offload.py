"""Issue 28, point 1: parses run in worker processes, bounded per client, fair, time-limited.

The pool's own tests use real worker processes and ``time:sleep`` as the job (a job whose length
the test chooses); the HTTP tests go through the app; the flood test through a real server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from typing import Any

import httpx
import pytest

from normfree.api.errors import ApiError
from normfree.api.offload import OffloadPool, cpu_seconds
from normfree.testing.live import live_server
from tests.api.flood import HEALTH_LIMIT_S, health_during_flood


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def spin(seconds: float) -> None:
    """A job that keeps a core busy for ``seconds`` of wall-clock time (its CPU time is at most
    that, less on a busy host)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


linux_only = pytest.mark.skipif(
    cpu_seconds(os.getpid()) is None or not hasattr(os, "SCHED_IDLE"),
    reason="the idle scheduling class and /proc CPU times are Linux's",
)


def test_a_job_past_its_time_limit_is_refused_and_its_worker_replaced() -> None:
    pool = OffloadPool(workers=1, seconds=1.0, per_client=4)
    try:
        assert _run(pool.call("a", "math:sqrt", 16.0)) == 4.0
        pid = pool.slots[0].pid
        with pytest.raises(ApiError) as err:
            _run(pool.call("a", "tests.api.test_offload:spin", 300.0, what="the formula"))
        assert err.value.status_code == 422
        assert "longer than the server's limit of 1 s" in err.value.message
        assert err.value.detail == {"reason": "time_limit", "seconds": 1.0}
        assert pool.slots[0].replaced == 1 and pool.slots[0].pid is None
        # the next job gets a fresh process
        assert _run(pool.call("a", "math:sqrt", 9.0)) == 3.0
        assert pool.slots[0].pid not in (None, pid)
    finally:
        pool.close()


@linux_only
def test_workers_run_only_when_a_core_would_idle() -> None:
    """At nice +10 two parses still took a tenth of the CPU each from a busy event loop on two
    cores (/api/health p99 79 ms, max 102 ms while parses ran; 28 and 33 ms at SCHED_IDLE):
    bench/results/hostile-quick.md. A worker is in the idle class before its first job."""
    pool = OffloadPool(workers=1, seconds=60.0)
    try:
        assert _run(pool.call("a", "math:sqrt", 4.0)) == 2.0
        pid = pool.slots[0].pid
        assert pid is not None and os.sched_getscheduler(pid) == os.SCHED_IDLE
    finally:
        pool.close()


@linux_only
def test_the_time_limit_counts_cpu_time_not_waiting() -> None:
    """An idle-class worker may wait for a core on a busy host: waiting is not the formula's
    cost, so a job under its CPU limit is answered however long it waited; one that waited past
    the pool's wait limit is answered 503 (busy, retry), not 422 (too expensive)."""
    pool = OffloadPool(workers=1, seconds=0.5, wait=60.0)
    try:
        _run(pool.call("a", "math:sqrt", 1.0))  # the worker's start is not the test
        t0 = time.monotonic()
        assert _run(pool.call("a", "time:sleep", 1.5)) is None  # 1.5 s, ~0 s of CPU
        assert time.monotonic() - t0 >= 1.5 and pool.slots[0].replaced == 0
        pool.wait = 1.0
        with pytest.raises(ApiError) as err:
            _run(pool.call("a", "time:sleep", 30.0))
        assert err.value.status_code == 503 and err.value.detail == {"reason": "busy"}
        assert err.value.headers["Retry-After"] and pool.slots[0].replaced == 1
    finally:
        pool.close()


def burn(n: int) -> int:
    """A job of a fixed amount of CPU work (unlike ``spin``, which ends by the clock)."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


@linux_only
def test_a_job_starved_by_normal_priority_work_runs_again_at_the_servers_priority() -> None:
    """A study training on every core starves the idle class (~0.3% of a core): a parse, a
    study's check or a fidelity report waited out the wait limit and answered 503, or a page
    hung. Once a job has waited STARVED_AFTER_S for a core, it runs again on a worker at the
    server's priority, and gets its answer."""
    import subprocess
    import sys

    from normfree.api import offload

    if offload.runqueue_seconds(os.getpid()) is None:
        pytest.skip("no /proc/PID/schedstat here: starvation cannot be seen")
    pool = OffloadPool(workers=1, seconds=30.0, wait=25.0)
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        _run(pool.call("a", "math:sqrt", 1.0))  # started, at the idle class
        slot = pool.slots[0]
        assert os.sched_getscheduler(slot.pid) == os.SCHED_IDLE
        for _ in range((os.cpu_count() or 2) + 1):  # normal priority on every core
            hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        time.sleep(0.5)
        t0 = time.monotonic()
        assert _run(pool.call("a", "tests.api.test_offload:burn", 2_000_000)) == burn(2_000_000)
        assert time.monotonic() - t0 < 20  # not the wait limit's 503
        assert slot.escalated == 1
        assert os.sched_getscheduler(slot.pid) == os.SCHED_OTHER  # the server's priority
        # later jobs within the escalation go to that worker without starving first
        assert _run(pool.call("a", "math:sqrt", 9.0)) == 3.0 and slot.escalated == 1
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        pool.close()


def test_an_api_error_raised_in_a_worker_arrives_as_itself() -> None:
    pool = OffloadPool(workers=1, seconds=60.0)
    try:
        with pytest.raises(ApiError) as err:
            _run(pool.call("a", "normfree.api.services.candidates:parse_submission", "u +* 2", "x"))
        assert err.value.status_code == 422 and err.value.error == "invalid_formula"
        assert err.value.detail["position"] is not None
    finally:
        pool.close()


def test_one_client_s_queue_is_bounded_and_others_are_served_in_turn() -> None:
    pool = OffloadPool(workers=1, seconds=60.0, per_client=3)

    async def scenario() -> tuple[list[Any], list[str]]:
        done: list[str] = []

        async def job(client: str, tag: str, seconds: float) -> Any:
            try:
                await pool.call(client, "time:sleep", seconds)
                done.append(tag)
                return tag
            except ApiError as exc:
                return exc

        await pool.call("warm", "math:sqrt", 1.0)  # the worker's start is not the test
        flood = [asyncio.create_task(job("hostile", f"h{i}", 0.4)) for i in range(4)]
        await asyncio.sleep(0.05)
        reader = asyncio.create_task(job("reader", "r", 0.0))
        return await asyncio.gather(*flood, reader), done

    try:
        results, done = _run(scenario())
    finally:
        pool.close()
    refused = [r for r in results if isinstance(r, ApiError)]
    assert len(refused) == 1 and refused[0].status_code == 429
    assert refused[0].headers["Retry-After"] and refused[0].detail["limit"] == 3
    # the reader queued behind three of the hostile client's jobs, yet ran second: turns
    assert done.index("r") == 1, done


def test_get_of_a_new_formula_is_parsed_in_a_worker(make_api: Any, sqlite_database_url: str):
    api = make_api(sqlite_database_url, prescreen=False)
    r = api.client.get("/api/candidates/u*exp(-u**2*3)")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["plot"]["f"] and body["properties"]
    assert any(s.pid for s in api.app.state.offload.slots)  # a worker process answered it
    r = api.client.get("/api/candidates/u +* 2")
    assert r.status_code == 422 and r.json()["detail"]["position"] is not None
    assert api.client.get("/api/candidates/no_such_name").status_code == 404
    r = api.client.get("/api/candidates/erf")  # a known name: no worker needed
    assert r.status_code == 200 and r.json()["plot"]["f"]


def test_a_formula_past_the_time_limit_answers_422(make_api: Any, sqlite_database_url: str):
    api = make_api(sqlite_database_url, prescreen=False, offload_seconds=0.001, offload_workers=1)
    pool = api.app.state.offload
    pool.slots[0]._start()  # started and ready: the limit counts the parse only
    r = api.client.get("/api/candidates/tanh(u)*atan(u*3)+u**3*exp(-u**2)")
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "too_expensive" and "limit" in r.json()["message"]
    assert pool.slots[0].replaced == 1
    r = api.client.post(
        "/api/candidates",
        json={"name": "slowpoke", "formula": "u/(1+abs(u))+0.1*atan(u)"},
        headers=api.auth,
    )
    assert r.status_code == 422 and r.json()["error"] == "too_expensive"
    assert api.repo.get_candidate("slowpoke") is None


def test_submission_and_reference_import_go_through_the_pool(
    make_api: Any, sqlite_database_url: str
) -> None:
    api = make_api(sqlite_database_url, prescreen=False)
    r = api.client.post(
        "/api/candidates", json={"name": "mine", "formula": "u/(1+u**2)**0.7"}, headers=api.auth
    )
    assert r.status_code == 201, r.text
    assert api.repo.get_candidate("mine")["canonical"]
    # a resubmission is answered from this process's memory of the worker's parse
    r = api.client.post(
        "/api/candidates", json={"name": "mine", "formula": "u/(1+u**2)**0.7"}, headers=api.auth
    )
    assert r.status_code == 200 and r.json()["created"] is False
    bad = api.client.post(
        "/api/references",
        json={"name": "r1", "source": "x", "rows": [{"function": "u +* 2"}]},
        headers=api.auth,
    )
    assert bad.status_code == 422, bad.text
    assert api.client.get("/api/references/r1").status_code == 404


def test_health_answers_while_one_client_floods_formula_parses(
    sqlite_database_url: str,
) -> None:
    """Issue 28's probe: 20 parallel GETs of new formulas from one client (the limit turned off,
    so all of them parse) kept /api/health waiting 56 s. Now it answers within a second."""
    env = {"NORMFREE_ANONYMOUS_PARSES_PER_MINUTE": "0", "NORMFREE_OFFLOAD_QUEUE_PER_CLIENT": "30"}
    with live_server(sqlite_database_url, "--no-run-studies", env=env) as base:
        with concurrent.futures.ThreadPoolExecutor(2) as ex:  # both workers started and warm
            list(
                ex.map(
                    lambda f: httpx.get(base + "api/candidates/" + f, timeout=120),
                    ["u*tanh(u)", "u*tanh(u*2)"],
                )
            )
        formulas = [f"u*exp(-u**2*{i + 2})+atan(u*{i + 3})*0.{i + 1}" for i in range(20)]

        paths = ["api/candidates/" + f for f in formulas]
        worst, codes = health_during_flood(base, paths, settle_s=0.5)
    assert worst < HEALTH_LIMIT_S, f"/api/health took {worst:.2f} s during the flood"
    assert set(codes) <= {200, 422}, codes


def test_the_workers_and_their_forkserver_end_with_a_killed_server(tmp_path: Any) -> None:
    """A server killed outright (SIGKILL: no shutdown code runs) while a worker is busy leaves no
    parse worker and no forkserver behind: each sees its parent gone within about a second
    (the busy worker would otherwise run its job out: here two minutes)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from normfree.workers.localray import alive, descendants

    script = (
        "import asyncio, sys\n"
        "from normfree.api.offload import OffloadPool\n"
        "pool = OffloadPool(workers=1, seconds=60.0)\n"
        "asyncio.run(pool.call('c', 'time:sleep', 0.0))\n"
        "print('ready', flush=True)\n"
        "asyncio.run(pool.call('c', 'time:sleep', 120.0))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        tree = descendants(proc.pid)
        assert len(tree) >= 2, tree  # the forkserver and a worker forked from it
        time.sleep(1.0)  # the worker is in its two-minute job
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in tree):
            time.sleep(0.2)
        left = [p for p in tree if alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, left
    finally:
        if proc.poll() is None:
            proc.kill()

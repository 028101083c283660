"""Reads while a study writes, from the first second after a start (issue 27, point 1).

A database of finished trials (``readload``: 10k by default, or a copy of one seeded earlier)
and a study of waiting trials that a writer process finishes at ``--rate`` trials a second
through the real write path (``lease_next`` + ``finish_trial``, as a Ray worker writes them).
A real ``normfree serve --no-run-studies`` starts on loopback; the moment it answers:

1. **first requests**: each read once, in turn, on one connection (what a user who opens the
   dashboard right after a start waits for; target < 1 s each);
2. **load**: the writer starts, and ``--readers`` keep-alive clients (32) read in turn the
   leaderboard (API and page), ``GET /api/studies/N`` as documented (its default answer: a
   page of trials), the study page and a trial (random seeded studies and trials, and the
   writing study itself), for ``--seconds``. No warm-up: the first seconds after the start
   are part of the window, and reported apart (``first_5s``).

Reported per read: count, errors, p50/p90/p99/max in ms, for the whole window and its first
5 s; and **staleness**: each answer for the writing study says how many of its trials had
finished; the writer logs the time of each commit, so an answer's lag is how many commits
made before its request was sent it does not show (target: at most 1). Targets: p99 < 50 ms,
the study page < 200 ms. The machine is shared: the load average is recorded.

    python bench/bench_live_reads.py [--quick] [--backend sqlite|postgresql] [--trials 10000]
        [--seeded FILE_OR_URL] [--seconds 20] [--readers 32] [--rate 5] [--delay 0]
        [--server-workers 1]

``--quick``: 300 trials, 5 s, under 30 s. Prints one JSON object as its last line and writes it
to bench/results/live_reads[-quick].json (``--out`` for another file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from figures import latency_figures, rounded
from machine import describe
from readload import (
    PROXY,
    Client,
    Writer,
    _database,
    _plan,
    plain,
    quiet_gc,
    seeded_database,
    use_quick_grid,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
READS = ("leaderboard", "leaderboard_page", "study", "study_page", "trial")
FIRST_WINDOW_S = 5.0


def writer(url: str, sid: int, rate: float, go: Any, out: Any) -> None:
    """Finish the study's trials at ``rate`` a second from the time ``go`` gives, until the
    end time it gives; put the wall time of every commit on ``out`` (and of the one before
    the window)."""
    with Writer(url, "live-writer", 7) as w:  # opened before the start: imports take seconds
        # One finish before the window, as a worker that has written before: a process's
        # first commit pays its connection's and statements' set-up (~250 ms), and the catch-up
        # after it put the window's first two commits 20 ms apart, so that answers 30 ms later
        # read as two commits behind (a writer at five a second spaces them 200 ms).
        warmed = time.time() if w.finish_one(sid) is not None else None
        start, until = go.get()
        commits: list[float] = []
        spent: list[float] = []  # seconds each commit took: a writer that cannot keep its rate
        try:
            k = 0
            while time.time() < until:
                due = start + k / rate
                if due > time.time():
                    time.sleep(due - time.time())
                t0 = time.time()
                if w.finish_one(sid) is None:
                    break
                commits.append(time.time())
                spent.append(commits[-1] - t0)
                k += 1
        finally:
            out.put((commits, spent, warmed))


def paths(info: dict[str, Any], live: int) -> dict[str, Any]:
    """Each read's path maker: ``make(rng)`` -> (path, whether it is the writing study)."""
    studies = info["study_ids"]
    lo, hi = info["trial_range"]

    def study(rng: random.Random, page: bool) -> tuple[str, bool]:
        sid = live if rng.random() < 0.5 else rng.choice(studies)
        return (f"/studies/{sid}" if page else f"/api/studies/{sid}"), sid == live

    return {
        "leaderboard": lambda rng: (f"/api/leaderboards/{PROXY}", False),
        "leaderboard_page": lambda rng: (f"/?proxy={PROXY}", False),
        "study": lambda rng: study(rng, False),
        "study_page": lambda rng: study(rng, True),
        "trial": lambda rng: (f"/api/trials/{rng.randint(lo, hi)}", False),
    }


async def first_requests(host: str, port: int, makers: dict[str, Any]) -> dict[str, Any]:
    """Each read once, in turn, on one connection, right after the start: its ms."""
    c = Client(host, port)
    rng = random.Random(1)
    out: dict[str, Any] = {}
    try:
        for name, make in makers.items():
            path, _live = make(rng)
            t0 = time.perf_counter()
            status, _body = await c.fetch("GET", path)
            out[name] = {"ms": rounded((time.perf_counter() - t0) * 1000), "status": status}
    finally:
        await c.close()
    return out


async def load(
    host: str, port: int, makers: dict[str, Any], readers: int, start: float, until: float
) -> tuple[
    dict[str, list[tuple[float, float]]], dict[str, int], dict[str, int], list[tuple[float, int]]
]:
    """The readers until ``until``: per read, (send time, ms) of each good answer; errors and
    timeouts per read; and (send time, finished trials shown) of each answer for the writing
    study."""
    lat: dict[str, list[tuple[float, float]]] = {k: [] for k in makers}
    errors = dict.fromkeys(makers, 0)
    timeouts = dict.fromkeys(makers, 0)  # unanswered after 30 s: counted in errors too
    seen: list[tuple[float, int]] = []
    names = list(makers)

    async def reader(k: int) -> None:
        c = Client(host, port)
        rng = random.Random(100 + k)
        i = k
        try:
            while time.time() < until:
                name = names[i % len(names)]
                i += 1
                path, live = makers[name](rng)
                sent, t0 = time.time(), time.perf_counter()
                try:
                    status, body = await asyncio.wait_for(c.fetch("GET", path), 30)
                except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                    errors[name] += 1
                    timeouts[name] += isinstance(exc, TimeoutError)
                    await c.close()
                    c = Client(host, port)
                    continue
                ms = (time.perf_counter() - t0) * 1000
                if status != 200:
                    errors[name] += 1
                    continue
                lat[name].append((sent - start, ms))
                if live and name == "study":
                    seen.append((sent, int(json.loads(plain(body))["progress"]["finished"])))
        finally:
            await c.close()

    await asyncio.gather(*(reader(k) for k in range(readers)))
    return lat, errors, timeouts, seen


async def _health(host: str, port: int) -> dict[str, Any]:
    """The server's ``/api/health``: its read builder's and fast lane's figures."""
    c = Client(host, port)
    try:
        _status, body = await c.fetch("GET", "/api/health")
        return json.loads(plain(body))
    finally:
        await c.close()


def lane_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """How the window's reads were answered by the server's fast lane (``api.fastlane``): the
    counts the window added, and the share of lane reads that skipped the app."""
    a, b = before.get("fast_lane"), after.get("fast_lane")
    if not a or not b:
        return None
    out = {k: b[k] - a[k] for k in b}
    out["routed"] -= 1  # the health read that took the figures after the window
    lane = out["replayed"] + out["routed"]
    out["share_replayed"] = rounded(out["replayed"] / lane) if lane else None
    return out


def staleness(seen: list[tuple[float, int]], commits: list[float], start: float) -> dict[str, Any]:
    """How many commits made before each answer's request it did not show (``commits``: every
    commit of the writing study, the one before the window included)."""
    lags, ages, late = [], [], []
    for sent, finished in seen:
        made = sum(1 for t in commits if t < sent)
        lag = max(0, made - finished)
        lags.append(lag)
        # how long before the request the first commit it does not show was made
        age = (sent - commits[made - lag]) * 1000 if lag else 0.0
        ages.append(age)
        if lag > 1:
            late.append([rounded(sent - start), lag, rounded(age)])
    if not lags:
        return {"answers": 0}
    ages.sort()
    return {
        "answers": len(lags),
        "max_commits_behind": max(lags),
        # the age of the oldest commit an answer misses (0 when current): p99 and max, ms
        "missed_commit_age_ms": {
            "p99": rounded(ages[int(0.99 * (len(ages) - 1))]),
            "max": rounded(ages[-1]),
        },
        # answers more than one commit behind: [s into the window, commits, age ms]
        "more_than_1_behind": late[:20],
        "share_more_than_1_behind": rounded(sum(1 for x in lags if x > 1) / len(lags)),
        "share_current": rounded(sum(1 for x in lags if x == 0) / len(lags)),
    }


def figures_of(
    lat: dict[str, list[tuple[float, float]]],
    errors: dict[str, int],
    timeouts: dict[str, int],
    seconds: float,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, samples in lat.items():
        whole = latency_figures([ms for _t, ms in samples], errors[name], seconds)
        early = [ms for t, ms in samples if t < FIRST_WINDOW_S]
        early_figures = latency_figures(early, 0, FIRST_WINDOW_S)
        out[name] = {**whole, "timeouts": timeouts[name], "first_5s": early_figures}
    return out


def measure(url: str, info: dict[str, Any], args: Any) -> dict[str, Any]:
    from normfree.storage import Database, Repository
    from normfree.testing.live import live_server

    db = Database(url)
    live = _plan(Repository(db, max_attempts=3), 20_000 + len(info["study_ids"]))
    db.dispose()
    ctx = mp.get_context("spawn")
    go: Any = ctx.Queue()
    out_q: Any = ctx.Queue()
    proc = ctx.Process(target=writer, args=(url, live, args.rate, go, out_q), daemon=True)
    proc.start()  # imports while the server starts
    makers = paths(info, live)
    extra = ("--workers", str(args.server_workers)) if args.server_workers > 1 else ()
    with live_server(url, "--no-run-studies", *extra, timeout=300) as base:
        host, port_s = base.split("//")[1].rstrip("/").split(":")
        port = int(port_s)
        started = time.time()
        first = asyncio.run(first_requests(host, port, makers))
        first_s = round(time.time() - started, 2)
        time.sleep(args.delay)  # 0: the window starts at once (the "first second")
        load_before = os.getloadavg()[0]
        health_before = asyncio.run(_health(host, port))
        start = time.time()
        until = start + args.seconds
        go.put((start, until))
        loaded = load(host, port, makers, args.readers, start, until)
        with quiet_gc():
            lat, errors, timeouts, seen = asyncio.run(loaded)
        commits, spent, warmed = out_q.get(timeout=120)
        proc.join(30)
        health_after = asyncio.run(_health(host, port))
    reads = figures_of(lat, errors, timeouts, args.seconds)
    targets = {
        "first_requests_lt_1s": all(v["ms"] < 1000 and v["status"] == 200 for v in first.values()),
        **{
            f"{name}_p99_lt_{200 if name == 'study_page' else 50}ms": (
                (reads[name].get("p99_ms") or 1e9) < (200 if name == "study_page" else 50)
            )
            for name in READS
        },
    }
    if args.dump:  # every answer's (read, seconds into the window, ms) and the commits
        rows = [(name, t, ms) for name, xs in lat.items() for t, ms in xs]
        args.dump.write_text(json.dumps({"reads": rows, "commits": [c - start for c in commits]}))
    stale = staleness(seen, ([warmed] if warmed is not None else []) + commits, start)
    targets["at_most_1_commit_behind"] = stale.get("max_commits_behind", 99) <= 1
    return {
        "window_start_unix": round(start, 3),  # to line up per-process CPU samples with it
        "first_requests": first,
        "first_requests_s": first_s,
        "reads": reads,
        "writes": {
            "commits": len(commits),
            "per_s": rounded(len(commits) / args.seconds),
            "commit_ms_p50": rounded(1000 * statistics.median(spent)) if spent else None,
            "commit_ms_max": rounded(1000 * max(spent)) if spent else None,
            # the live study ran out of waiting trials this far into the window (a --quick
            # study holds ~40: 8 s at 5 a second); None: the writer wrote to the end
            "ran_out_at_s": (
                rounded(commits[-1] - start)
                if commits and commits[-1] < until - 2.0 / args.rate
                else None
            ),
        },
        "staleness": stale,
        # the server's read builder after the window (api.builder): rebuilds it gave, and
        # those built in the server instead; null when off (NORMFREE_READ_BUILDER=0)
        "read_builder": health_after.get("read_builder"),
        # how the server's fast lane answered the window's reads (replayed: without the app)
        "fast_lane": lane_figures(health_before, health_after),
        "targets": targets,
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300 trials, 5 s: under 30 s")
    ap.add_argument("--backend", default="sqlite", choices=("sqlite", "postgresql"))
    ap.add_argument("--trials", type=int, default=None, help="finished trials (10000)")
    ap.add_argument("--seeded", default=None, help="a database seeded earlier, copied first")
    ap.add_argument("--seconds", type=float, default=None, help="the load's window (20)")
    ap.add_argument("--readers", type=int, default=32)
    ap.add_argument("--rate", type=float, default=5.0, help="finished trials a second")
    ap.add_argument(
        "--delay",
        type=float,
        default=0.0,
        help="seconds between the first requests and the window (0: the issue's target; more "
        "shows the server once its start-up work is done)",
    )
    ap.add_argument(
        "--server-workers",
        type=int,
        default=1,
        help="`normfree serve --workers N` (each process its own read cache, lane and builder)",
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--dump", type=Path, default=None, help="write every answer's latency here")
    args = ap.parse_args()
    if args.quick:
        use_quick_grid()
    args.trials = args.trials or (300 if args.quick else 10_000)
    args.seconds = args.seconds or (5.0 if args.quick else 20.0)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nf-live-reads-") as tmp:
        url, drop = _database(args.backend, tmp)
        try:
            url, seeded, info = seeded_database(url, tmp, args.trials, 1, args.seeded)
            print(f"[{args.backend}] seeded {seeded}", file=sys.stderr, flush=True)
            run = measure(url, info, args)
        finally:
            if drop is not None:
                drop()
    result = {
        "benchmark": "live_reads",
        "quick": args.quick,
        "backend": args.backend,
        "trials": seeded["trials"],
        "readers": args.readers,
        "seconds": args.seconds,
        "rate": args.rate,
        "delay_s": args.delay,
        "server_workers": args.server_workers,
        **run,
        "total_s": round(time.perf_counter() - t_start, 1),
        "machine": describe(),
        "shared_machine": "yes: other engineers' jobs ran beside it (see the load averages)",
        "command": "python bench/bench_live_reads.py " + " ".join(sys.argv[1:]),
        "run_id": uuid.uuid4().hex[:8],
    }
    path = args.out or RESULTS / ("live_reads-quick.json" if args.quick else "live_reads.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

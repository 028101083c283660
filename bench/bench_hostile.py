"""One hostile client against 32 ordinary readers: does anyone else notice? (issue 28, point 1)

A real ``normfree serve --no-run-studies`` on loopback over a fresh SQLite database. For the
measured window, at once:

- **the hostile client** (its own process, as issue 28 probed): in turns, ``POST
  /api/references`` with a CSV of 4 rows of distinct long formulas (with a token), 20 parallel
  anonymous ``GET /api/candidates/<new formula>``, the same with a fresh ``X-Forwarded-For`` per
  request, a ``generate`` study of ``generations: 1000, population: 1, max_proposals: 100000``
  and a search of 2,000 trials with 10 extra seeds for 100 top arms (both must be refused);
- **32 readers**, keep-alive connections, each in a loop over ``GET /api/candidates``,
  ``/api/candidates/erf``, ``/api/leaderboards/vit-tiny``, ``/api/references`` and
  ``/api/version``;
- **a health probe**: ``GET /api/health`` ten times a second on its own connection.

Reported: the readers' and the probe's count, errors and p50/p90/p99/max in ms, the same
without the hostile client (``calm``, measured first over as long a window), what the hostile
client was answered (status counts per probe), and the machine. Targets: readers' p99 < 100 ms,
health max < 50 ms. The machine is shared: the load average is recorded beside the figures.

    python bench/bench_hostile.py [--quick] [--seconds 20] [--readers 32]

Before the window the server is warmed up (what it does once: the catalog, the first
leaderboard, its parse workers' start; seconds on an idle machine, a minute on a loaded one):
``--quick`` measures 5 s calm and 5 s hostile, under 30 s in all (``total_s``; ``setup_s`` is
the server's start and warm-up, with the hostile client's process starting beside them).
Prints one JSON object as its last line and writes it to bench/results/hostile[-quick].json.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Iterator
from itertools import cycle, islice, repeat
from typing import Any
from urllib.parse import urlparse

from figures import latency_figures, save
from machine import describe
from readload import Client

READS = (
    "/api/candidates",
    "/api/candidates/erf",
    "/api/leaderboards/vit-tiny",
    "/api/references",
    "/api/version",
)
CSV_HEAD = "setting,family,metric,direction,resolution,function,shift,alpha,value\n"


def _formula(i: int, salt: str) -> str:
    """A distinct, long, valid formula (no '/': it travels in a path)."""
    return (
        f"tanh(u*{i + 2}.{salt})*exp(-u**2*0.0{i + 1})+atan(u*{i + 3})*0.{i + 1}"
        f"+u*exp(-abs(u)*{i + 4})*0.{i + 2}+erf(u*0.{i + 5})*0.{i + 3}"
    )


def hostile(base: str, token: str, go: Any, out: Any) -> None:
    """The hostile client's loop (a separate process): says "ready" on ``out`` once imported,
    runs from the moment ``go`` gives it the end time, then puts its status counts on ``out``."""
    import httpx

    out.put("ready")
    until = go.get()

    counts: dict[str, dict[str, int]] = {}

    def note(probe: str, status: int | str) -> None:
        per = counts.setdefault(probe, {})
        per[str(status)] = per.get(str(status), 0) + 1

    auth = {"Authorization": f"Bearer {token}"}
    generate = {
        "kind": "generate",
        "proxy": "vit-tiny",
        "seeds": 1,
        "params": {"generations": 1000, "population": 1, "max_proposals": 100000},
    }
    search = {
        "kind": "search", "proxy": "vit-tiny", "seeds": 1, "epochs": 1, "sampler": "random",
        "n_trials": 2000, "extra_seeds_for_top": 10, "params": {"top_arms": 100},
    }  # fmt: skip
    round_ = 0
    # The parallel GETs share one anonymous client: still 20 requests at once, each on a
    # connection of its own (no keep-alive), from one peer, without a token. A client per
    # request (``httpx.get``) built an SSL context each time, ~45 ms of this process's CPU for a
    # plain-HTTP request: 40 a round in 20 threads took a core or more for a second, and on a
    # 2-core machine the server's event loop waited for its turn on a CPU (health 200-470 ms,
    # bench/results/hostile-quick.md). A remote attacker spends that CPU on its own machine.
    with (
        httpx.Client(base_url=base, timeout=120) as c,
        httpx.Client(
            base_url=base,
            timeout=120,
            limits=httpx.Limits(max_connections=20, max_keepalive_connections=0),
        ) as anon,
        concurrent.futures.ThreadPoolExecutor(21) as ex,
    ):
        while time.time() < until:
            salt = f"{os.getpid()}{round_}"
            rows = "".join(f"h,vit,accuracy,maximize,,{_formula(i, salt)},,,80\n" for i in range(4))

            def post_csv(salt: str = salt, rows: str = rows) -> int | str:
                try:
                    return c.post(
                        f"/api/references?name=hostile{salt}&source=x",
                        content=CSV_HEAD + rows,
                        headers={**auth, "Content-Type": "text/csv"},
                    ).status_code
                except httpx.HTTPError as exc:
                    return type(exc).__name__

            # the import runs beside the GETs (as an attacker would send them: all at once)
            csv_future = ex.submit(post_csv)

            def get(i: int, forwarded: bool, salt: str = salt, n: int = round_) -> int | str:
                headers = {"X-Forwarded-For": f"10.9.{n % 250}.{i}"} if forwarded else {}
                try:
                    return anon.get(
                        f"/api/candidates/{_formula(i, salt + ('9' if forwarded else ''))}",
                        headers=headers,
                    ).status_code
                except httpx.HTTPError as exc:
                    return type(exc).__name__

            for forwarded in (False, True):
                if time.time() >= until:  # stop at the window's end, not the round's
                    break
                probe = "parallel_gets_forwarded" if forwarded else "parallel_gets"
                for status in ex.map(lambda i, f=forwarded: get(i, f), range(20)):
                    note(probe, status)
            note("references_csv", csv_future.result())
            for probe, body in (("generate_1000", generate), ("search_3000", search)):
                if time.time() >= until:
                    break
                try:
                    note(probe, c.post("/api/studies", json=body, headers=auth).status_code)
                except httpx.HTTPError as exc:
                    note(probe, type(exc).__name__)
            round_ += 1
    out.put(counts)


async def readers(host: str, port: int, n: int, until: float) -> dict[str, Any]:
    """32 readers and the health probe until ``until``: their latency figures."""
    seconds = until - time.time()
    times: dict[str, list[float]] = {"readers": [], "health": []}
    errors = {"readers": 0, "health": 0}

    async def client(kind: str, paths: Iterator[str], pause: float) -> None:
        """GET ``paths`` in turn on one connection until ``until``, timing each answer; a
        failed request counts as an error of ``kind`` and opens a new connection."""
        c = Client(host, port)
        try:
            while time.time() < until:
                path = next(paths)
                t0 = time.perf_counter()
                try:
                    status, _ = await asyncio.wait_for(c.request("GET", path), 30)
                    ok = status == 200
                except (TimeoutError, OSError, asyncio.IncompleteReadError):
                    ok = False
                    await c.close()
                    c = Client(host, port)
                if ok:
                    times[kind].append((time.perf_counter() - t0) * 1000)
                else:
                    errors[kind] += 1
                if pause:
                    await asyncio.sleep(pause)
        finally:
            await c.close()

    # reader k starts at READS[k], so the readers spread over the reads from the first request
    readers_ = (client("readers", islice(cycle(READS), k, None), 0) for k in range(n))
    await asyncio.gather(client("health", repeat("/api/health"), 0.1), *readers_)
    return {kind: latency_figures(times[kind], errors[kind], seconds) for kind in times}


def warm_up(base: str) -> float:
    """What a server does once (the catalog, the first leaderboard, its parse workers' start),
    done before the measured window: every read until it answers fast, and two parses at once
    (one per worker). Its seconds."""
    import httpx

    t0 = time.perf_counter()
    with httpx.Client(base_url=base, timeout=300) as c:
        for path in READS:
            for _ in range(20):
                t = time.perf_counter()
                c.get(path)
                if time.perf_counter() - t < 0.5:
                    break
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda i: c.get(f"/api/candidates/{_formula(i, 'warm')}"), range(2)))
    return round(time.perf_counter() - t0, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="5 s calm, 5 s hostile (under 30 s in all)"
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the measured window")
    ap.add_argument("--readers", type=int, default=32)
    args = ap.parse_args()
    seconds = 5.0 if args.quick else args.seconds

    from normfree.api.services import open_repository
    from normfree.settings import Settings
    from normfree.testing.live import live_server

    t_start = time.perf_counter()
    # the hostile client's process imports while the server starts (a spawn costs seconds)
    ctx = mp.get_context("spawn")
    queue: Any = ctx.Queue()
    go: Any = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="nf-hostile-") as tmp:
        url = f"sqlite:///{tmp}/hostile.db"
        repo = open_repository(Settings(database_url=url))
        token = repo.create_token("hostile")
        repo.db.dispose()
        with live_server(url, "--no-run-studies") as base:
            base = base.rstrip("/")
            proc = ctx.Process(target=hostile, args=(base, token, go, queue), daemon=True)
            proc.start()
            parsed = urlparse(base)
            host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
            warm_s = warm_up(base)
            assert queue.get(timeout=300) == "ready"
            setup_s = round(time.perf_counter() - t_start, 1)
            # the same readers without the hostile client first: on a shared machine the
            # difference, not the absolute figure, is what the hostile client costs them
            calm = asyncio.run(readers(host, port, args.readers, time.time() + seconds))
            load_before = os.getloadavg()[0]
            until = time.time() + seconds
            go.put(until)
            figures = asyncio.run(readers(host, port, args.readers, until))
            try:
                hostile_counts = queue.get(timeout=180)
            except Exception:
                hostile_counts = {"error": "the hostile client did not report"}
            proc.join(10)
    readers_p99 = figures["readers"].get("p99_ms")
    health_max = figures["health"].get("max_ms")
    result = {
        "benchmark": "hostile",
        "quick": args.quick,
        "seconds": seconds,
        "readers_n": args.readers,
        "warm_up_s": warm_s,
        "setup_s": setup_s,
        **figures,
        "calm": calm,
        "hostile": hostile_counts,
        "targets": {
            "readers_p99_lt_100ms": readers_p99 is not None and readers_p99 < 100,
            "health_max_lt_50ms": health_max is not None and health_max < 50,
        },
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "total_s": round(time.perf_counter() - t_start, 1),
        "machine": describe(),
    }
    save(result, "hostile", args.quick)


if __name__ == "__main__":
    main()

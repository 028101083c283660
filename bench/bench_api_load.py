"""Load test of the REST API on loopback: concurrent leaderboard reads and candidate submissions.

A real ``normfree serve`` process (uvicorn, one worker, SQLite in a temporary directory seeded with
a finished property study) is driven by ``--concurrency`` asyncio clients until ``--requests``
requests are done or ``--max-seconds`` pass, whichever comes first (both bounded). Four in five
requests read a leaderboard (``GET /api/leaderboards/vit-tiny``, the dashboard's hottest query:
every trial of the proxy aggregated with t intervals and Welch tests); one in five submits a
candidate (``POST /api/candidates`` with a bearer token): parse, canonical form, properties,
dedup against the catalog and the stored candidates, and the prescreen (cached per function
after its first run, as in production). Submissions cycle over a few catalog functions in
disguise (duplicates) and a few new functions (stored once, then re-submitted).

Reported per kind: count, errors (non-2xx or transport failures), p50/p90/p99/max latency in ms,
and overall requests per second. The server's start-up (catalog build) and a warm-up request per
kind are excluded from the timings.

    .venv/bin/python bench/bench_api_load.py [--quick] [--requests N] [--concurrency C]

Prints one JSON object as its last line and writes it to bench/results/api_load[_quick].json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from figures import latency_figures
from machine import describe

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# Same function as a catalog entry, spelled differently (answered as duplicates).
DUPLICATES = [
    ("dup_tanh", "2*sigmoid(2*u)-1"),
    ("dup_smoothsign", "u/(1+abs(u))"),
    ("dup_isru", "u/sqrt(u**2+1)"),
    ("dup_arctan", "atan(u)*2/pi"),
]
# New functions: stored by their first submission, answered as known afterwards.
NEW = [
    ("load_ratio2", "2*u/(2+abs(u))"),
    ("load_tanh_half", "tanh(u/2)"),
]


async def drive(
    base: str, token: str, n_requests: int, concurrency: int, max_s: float, new: list
) -> dict:
    import httpx

    lat: dict[str, list[float]] = {"leaderboard": [], "submit": []}
    errs: dict[str, int] = {"leaderboard": 0, "submit": 0}
    error_samples: list[str] = []
    counter = iter(range(n_requests))
    deadline = float("inf")
    auth = {"Authorization": f"Bearer {token}"}
    submissions = DUPLICATES + new

    async def one(client: httpx.AsyncClient, i: int) -> None:
        if i % 5 == 4:
            kind = "submit"
            name, formula = submissions[(i // 5) % len(submissions)]
            req = client.post(
                "/api/candidates", json={"name": name, "formula": formula}, headers=auth
            )
        else:
            kind = "leaderboard"
            req = client.get("/api/leaderboards/vit-tiny")
        t0 = time.perf_counter()
        try:
            r = await req
            ok = r.status_code < 300
            if not ok and len(error_samples) < 5:
                error_samples.append(f"{kind} {r.status_code} {r.text[:200]}")
        except httpx.HTTPError as exc:
            ok = False
            if len(error_samples) < 5:
                error_samples.append(f"{kind} {type(exc).__name__}: {exc}")
        dt = time.perf_counter() - t0
        if ok:
            lat[kind].append(dt)
        else:
            errs[kind] += 1

    async def worker(client: httpx.AsyncClient) -> None:
        for i in counter:
            if time.perf_counter() > deadline:
                return
            await one(client, i)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        # warm-up, not timed: the catalog (built once per process), one read, and one
        # submission of each function (its prescreen runs once)
        await client.get("/api/candidates")
        await client.get("/api/leaderboards/vit-tiny")
        for name, formula in submissions:
            await client.post(
                "/api/candidates", json={"name": name, "formula": formula}, headers=auth
            )
        t0 = time.perf_counter()
        deadline = t0 + max_s
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    done = sum(len(v) for v in lat.values()) + sum(errs.values())
    return {
        "wall_s": wall,
        "requests": done,
        "requests_per_s": done / wall if wall else None,
        "hit_time_cap": time.perf_counter() > deadline,
        **{
            k: latency_figures([1000 * x for x in lat[k]], errs[k])
            for k in ("leaderboard", "submit")
        },
        "errors": sum(errs.values()),
        "error_samples": error_samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small run, under 30 s")
    ap.add_argument("--requests", type=int, default=None, help="total requests (bounded)")
    ap.add_argument("--concurrency", type=int, default=None, help="concurrent clients")
    ap.add_argument("--max-seconds", type=float, default=None, help="cap on the timed phase")
    args = ap.parse_args()
    n = args.requests or (150 if args.quick else 2000)
    conc = args.concurrency or (16 if args.quick else 64)
    max_s = args.max_seconds or (6.0 if args.quick else 120.0)

    from normfree.settings import Settings
    from normfree.storage import Database, Repository
    from normfree.testing.live import live_server
    from normfree.testing.seeding import seed_property_study

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="normfree-load-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'normfree.db'}"
        seeded = seed_property_study(Settings(database_url=url))
        db = Database(url)
        token = Repository(db, max_attempts=3).create_token("load")
        db.dispose()
        with live_server(url, "--no-run-studies") as base:
            new = NEW[:1] if args.quick else NEW  # each new function costs one prescreen
            result = asyncio.run(drive(base.rstrip("/"), token, n, conc, max_s, new))
    out = {
        "bench": "api_load",
        "mode": "quick" if args.quick else "full",
        "server": "normfree serve (uvicorn, 1 worker), SQLite, loopback",
        "seeded_trials": len(seeded.trial_ids),
        "concurrency": conc,
        "requests_cap": n,
        "max_seconds": max_s,
        "mix": "4/5 GET /api/leaderboards/vit-tiny, 1/5 POST /api/candidates",
        **result,
        "total_s": time.perf_counter() - t_start,
        "machine": describe(),
        "command": "python bench/bench_api_load.py" + (" --quick" if args.quick else ""),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / ("api_load_quick.json" if args.quick else "api_load.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

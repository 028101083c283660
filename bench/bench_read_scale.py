"""Reads at scale: the API at 10k and 100k finished trials, on SQLite and PostgreSQL.

Seeds finished trials through the real write path (``readload``: property studies of 1,026
synthetic trials each, the same grid again and again, so the proxy's leaderboard keeps its 171
arms while trials grow, and later studies re-run earlier seeds: one value per seed, the
latest). Then a real ``normfree serve
--no-run-studies`` on loopback is driven by ``--clients`` concurrent keep-alive clients per
endpoint, each run bounded by a request count and a time cap:

- ``leaderboard`` ``GET /api/leaderboards/vit-tiny``; ``leaderboard_page`` ``GET /``;
- ``study_summary`` ``GET /api/studies/{id}?trials=false`` and ``study_page`` ``GET
  /studies/{id}`` (a random study each time); ``trial`` ``GET /api/trials/{id}`` (a random
  trial); ``candidates`` ``GET /api/candidates``; ``submit`` ``POST /api/candidates`` (functions
  whose prescreen is known: catalog functions in disguise and stored ones resubmitted);
- writes under read load: a separate process leases and finishes trials one at a time (the
  trial-write latency), alone and then while the clients read the endpoints above in turn.

After the warm-up (and its writes) every read is asked once more, so the timed runs read an
unchanged database, as dashboards do between trials; reads while a worker writes are the last
phase. No client sends ``If-None-Match``: every answer carries its full body (gzipped: clients send
``Accept-Encoding: gzip`` as browsers do, and do not decompress). Reported per endpoint and
scale: count, errors, p50/p90/p99/max in ms, requests/s, and the 10k -> 100k ratio of p50 and
p99. The machine is shared: compare figures inside one run.

    python bench/bench_read_scale.py [--quick] [--backends sqlite,postgresql]
        [--scales 10000,100000] [--clients 32] [--requests 640] [--workers 1]

Prints one JSON object as its last line and writes it to bench/results/read_scale[_quick].json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from figures import latency_figures, percentile, rounded
from machine import describe
from readload import (
    GRID,
    PROXY,
    SEEDS,
    SUBMISSIONS,
    Client,
    Writer,
    _database,
    _plan,
    _study_size,
    drive,
    seeded_database,
    use_quick_grid,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def endpoints(info: dict[str, Any], token: str) -> dict[str, Any]:
    rng = random.Random(0)
    studies, trials = info["study_ids"], info["trial_range"]
    auth = {"Authorization": f"Bearer {token}"}
    ok = (200,)

    def get(path: str) -> Any:
        return lambda i: ("GET", path, b"", ok)

    def submit(i: int) -> Any:
        name, formula = SUBMISSIONS[i % len(SUBMISSIONS)]
        return (
            "POST",
            "/api/candidates",
            json.dumps({"name": name, "formula": formula}).encode(),
            (200, 201),
        )

    return {
        # the floor: no database, a tiny body (what the HTTP stack alone costs in this run)
        "floor_version": get("/api/version"),
        "leaderboard": get(f"/api/leaderboards/{PROXY}"),
        "leaderboard_page": get(f"/?proxy={PROXY}"),
        "study_summary": lambda i: (
            "GET",
            f"/api/studies/{rng.choice(studies)}?trials=false",
            b"",
            ok,
        ),
        "study_page": lambda i: ("GET", f"/studies/{rng.choice(studies)}", b"", ok),
        "trial": lambda i: ("GET", f"/api/trials/{rng.randint(*trials)}", b"", ok),
        "candidates": get("/api/candidates"),
        "submit": submit,
        "_auth": auth,
    }


def _write_probe(url: str, sid: int, n: int, out: Any) -> None:
    """A worker's write latency: lease + finish one trial, ``n`` times (a separate process)."""
    lat = []
    with Writer(url, "probe", 1) as w:
        for _ in range(n):
            t0 = time.perf_counter()
            if w.finish_one(sid) is None:
                break
            lat.append((time.perf_counter() - t0) * 1000)
    out.put(lat)


def write_latency(url: str, sid: int, n: int, readers: Any = None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_write_probe, args=(url, sid, n, q))
    p.start()
    if readers is not None:
        readers(p)
    lat = q.get(timeout=600)
    p.join(timeout=60)
    return {"writes": len(lat), **latency_figures(lat, 0)}


def measure(url: str, info: dict[str, Any], args: Any) -> dict[str, Any]:
    """Start a server over ``url`` and run every endpoint, then the write probe."""
    from normfree.storage import Database, Repository
    from normfree.testing.live import live_server

    db = Database(url)
    repo = Repository(db, max_attempts=3)
    token = repo.create_token(f"bench-{uuid.uuid4().hex[:8]}")
    probe_sid = _plan(repo, 10_000 + info["studies"])  # a study of waiting trials for the probe
    db.dispose()
    server_args = ["--no-run-studies", "--workers", str(args.workers)]
    out: dict[str, Any] = {}
    with live_server(url, *server_args, timeout=300) as base:
        host, port = base.split("//")[1].rstrip("/").split(":")
        port_i = int(port)
        eps = endpoints(info, token)
        auth = eps.pop("_auth")

        cold: dict[str, Any] = {}

        async def warm() -> None:
            """Not timed as load: the first (uncached) answers, one client, then every study's
            summary and page once, the analyses of the board's functions, and each endpoint."""
            c = Client(host, port_i)

            async def timed(path: str) -> float:
                t = time.perf_counter()
                status, _n = await c.request("GET", path)
                assert status == 200, (path, status)
                return (time.perf_counter() - t) * 1000

            cold["leaderboard_first_ms"] = rounded(await timed(f"/api/leaderboards/{PROXY}"))
            summaries, pages = [], []
            for sid in info["study_ids"]:
                summaries.append(await timed(f"/api/studies/{sid}?trials=false"))
                pages.append(await timed(f"/studies/{sid}"))
            cold["study_summary_first_ms_p50"] = rounded(percentile(summaries, 50))
            cold["study_summary_first_ms_max"] = rounded(max(summaries))
            cold["study_page_first_ms_p50"] = rounded(percentile(pages, 50))
            cold["study_page_first_ms_max"] = rounded(max(pages))
            # a filtered board waits for every function's analysis (api.enrich)
            cold["analyses_ms"] = rounded(
                await timed(f"/api/leaderboards/{PROXY}?property=bounded")
            )
            for name, make in eps.items():
                for i in range(len(SUBMISSIONS) if name == "submit" else 1):
                    m, path, body, _ok = make(i)
                    await c.request(m, path, body, auth)
            await c.close()

        t0 = time.perf_counter()
        asyncio.run(warm())
        # the prescreens of new functions run after their answers (202): resubmit until this
        # server knows each one, as the timed submissions assume (not timed)
        import httpx

        for name, formula in SUBMISSIONS:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                r = httpx.post(
                    f"{base}api/candidates",
                    json={"name": name, "formula": formula},
                    headers=auth,
                    timeout=60,
                )
                if r.status_code != 202:
                    break
                time.sleep(0.5)
        # a stored submission answers at once when sent again, while its first prescreen may
        # still run: wait until it is stored (its late commit would land in the timed runs)
        for name, _formula in SUBMISSIONS:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                r = httpx.get(f"{base}api/candidates/{name}", timeout=60)
                pre = r.json().get("prescreen") if r.status_code == 200 else None
                if r.status_code == 404 or (pre and pre.get("status") != "pending"):
                    break
                time.sleep(0.5)

        async def again() -> None:
            """The warm-up wrote (submissions, their prescreens), and a commit closes the fast
            lane (api.fastlane) until each read is answered once through its route: ask each
            once more, so the timed runs read an unchanged database. Reads while a worker
            writes are measured apart (``readers_during_writes``)."""
            c = Client(host, port_i)
            for sid in info["study_ids"]:
                await c.request("GET", f"/api/studies/{sid}?trials=false")
                await c.request("GET", f"/studies/{sid}")
            for name, make in eps.items():
                if name != "submit":
                    m, path, body, _ok = make(0)
                    await c.request(m, path, body)
            await c.close()

        asyncio.run(again())
        out["warm_up_s"] = round(time.perf_counter() - t0, 1)
        out["cold"] = cold

        results: dict[str, Any] = {}
        for name, make in eps.items():
            results[name] = asyncio.run(
                drive(
                    host,
                    port_i,
                    make,
                    args.requests,
                    args.clients,
                    args.max_seconds,
                    auth if name == "submit" else None,
                )
            )
        out["endpoints"] = results
        out["write_alone"] = write_latency(url, probe_sid, args.writes)

        def readers(proc: Any) -> None:
            mixed = [
                eps[k]
                for k in (
                    "leaderboard",
                    "leaderboard_page",
                    "study_summary",
                    "study_page",
                    "trial",
                    "candidates",
                )
            ]

            def make(i: int) -> Any:
                return mixed[i % len(mixed)](i)

            async def loop() -> dict:
                total: dict[str, Any] = {}
                while proc.is_alive():
                    total = await drive(host, port_i, make, args.clients * 20, args.clients, 30)
                return total

            out["readers_during_writes"] = asyncio.run(loop())

        out["write_under_readers"] = write_latency(url, probe_sid, args.writes, readers)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="small run (SQLite, 7 arms, 300 trials): < 30 s"
    )
    ap.add_argument("--backends", default=None, help="sqlite,postgresql")
    ap.add_argument("--scales", default=None, help="finished trials, e.g. 10000,100000")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=None, help="requests per endpoint and scale")
    ap.add_argument("--max-seconds", type=float, default=None, help="cap per endpoint run")
    ap.add_argument("--writes", type=int, default=None, help="trial writes per latency probe")
    ap.add_argument("--writers", type=int, default=2, help="seeding processes")
    ap.add_argument("--workers", type=int, default=1, help="server processes")
    ap.add_argument("--out", type=Path, default=None, help="results file (default: bench/results)")
    ap.add_argument(
        "--seeded",
        default=None,
        help="databases seeded earlier, one per scale, comma-separated (one backend): SQLite "
        "files or PostgreSQL URLs, each copied (a file copy; CREATE DATABASE ... TEMPLATE) and "
        "the copy topped up to its scale; seeding 100k trials takes 25-40 min on two cores",
    )
    args = ap.parse_args()
    backends = (args.backends or ("sqlite" if args.quick else "sqlite,postgresql")).split(",")
    if args.quick:
        use_quick_grid()
    default_scales = "300" if args.quick else "10000,100000"
    if args.quick:
        args.writers = 1
    scales = [int(x) for x in (args.scales or default_scales).split(",")]
    args.requests = args.requests or (48 if args.quick else 640)
    args.max_seconds = args.max_seconds or (1.0 if args.quick else 60.0)
    args.writes = args.writes or (10 if args.quick else 200)

    seeded_from = args.seeded.split(",") if args.seeded else []
    if seeded_from and (len(backends) != 1 or len(seeded_from) != len(scales)):
        ap.error("--seeded takes one database per scale, with one backend")
    t_start = time.perf_counter()
    runs: dict[str, Any] = {}
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix="normfree-scale-") as tmp:
            url, drop = _database(backend, tmp)
            try:
                per_scale: dict[str, Any] = {}
                for i, n in enumerate(scales):
                    copy_from = seeded_from[i] if seeded_from else None
                    url, seeded, info = seeded_database(url, tmp, n, args.writers, copy_from)
                    print(f"[{backend}] seeded {seeded}", file=sys.stderr, flush=True)
                    m = measure(url, info, args)
                    per_scale[str(n)] = {"seeding": seeded, **m}
                    print(
                        f"[{backend}] {n}: " + json.dumps(m["endpoints"]),
                        file=sys.stderr,
                        flush=True,
                    )
                runs[backend] = {"scales": per_scale, "ratios": _ratios(per_scale, scales)}
            finally:
                if drop is not None:
                    drop()
    out = {
        "bench": "read_scale",
        "mode": "quick" if args.quick else "full",
        "server": f"normfree serve --no-run-studies --workers {args.workers} (uvicorn), loopback",
        "clients": args.clients,
        "requests_per_endpoint": args.requests,
        "max_seconds_per_endpoint": args.max_seconds,
        "data": f"property studies of {_study_size()} trials ({len(GRID['functions'])} functions "
        f"x {len(GRID['values'])} shift_h values + LayerNorm, {SEEDS} seeds), synthetic results "
        "(worker=synthetic-bench), written through the repository",
        "runs": runs,
        "total_s": round(time.perf_counter() - t_start, 1),
        "machine": describe(),
        "command": "python bench/bench_read_scale.py " + " ".join(sys.argv[1:]),
    }
    path = args.out or RESULTS / ("read_scale_quick.json" if args.quick else "read_scale.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))


def _ratios(per_scale: dict[str, Any], scales: list[int]) -> dict[str, Any]:
    if len(scales) < 2:
        return {}
    lo, hi = per_scale[str(scales[0])], per_scale[str(scales[-1])]
    out = {}
    for name, a in lo["endpoints"].items():
        b = hi["endpoints"].get(name, {})
        out[name] = {
            k: rounded(b[k] / a[k]) if a.get(k) and b.get(k) else None for k in ("p50_ms", "p99_ms")
        }
    for k in ("write_alone", "write_under_readers"):
        out[k] = {
            q: rounded(hi[k][q] / lo[k][q]) if lo[k].get(q) and hi[k].get(q) else None
            for q in ("p50_ms", "p99_ms")
        }
    return out


if __name__ == "__main__":
    main()

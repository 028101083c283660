"""First-load and warm latency of the search and comparison pages after a server start.

Issue 27, point 1: the first request of each page after a start answers in < 1 s, because what
a page needs is computed when the data is written. A seeded search study (real driver asks,
synthetic results, the importance stored by the driver as each trial ends) is written once;
then each round starts a *new Python process* (a server start: nothing imported, nothing in
memory), builds the app over that database and times the first and then warm requests of
``GET /api/studies/N/search``, ``/studies/N/search``, ``GET /api/compare`` and ``/compare``
in-process (no network: the figure is the server's own work). For scale, the same process
also times what the old read path paid once: computing the importance itself.

    python bench/bench_first_load.py --quick    # one start, < 30 s
    python bench/bench_first_load.py            # three starts

The last line printed is one JSON object; the figures go in bench/results/first_load.md with
the CPU (``bench.machine``). The machine may be shared: its load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import machine  # noqa: E402

CHILD = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
from fastapi.testclient import TestClient
from normfree.api.app import create_app
from normfree.settings import Settings
url, study, trials, warm_n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
app = create_app(Settings(database_url=url), run_studies=False, prescreen=False)
out = {"start_s": None}
with TestClient(app) as client:
    out["start_s"] = time.perf_counter() - t0
    paths = {
        "api_search": f"/api/studies/{study}/search",
        "page_search": f"/studies/{study}/search",
        "api_compare": f"/api/compare?trials={trials}",
        "page_compare": f"/compare?trials={trials}",
    }
    for name, path in paths.items():
        t = time.perf_counter()
        r = client.get(path)
        first = time.perf_counter() - t
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
        if name == "api_search":
            out["importance_stale"] = r.json()["importance_stale"]
        warm = []
        for _ in range(warm_n):
            t = time.perf_counter()
            client.get(path)
            warm.append(time.perf_counter() - t)
        out[name] = {"first_s": round(first, 4), "warm_median_s": round(statistics.median(warm), 5)}
    t = time.perf_counter()
    from normfree.workers.importance import study_importance
    study_importance(app.state.services.repo, study)
    out["importance_compute_s"] = round(time.perf_counter() - t, 3)
print(json.dumps(out))
"""


def seed(db: Path) -> tuple[str, int, str]:
    """Write the search study once (the writer's side: the driver stores the importance)."""
    from normfree.settings import Settings
    from normfree.testing.search_seeding import seed_search_study

    url = f"sqlite:///{db}"
    found = seed_search_study(Settings(database_url=url))
    return url, found.study_id, ",".join(str(i) for i in found.trial_ids.values())


def one_start(url: str, study: int, trials: str, warm_n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(study), trials, str(warm_n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the server process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one start, few warm requests")
    ap.add_argument("--starts", type=int, default=3)
    args = ap.parse_args()
    starts, warm_n = (1, 5) if args.quick else (args.starts, 20)
    with tempfile.TemporaryDirectory(prefix="nf-firstload-") as tmp:
        t = time.perf_counter()
        url, study, trials = seed(Path(tmp) / "bench.db")
        seed_s = time.perf_counter() - t
        runs = [one_start(url, study, trials, warm_n) for _ in range(starts)]
    pages = ("api_search", "page_search", "api_compare", "page_compare")
    result: dict[str, Any] = {
        "bench": "first_load",
        "quick": args.quick,
        "starts": starts,
        "seed_s": round(seed_s, 2),
        "machine": machine.describe(),
        "start_s_max": max(r["start_s"] for r in runs),
        "importance_compute_s_max": max(r["importance_compute_s"] for r in runs),
        "any_stale": any(r["importance_stale"] for r in runs),
    }
    for p in pages:
        result[p] = {
            "first_s_max": max(r[p]["first_s"] for r in runs),
            "warm_median_s": statistics.median(r[p]["warm_median_s"] for r in runs),
        }
    result["first_under_1s"] = all(result[p]["first_s_max"] < 1.0 for p in pages)
    for p in pages:
        first, warm = result[p]["first_s_max"], result[p]["warm_median_s"]
        print(f"{p:14s} first {first:.3f} s, warm {warm:.4f} s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

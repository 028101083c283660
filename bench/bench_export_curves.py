"""The learning-curves export of one large study: rows, build and encode times, memory.

Seeds one property study of 1,026 finished synthetic trials (three epochs each) through the real
write path (``readload.seed_to``), then builds ``api.export.curve_rows`` (what
``GET /api/studies/{id}/curves`` and ``normfree export curves`` answer) and writes it as CSV and
Parquet, ``--repeats`` times. The export is built whole in memory (a file, not a page), so the
peak of Python allocations (tracemalloc) says how far a bigger study can go.

    python bench/bench_export_curves.py [--trials 1026] [--repeats 3]

Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe
from readload import seed_to


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1026)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from normfree.api import export, services
    from normfree.settings import Settings
    from normfree.storage import open as open_store

    with tempfile.TemporaryDirectory(prefix="nf-curves-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        seeded = seed_to(url, args.trials, 1)
        settings = Settings(database_url=url)
        state = services.ServiceState(settings=settings, store=open_store(settings))
        runs = []
        for _ in range(args.repeats):
            tracemalloc.start()
            t0 = time.perf_counter()
            rows = export.curve_rows(state, 1)
            t1 = time.perf_counter()
            csv = export.encode(rows, "csv")
            t2 = time.perf_counter()
            parquet = export.encode(rows, "parquet")
            t3 = time.perf_counter()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            runs.append(
                {
                    "rows": len(rows),
                    "build_s": round(t1 - t0, 3),
                    "csv_s": round(t2 - t1, 3),
                    "parquet_s": round(t3 - t2, 3),
                    "csv_mb": round(len(csv) / 1e6, 2),
                    "parquet_mb": round(len(parquet) / 1e6, 3),
                    "peak_traced_mb": round(peak / 1e6, 1),
                }
            )
        state.close()
    print(json.dumps({"machine": describe(), "seeded": seeded, "runs": runs}))


if __name__ == "__main__":
    main()

"""One client floods the server with expensive requests while a probe times ``/api/health``.

Shared by the offload tests (formula parses, fidelity reports): the flood and the probe are the
same whatever the expensive route is, only the URLs and the accepted answers differ.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx

# A loop that parses or reports stalls for the whole flood (issue 28's probes: 21-56 s); a free
# loop answers in milliseconds, seconds only when CI shares the two cores with the flood's worker
# processes. The speed itself is bench/bench_hostile.py's figure.
HEALTH_LIMIT_S = 5.0


def health_during_flood(
    base: str, paths: list[str], *, settle_s: float = 0.3
) -> tuple[float, list[int]]:
    """Send every path at once (20 threads), probe /api/health ten times meanwhile.

    Returns the slowest health answer in seconds and the flood's status codes, in path order.
    """

    def flood(path: str) -> int:
        return httpx.get(base + path, timeout=300).status_code

    with (
        concurrent.futures.ThreadPoolExecutor(20) as ex,
        httpx.Client(base_url=base, timeout=30) as probe,
    ):
        probe.get("api/health")  # the probe's connection is open before the flood
        futures = [ex.submit(flood, p) for p in paths]
        time.sleep(settle_s)
        worst = 0.0
        for _ in range(10):
            t0 = time.perf_counter()
            r = probe.get("api/health")
            worst = max(worst, time.perf_counter() - t0)
            assert r.status_code == 200
            time.sleep(0.1)
        return worst, [f.result() for f in futures]

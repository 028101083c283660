"""How a benchmark measures a trial on this machine and keeps its figures.

Two things every speed benchmark did for itself: time a trial in both wall and CPU seconds (on
a shared machine the wall time also counts other processes' turns on the core, so budgets are
judged on CPU time, with the load average beside it), and write its result to
``bench/results/<name>[-quick].json`` while printing it as the last line (the contract every
script in ``bench/`` keeps, see README: Benchmarks).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def timed_trial(config: Any) -> tuple[Any, dict[str, Any]]:
    """Train ``config`` (a ``TrialConfig``) in this process on one thread: its ``TrialResult``,
    and what it cost: wall and CPU seconds, samples per CPU second, and the 1-minute load
    average before. One thread, as the figures it gives are one core's (the trial budgets)."""
    import torch

    from normfree.kernels import KernelOptions
    from normfree.settings import get_settings
    from normfree.workers.trainer import train_trial

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    r = train_trial(config, kernels=KernelOptions.from_settings(get_settings()))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return r, {
        "status": r.status,
        "samples_per_s": r.metrics.get("samples_per_s"),
        # samples per second of this process's CPU time (the idle-core rate on a busy machine)
        "samples_per_cpu_s": (r.metrics.get("samples_per_s") or 0.0) * wall / max(cpu, 1e-9),
        "train_time_s": r.train_time_s,
        "wall_s": wall,
        "cpu_s": cpu,
        "load_avg_1m": load,
    }


def save(result: dict[str, Any], name: str, quick: bool) -> Path:
    """Write ``result`` to ``bench/results/<name>[-quick].json`` and print it as one line."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / (f"{name}-quick.json" if quick else f"{name}.json")
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return path


def percentile(xs: list[float], q: float) -> float | None:
    """The ``q``-th percentile of ``xs`` (nearest rank; None for no values)."""
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[k]


def latency_figures(ms: list[float], errors: int, wall: float | None = None) -> dict[str, Any]:
    """Count, errors and the latency percentiles of one endpoint's successful requests (``ms``,
    milliseconds), rounded to 0.01 ms; with ``wall`` (seconds) also the request rate."""
    out = {
        "count": len(ms) + errors,
        "ok": len(ms),
        "errors": errors,
        **{f"p{q}_ms": rounded(percentile(ms, q)) for q in (50, 90, 99)},
        "max_ms": rounded(max(ms) if ms else None),
        "mean_ms": rounded(sum(ms) / len(ms) if ms else None),
    }
    if wall is not None:
        out["requests_per_s"] = rounded((len(ms) + errors) / wall if wall else None)
    return out


def rounded(x: float | None) -> float | None:
    """``x`` to two decimals (milliseconds to 0.01 ms); None stays None."""
    return None if x is None else round(x, 2)

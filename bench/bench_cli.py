"""CLI start-up: seconds per quick command, each in a fresh interpreter, as a user runs it.

Budget (issue 17): ``normfree --help`` and ``normfree candidates check/show/list`` within 0.5 s
on an idle core. Each command runs ``--repeat`` times as ``python -m normfree ...`` and the
median is kept, both in wall time and in the child's CPU time (user + system): on a shared
machine the wall time also counts the time other processes held the core, so the budget is
judged on CPU time and the 1-minute load average is recorded beside each figure. The catalog
index is built once before timing (the first command after an install or a change to
``search_space`` pays that build, ~2 s, once).

    python bench/bench_cli.py            # 7 runs per command: bench/results/cli.json
    python bench/bench_cli.py --quick    # 3 runs per command: bench/results/cli-quick.json

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
BUDGET_S = 0.5
COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "candidates check": ["candidates", "check", "u/(1+abs(u))"],
    "candidates check (no division)": ["candidates", "check", "tanh(u) + 0.1*u"],
    "candidates show": ["candidates", "show", "erf"],
    "candidates list": ["candidates", "list"],
}


def cpu_name() -> str:
    """The CPU model, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_once(args: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one ``python -m normfree ARGS``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "normfree", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 runs per command (< 30 s)")
    ap.add_argument("--repeat", type=int, default=None)
    a = ap.parse_args()
    repeat = a.repeat or (3 if a.quick else 7)
    run_once(["candidates", "list"])  # build the catalog index if this checkout has none yet
    rows = {}
    for label, args in COMMANDS.items():
        load = os.getloadavg()[0]
        runs = [run_once(args) for _ in range(repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        rows[label] = {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "within_budget": cpu <= BUDGET_S,
            "load_avg_1m": round(load, 2),
        }
        print(f"{label:32s} wall {wall:6.3f} s   cpu {cpu:6.3f} s   load {load:.2f}")
    out = {
        "bench": "cli",
        "quick": a.quick,
        "repeat": repeat,
        "budget_s": BUDGET_S,
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "seconds": {k: v["cpu_s"] for k, v in rows.items()},
        "commands": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "cli-quick.json" if a.quick else "cli.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""CLI start-up: seconds per quick command, each in a fresh interpreter, as a user runs it.

Budget (issue 17): ``normfree --help`` and ``normfree candidates check/show/list`` within 0.5 s
on an idle core. Each command runs ``--repeat`` times as ``python -m normfree ...`` and the
median is kept, both in wall time and in the child's CPU time (user + system): on a shared
machine the wall time also counts the time other processes held the core, so the budget is
judged on CPU time and the 1-minute load average is recorded beside each figure. Everything
runs against a cache folder of its own (``NORMFREE_KERNEL_CACHE`` in a temporary folder), whose
catalog index is built once before timing.

``check`` of a formula checked for the first time (its stored result removed before every run)
is timed three ways (``normfree.search_space.checker``):

- ``checker cold``: no checker running; the command starts one and waits for its answer (the
  checker imports sympy and the rest, then checks). Once per code version, or after 10 idle
  minutes.
- ``checker warm``: a checker is running and warmed up, freshly started for each run (so it
  has never seen the formula: no cached limit helps). The usual case.
- ``no checker`` (``NORMFREE_CHECKER=false``): the command checks in its own process, as it
  does when the checker fails.

With a checker, the CPU judged against the budget is the command's plus the checker's for that
answer (``client_cpu_s`` + ``checker_cpu_s``, the checker's from its status before and after);
the cold figure's checker part includes its imports. Then ``again``: the same formula's stored
result read back (no sympy, no numpy, no checker). A formula with a syntax error is refused
before anything loads.

    python bench/bench_cli.py            # 7 runs per command: bench/results/cli.json
    python bench/bench_cli.py --quick    # 3 runs (first checks 2), no stage split: cli-quick.json

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from figures import save
from machine import describe

ROOT = Path(__file__).resolve().parents[1]  # the checkout the timed CLI processes import
BUDGET_S = 0.5
CHECKED = {"": "u/(1+abs(u))", " (no division)": "tanh(u) + 0.1*u"}
WARM_BY = "atan(u)/7"  # what starts the warm runs' checker: not a timed formula
MODES = ("checker cold", "checker warm", "no checker")


def run_once(args: list[str], **env: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of it and its waited-for children) of ``python -m normfree
    ARGS`` (the checker, detached, is not among them)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "normfree", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 2):  # 2: a refused formula, as meant
        raise SystemExit(f"normfree {' '.join(args)} failed with status {done.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _checker() -> dict[str, Any] | None:
    """The status of the one checker of the bench's cache folder, or None."""
    from normfree.search_space import checker

    running = checker.status_all()["running"]
    return running[0] if running else None


def _stop_checkers() -> None:
    from normfree.search_space import checker

    checker.stop_all()
    deadline = time.monotonic() + 10
    while checker.socket_path().exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def first_check(formula: str, mode: str) -> dict[str, float]:
    """One timed first check of ``formula`` in ``mode`` (see the module docstring)."""
    from normfree.search_space.checks import stored_path

    _stop_checkers()
    if mode == "checker warm":
        stored_path(WARM_BY).unlink(missing_ok=True)
        run_once(["candidates", "check", WARM_BY], NORMFREE_CHECKER="true")  # starts one
        deadline = time.monotonic() + 60
        while not (_checker() or {}).get("warm") and time.monotonic() < deadline:
            time.sleep(0.1)
    stored_path(formula).unlink(missing_ok=True)
    before = _checker() if mode == "checker warm" else None
    flag = "false" if mode == "no checker" else "true"
    wall, cpu = run_once(["candidates", "check", formula], NORMFREE_CHECKER=flag)
    out = {"wall_s": wall, "client_cpu_s": cpu, "checker_cpu_s": 0.0}
    if mode != "no checker":
        after = _checker()
        if after is None or after["served"] != (before["served"] + 1 if before else 1):
            raise SystemExit(f"the checker did not answer {formula!r} ({mode})")
        out["checker_cpu_s"] = after["answered_cpu_s"] - (before["cpu_s"] if before else 0.0)
    out["cpu_s"] = out["client_cpu_s"] + out["checker_cpu_s"]
    return out


# A first check's CPU time in its own process (``no checker``) split into what it does, in the
# order the command does it: each stage's CPU in a fresh interpreter.
_STAGES = """
import json, resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out, t = {"python start": cpu()}, cpu()
def stage(label):
    global t
    now = cpu()
    out[label], t = now - t, now
import normfree.cli.candidates
stage("click + normfree.cli")
from normfree.search_space import catalog_index, checks
from normfree.search_space._syntax import parse_tree
parse_tree(sys.argv[1])
checks.stored(sys.argv[1])
stage("syntax, stored-result lookup (index key)")
import numpy
stage("import numpy")
import sympy
stage("import sympy")
import pydantic
stage("import pydantic")
from normfree.search_space import candidate, dedup, properties
stage("search_space analysis modules")
c = candidate.parse(sys.argv[1])
stage("parse, derivative, domain check (limits at +-inf)")
c.to_dict()
stage("properties")
catalog_index.duplicate_of(c)
stage("duplicate search (catalog index)")
print(json.dumps(out))
"""


def breakdown(formula: str, repeat: int) -> dict[str, float]:
    """Median CPU seconds of each stage of a first ``candidates check FORMULA`` in process.

    Each run of the stages is paired with a run of the whole command (no checker) right after
    it; ``rest`` is the median of (whole - the stages' sum) over the pairs: the command's own
    path (runpy, reading the index, storing and printing the result). A machine whose speed
    drifts between runs makes it noisy (a few hundredths of a second either way).
    """
    from normfree.search_space.checks import stored_path

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = []
    for _ in range(repeat):
        stages = subprocess.run(
            [sys.executable, "-c", _STAGES, formula],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        stored_path(formula).unlink(missing_ok=True)
        runs.append(json.loads(stages))
        whole = run_once(["candidates", "check", formula], NORMFREE_CHECKER="false")[1]
        runs[-1]["rest: the whole command less the stages"] = whole - sum(runs[-1].values())
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def _row(runs: list[dict[str, float]], load: float) -> dict[str, Any]:
    row = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    return {**row, "within_budget": row["cpu_s"] <= BUDGET_S, "load_avg_1m": round(load, 2)}


def measure(repeat: int, first_repeat: int, split: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    rows: dict[str, Any] = {}

    def report(label: str, row: dict[str, Any]) -> None:
        rows[label] = row
        split = (
            f" (client {row['client_cpu_s']:.3f} + checker {row['checker_cpu_s']:.3f})"
            if row.get("checker_cpu_s")
            else ""
        )
        print(
            f"{label:58s} wall {row['wall_s']:6.3f} s   cpu {row['cpu_s']:6.3f} s{split}"
            f"   load {row['load_avg_1m']:.2f}"
        )

    def plain(label: str, args: list[str]) -> None:
        load = os.getloadavg()[0]
        runs = [dict(zip(("wall_s", "cpu_s"), run_once(args), strict=True)) for _ in range(repeat)]
        report(label, _row(runs, load))

    plain("--help", ["--help"])
    for tag, formula in CHECKED.items():
        for mode in MODES:
            load = os.getloadavg()[0]
            runs = [first_check(formula, mode) for _ in range(first_repeat)]
            report(f"candidates check{tag}, first time, {mode}", _row(runs, load))
    _stop_checkers()
    for tag, formula in CHECKED.items():
        plain(f"candidates check{tag}, again", ["candidates", "check", formula])
    plain("candidates check, syntax error", ["candidates", "check", "u+"])
    plain("candidates show", ["candidates", "show", "erf"])
    plain("candidates list", ["candidates", "list"])
    stages = {}
    for formula in CHECKED.values() if split else ():
        stages[formula] = breakdown(formula, repeat)
    for formula, parts in stages.items():
        print(
            f"first check of {formula} in process: "
            + ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
        )
    return rows, stages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs, no stage split (< 30 s)")
    ap.add_argument("--repeat", type=int, default=None)
    a = ap.parse_args()
    repeat = a.repeat or (3 if a.quick else 7)
    first_repeat = a.repeat or (2 if a.quick else 7)
    cache = Path(tempfile.mkdtemp(prefix="nfbench", dir="/tmp"))  # short: a socket path <= 107
    os.environ["NORMFREE_KERNEL_CACHE"] = str(cache / "kernels")
    try:
        run_once(["candidates", "list"])  # builds the catalog index
        rows, stages = measure(repeat, first_repeat, split=not a.quick)
    finally:
        _stop_checkers()
        shutil.rmtree(cache, ignore_errors=True)
    out = {
        "bench": "cli",
        "quick": a.quick,
        "repeat": repeat,
        "first_check_repeat": first_repeat,
        "budget_s": BUDGET_S,
        **{k: v for k, v in describe().items() if k in ("cpu", "cores", "python")},
        "seconds": {k: v["cpu_s"] for k, v in rows.items()},
        "commands": rows,
        "first_check_in_process_cpu_s_by_stage": stages,
    }
    save(out, "cli", a.quick)


if __name__ == "__main__":
    main()

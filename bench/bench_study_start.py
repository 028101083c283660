"""How soon a small study's first trial starts after the command (issue 27, 3).

Targets: a study on a smoke preset (``vit-tiny``: one trial of about a second) starts its first
trial within 3 s of ``normfree study property ...`` when a local cluster is already running
(``normfree serve`` keeps one and advertises it; the command joins it), and within 10 s from
cold (no cluster: the command starts its own Ray).

Each run is the real command in a fresh interpreter, as a user types it, against a database
that exists (the server's, or one created before timing: migrating a new file is a one-time
cost, not a study's). The figures come from the rows the run wrote, against the wall clock
taken just before the command started:

- ``created_s``: the study row is written (imports, validation, planning);
- ``first_start_s``: the first trial is leased and handed to Ray (its ``started_at``);
- ``first_done_s``: the first trial has finished (includes the Ray worker's own start-up and
  imports, and the training);
- ``wall_s``: the command's whole run; ``cpu_s``: its CPU time (user + system, with the Ray
  processes it started and reaped: on a busy machine the wall figures count other processes'
  turns on the cores, the CPU time does not); ``cluster``: what its driver did (``started`` its
  own Ray or ``joined <address>``).

Cold runs set ``NORMFREE_SHARE_LOCAL_CLUSTER=false`` (so a server running elsewhere on the host
is not joined); warm runs start ``normfree serve`` on a port of its own, wait until its cluster
is advertised, then run the command. The 1-minute load average is recorded beside each run: on
a shared 2-core machine the wall figures count other processes' turns on the cores.

    python bench/bench_study_start.py            # 3 cold + 3 warm runs: study_start.json
    python bench/bench_study_start.py --quick    # 1 warm run, no cold: study_start-quick.json

``--quick`` skips the cold runs: a server's start and one cold command are each most of the
30 s a quick run may take on two cores.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from figures import save
from machine import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's normfree (the record of the server's cluster)
TARGET_WARM_S, TARGET_COLD_S = 3.0, 10.0
COMMAND = [
    "study", "property", "--transform", "shift_h", "--functions", "erf", "--values", "0",
    "--proxy", "vit-tiny", "--seeds", "1", "--baselines", "", "--json",
]  # fmt: skip


def _command(run: int) -> list[str]:
    command = list(COMMAND)
    command[command.index("--values") + 1] = str(run / 1000)
    return command


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _stamp(text: str | None) -> float | None:
    if text is None:
        return None
    t = datetime.fromisoformat(text)
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def run_study(db: Path, run: int, **env: str) -> dict[str, Any]:
    """One study command, timed from just before it starts, from the rows it wrote.

    Each run shifts by its own value (``run / 1000``): a study identical to an earlier one reuses
    that study's finished trial instead of training (workers reuse), and would time nothing."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "normfree", *_command(run), "--db", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(**env),
        cwd=db.parent,
    )
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"the study command failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        created = conn.execute(
            "SELECT created_at FROM studies WHERE id = ?", (out["study_id"],)
        ).fetchone()[0]
        start, done = conn.execute(
            "SELECT min(started_at), min(finished_at) FROM trials WHERE study_id = ?",
            (out["study_id"],),
        ).fetchone()

    def since(text: str | None) -> float | None:
        s = _stamp(text)
        return None if s is None else round(s - t0, 2)

    return {
        "created_s": since(created),
        "first_start_s": since(start),
        "first_done_s": since(done),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cluster": out["run"].get("cluster"),
        "status": out["run"]["status"],
        "load_avg_1m": round(load, 2),
    }


def _advertised(timeout: float) -> str:
    """Wait until a cluster this checkout's commands would join is advertised; its address."""
    from normfree.workers import localray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shared = localray.running()
        if shared is not None:
            return shared.address
        time.sleep(0.2)
    raise RuntimeError(f"no local cluster advertised within {timeout:.0f} s")


@contextlib.contextmanager
def server(db: Path, port: int) -> Any:
    """``normfree serve`` over ``db`` on ``port``, stopped by its pid (SIGTERM) afterwards;
    yields the seconds its cluster took to be advertised."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "normfree", "serve", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(NORMFREE_DATABASE_URL=f"sqlite:///{db}"),
        cwd=db.parent,
    )
    try:
        _advertised(180.0)
        yield round(time.monotonic() - t0, 2)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def summary(runs: list[dict[str, Any]], target: float) -> dict[str, Any]:
    starts = [r["first_start_s"] for r in runs if r["first_start_s"] is not None]
    return {
        "runs": runs,
        "first_start_s_median": round(statistics.median(starts), 2) if starts else None,
        "first_start_s_max": max(starts) if starts else None,
        "target_s": target,
        "within_target": bool(starts) and max(starts) <= target,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one warm run (< 30 s on 2 idle cores)")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--port", type=int, default=8659, help="for the server of the warm runs")
    a = ap.parse_args()
    runs = a.runs or (1 if a.quick else 3)
    tmp = Path(tempfile.mkdtemp(prefix="nfstart", dir="/tmp"))
    db = tmp / "normfree.db"
    try:
        subprocess.run(  # create and migrate the database before timing
            [sys.executable, "-m", "normfree", "study", "list", "--db", f"sqlite:///{db}"],
            check=True,
            capture_output=True,
            env=_env(),
        )
        cold = [
            run_study(db, k, NORMFREE_SHARE_LOCAL_CLUSTER="false")
            for k in range(0 if a.quick else runs)
        ]
        with server(db, a.port) as serve_ready_s:
            warm = [run_study(db, runs + k) for k in range(runs)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {
        "bench": "study_start",
        "quick": a.quick,
        **describe(),
        "preset": "vit-tiny",
        "command": "normfree " + " ".join(c if c else "''" for c in COMMAND),
        "serve_cluster_ready_s": serve_ready_s,
        "cold": summary(cold, TARGET_COLD_S),
        "warm": summary(warm, TARGET_WARM_S),
    }
    save(out, "study_start", a.quick)


if __name__ == "__main__":
    main()

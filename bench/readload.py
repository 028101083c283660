"""What the read benchmarks share: seeded databases of finished trials, and lean HTTP load.

- **seeding** through the real write path (``Repository.add_trials`` with the engine's grid
  planner, then ``lease_next`` + ``finish_trial`` per trial, as workers write them) with
  synthetic results marked ``worker="synthetic-bench"``: property studies of 1,026 trials each
  (10 catalog functions x 17 ``shift_h`` values + LayerNorm, 6 paired seeds; the same grid again
  and again, so the proxy's leaderboard keeps its 171 arms while trials grow);
- **load**: :class:`Client`, one keep-alive HTTP/1.1 connection that costs the measuring side
  little (the server's time is what is measured), and :func:`drive`, closed-loop clients
  sharing a request count under a time cap;
- the databases a run measures on: a fresh SQLite file or PostgreSQL database, a copy of one
  seeded earlier, and the ids a load needs.

``bench_read_scale.py`` (a still database at 10k and 100k trials), ``bench_live_reads.py``
(reads while a study writes) and ``bench_hostile.py`` use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import multiprocessing as mp
import os
import random
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from figures import latency_figures

PROXY = "vit-tiny"
FUNCTIONS = [
    "erf",
    "tanh",
    "arctan",
    "isru",
    "smoothsign",
    "expsign",
    "logsign",
    "asinh",
    "linearclip",
    "power23clip",
]
VALUES = [round(-2 + 0.25 * i, 2) for i in range(17)]  # -2 .. 2
# --quick: 2 functions x 3 values + LayerNorm (7 arms, 42 trials a study) to stay under 30 s.
GRID = {"functions": FUNCTIONS, "values": VALUES}
QUICK_GRID = {"functions": FUNCTIONS[:2], "values": [-1.0, 0.0, 1.0]}


def use_quick_grid() -> None:
    """--quick: plan the studies this process seeds on :data:`QUICK_GRID`."""
    GRID.update(QUICK_GRID)


SEEDS = 6
# Submissions whose prescreen the server knows after the warm-up.
SUBMISSIONS = [
    ("dup_tanh", "2*sigmoid(2*u)-1"),
    ("dup_smoothsign", "u/(1+abs(u))"),
    ("dup_isru", "u/sqrt(u**2+1)"),
    ("bench_ratio2", "2*u/(2+abs(u))"),
]


# -- seeding -----------------------------------------------------------------------------------


def _spec(i: int) -> Any:
    from normfree.specs import StudySpec

    return StudySpec(
        kind="property",
        name=f"bench study {i} (synthetic results)",
        proxy=PROXY,
        seeds=SEEDS,
        functions=GRID["functions"],
        transform="shift_h",
        values=GRID["values"],
        baselines=["layernorm"],
        epochs=1,
    )


def synthetic(config: Any, rng: random.Random) -> Any:
    """A small result marked synthetic: 3 epochs of curves, one epoch of per-layer diagnostics."""
    from normfree.specs import LayerDiagnostic, TrialResult
    from normfree.testing.seeding import LAYERS, synthetic_curves

    name = config.norm.name
    shift = 0.0
    if "(" in name:
        shift = float(name.rsplit(",", 1)[1].rstrip(")"))
    acc = 0.8 - 0.05 * abs(shift) + 0.01 * config.seed + rng.gauss(0, 0.01)
    curves = synthetic_curves(acc)
    diags = [
        LayerDiagnostic(epoch=2, layer=layer, alpha=0.5 + 0.1 * i, input_std=1.0)
        for i, layer in enumerate(LAYERS)
    ]
    if rng.random() < 0.03:
        return TrialResult(
            status="diverged",
            objective="val_acc",
            curves=curves[:1],
            diverged_at_step=5,
            worker="synthetic-bench",
        )
    return TrialResult(
        status="complete",
        objective="val_acc",
        direction="maximize",
        metrics={"val_acc": acc, "val_loss": 1.5 - acc},
        curves=curves,
        diagnostics=diags,
        train_time_s=1.0,
        total_time_s=1.1,
        worker="synthetic-bench",
    )


def _study_size() -> int:
    return (len(GRID["functions"]) * len(GRID["values"]) + 1) * SEEDS


def _plan(repo: Any, i: int) -> int:
    from normfree.workers.scheduling import plan_grid

    spec = _spec(i)
    sid = repo.create_study(spec)
    repo.add_trials(sid, [(p.config, p.axis_values) for p in plan_grid(spec)])
    repo.set_study_status(sid, "running")
    return sid


class Writer:
    """A worker's writes to the database at ``url`` from the process that opens it: lease a
    waiting trial of a study as ``owner`` and finish it with a synthetic result."""

    def __init__(self, url: str, owner: str, seed: int) -> None:
        from normfree.storage import Database, Repository

        self.db = Database(url)
        self.repo = Repository(self.db, max_attempts=3)
        self.owner = owner
        self.rng = random.Random(seed)

    def finish_one(self, sid: int) -> bool | None:
        """What ``finish_trial`` answered; None when no trial of ``sid`` was waiting."""
        lease = self.repo.lease_next(sid, self.owner, 600.0)
        if lease is None:
            return None
        result = synthetic(lease.config, self.rng)
        return self.repo.finish_trial(lease.id, self.owner, lease.attempt, result)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.db.dispose()


def _finish_study(url: str, sid: int, seed: int) -> int:
    """One writer: lease and finish every waiting trial of the study (a worker's writes)."""
    n = 0
    with Writer(url, f"bench-{os.getpid()}", seed) as w:
        while (finished := w.finish_one(sid)) is not None:
            assert finished
            n += 1
        w.repo.set_study_status(sid, "complete")
    return n


def seed_to(url: str, target: int, writers: int) -> dict[str, Any]:
    """Add studies until ``target`` trials are finished; returns counts and the time taken."""
    from sqlalchemy import func, select

    from normfree.storage import Database, Repository
    from normfree.storage.models import StudyRow, TrialRow

    db = Database(url)
    db.migrate()
    repo = Repository(db, max_attempts=3)
    with db.session(readonly=True) as s:
        have = int(s.scalar(select(func.count()).select_from(TrialRow)) or 0)
        studies = int(s.scalar(select(func.count()).select_from(StudyRow)) or 0)
    t0 = time.perf_counter()
    written = 0
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(writers) if writers > 1 else None
    try:
        while have + written < target:
            batch = []
            for _ in range(writers):
                if have + written + len(batch) * _study_size() >= target:
                    break
                batch.append(_plan(repo, studies))
                studies += 1
            if not batch:
                batch.append(_plan(repo, studies))
                studies += 1
            jobs = [(url, sid, sid) for sid in batch]
            if pool is None:  # one writer: in this process (no start-up cost)
                written += sum(_finish_study(*job) for job in jobs)
            else:
                written += sum(pool.starmap(_finish_study, jobs))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    dt = time.perf_counter() - t0
    analysed = _store_analyses(db)
    db.dispose()
    return {
        "trials": have + written,
        "studies": studies,
        "seed_s": round(dt, 1),
        "writes_per_s": round(written / dt, 1) if dt and written else None,
        "analyses_stored": analysed,
    }


def _store_analyses(db: Any) -> int:
    """Store the arms' function analyses as a server that served this database before has
    (``storage.analyses``): a database of 10k trials has, and its next start adopts them.
    Only the names not stored yet under this code's version; how many that was."""
    from normfree.api.services.leaderboards import BASELINES, describe
    from normfree.storage import analyses, reads
    from normfree.workers.versions import catalog_version

    version = catalog_version()
    have = {n for n, _info in analyses.load(db, version)}
    with db.read() as conn:
        names = sorted({c for _p, c in reads.arm_candidates(conn)} - have - set(BASELINES))
    return analyses.save(db, version, [(n, describe(n)) for n in names])


# -- load --------------------------------------------------------------------------------------


def plain(data: bytes) -> bytes:
    """A body as :meth:`Client.fetch` read it, decompressed when it is gzip."""
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


class Client:
    """One keep-alive HTTP/1.1 connection (minimal and cheap: the server's time is measured)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, int]:
        """(status, body length); the body itself is read and dropped."""
        status, data = await self.fetch(method, path, body, headers)
        return status, len(data)

    async def fetch(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """(status, body as sent: gzipped when the server gzipped it, see :func:`plain`)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        # as a browser does: the server keeps a gzipped copy of each cached body
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Accept-Encoding: gzip",
        ]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        if body:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        assert self.reader is not None
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No garbage collection in the measuring process while it measures.

    Why: the clients' samples (tens of thousands of tuples) and the seeded ids made each full
    collection of this process ~95 ms, every 4-5 s of a window: all 32 clients stopped
    reading at once, and the pause showed up as every read's p99 though the server was idle
    (gc callbacks in each process, bench/results/live_reads.md). The window allocates little
    that is cyclic; it is collected afterwards."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
        gc.collect()


async def drive(
    host: str,
    port: int,
    make: Any,
    n: int,
    clients: int,
    max_s: float,
    headers: dict[str, str] | None = None,
) -> dict:
    """``clients`` connections share ``n`` requests (``make(i)`` -> (method, path, body, ok))."""
    lat: list[float] = []
    errors = 0
    samples: list[str] = []
    counter = iter(range(n))
    deadline = time.perf_counter() + max_s

    async def worker() -> None:
        nonlocal errors
        c = Client(host, port)
        try:
            for i in counter:
                if time.perf_counter() > deadline:
                    return
                method, path, body, ok = make(i)
                t0 = time.perf_counter()
                try:
                    status, _n = await asyncio.wait_for(c.request(method, path, body, headers), 60)
                    good = status in ok
                    if not good and len(samples) < 3:
                        samples.append(f"{method} {path} -> {status}")
                except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                    good = False
                    if len(samples) < 3:
                        samples.append(f"{method} {path}: {type(exc).__name__}")
                    await c.close()
                    c = Client(host, port)
                dt = (time.perf_counter() - t0) * 1000
                if good:
                    lat.append(dt)
                else:
                    errors += 1
        finally:
            await c.close()

    t0 = time.perf_counter()
    with quiet_gc():
        await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    out = latency_figures(lat, errors, wall)
    out["hit_time_cap"] = time.perf_counter() > deadline
    if samples:
        out["error_samples"] = samples
    return out


# -- databases ---------------------------------------------------------------------------------


def _database(backend: str, tmp: str) -> tuple[str, Any]:
    if backend == "sqlite":
        return f"sqlite:///{Path(tmp) / 'normfree.db'}", None
    from sqlalchemy.engine import make_url

    from normfree.settings import get_settings
    from normfree.storage import drop_database, ensure_database, normalize_url

    name = f"normfree_bench_{uuid.uuid4().hex[:8]}"
    server = make_url(normalize_url(get_settings().test_postgres_url))
    url = server.set(database=name).render_as_string(hide_password=False)
    ensure_database(url)
    return url, lambda: drop_database(url)


def _settle(url: str) -> None:
    """PostgreSQL: VACUUM ANALYZE the freshly seeded (or copied) database, as autovacuum long
    since has in a database in service. Else autovacuum runs during the timed reads, and each
    of its transactions moves the server's snapshot, which closes the fast lane
    (``api.fastlane``)."""
    if not url.startswith("postgresql"):
        return
    from sqlalchemy import create_engine

    from normfree.storage import normalize_url

    engine = create_engine(normalize_url(url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()


def _copy_database(source: str, target: str, tmp: str, n: int) -> str:
    """A copy of the seeded database ``source`` to measure on (the source stays as it is):
    SQLite, a file copy in ``tmp``; PostgreSQL, the run's database ``target`` recreated from
    ``source`` as its template."""
    if not source.startswith("postgresql"):
        copy = Path(tmp) / f"seeded-{n}.db"
        shutil.copyfile(source.removeprefix("sqlite:///"), copy)
        return f"sqlite:///{copy}"
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from normfree.storage import drop_database, normalize_url

    drop_database(target)
    server = make_url(normalize_url(target)).set(database="postgres")
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        name, src = make_url(target).database, make_url(normalize_url(source)).database
        conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{src}"')
    engine.dispose()
    return target


def seeded_database(
    url: str, tmp: str, n: int, writers: int, copy_from: str | None = None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The database a run measures on: ``url`` (or a copy of ``copy_from``, seeded earlier)
    seeded to ``n`` trials and settled. Its url, what the seeding did, and that with the ids
    a load needs."""
    if copy_from:
        url = _copy_database(copy_from, url, tmp, n)
    seeded = seed_to(url, n, writers)
    _settle(url)
    if copy_from:
        seeded["copied_from"] = copy_from
    return url, seeded, {**seeded, **_ids(url)}


def _ids(url: str) -> dict[str, Any]:
    from sqlalchemy import func, select

    from normfree.storage import Database
    from normfree.storage.models import StudyRow, TrialRow

    db = Database(url)
    with db.session(readonly=True) as s:
        studies = [i for (i,) in s.execute(select(StudyRow.id).order_by(StudyRow.id))]
        lo, hi = s.execute(select(func.min(TrialRow.id), func.max(TrialRow.id))).one()
    db.dispose()
    return {"study_ids": studies, "trial_range": (int(lo), int(hi))}

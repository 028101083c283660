"""Work that must not run on the event loop (or in the server's process): formula parses,
reference imports, study validation and creation, in a small pool of worker processes.

Why processes: sympy holds the GIL for the whole of a parse (a long formula is seconds), so a
thread pool only moves the stall from the event loop to every other thread: with 20 parallel
parses of new formulas ``/api/health`` took 56 s (issue 28). A worker process parses while the
server's own threads keep answering.

How it stays fair and bounded (:class:`OffloadPool`):

- **a bounded queue per client** (``NORMFREE_OFFLOAD_QUEUE_PER_CLIENT`` jobs queued or running):
  over it the answer is 429 with ``Retry-After``; clients take turns, one job per turn (the
  client served least recently first), so one client's flood never delays another client's
  request by more than one job per worker;
- **a hard time limit per job** (``NORMFREE_OFFLOAD_SECONDS`` of the worker's CPU time, counted
  from the moment a worker takes the job, never its queueing): a job that takes longer is
  refused with 422 and the reason, and its worker process is killed and replaced (the next job
  waits for a fresh worker's start, not counted against its limit). CPU time, not wall-clock,
  because workers run only when a core is idle (below): on a busy host a parse waits for a core
  without being charged for the wait. A job that has waited :data:`WAIT_FACTOR` times its limit
  (at least :data:`MIN_WAIT_SECONDS`) is answered 503 (busy, retry) and its worker replaced;
- workers run at the idle scheduling class (``SCHED_IDLE``, Linux; elsewhere ``nice`` +10):
  any other runnable task, the server's event loop first, takes the CPU from a parse at once.
  ``nice`` +10 was not enough: with 32 readers keeping the loop busy on 2 cores, two niced
  parses still took a tenth of the CPU each and the loop waited for its turn (``/api/health``
  p99 79 ms and max 102 ms while parses ran, 28 and 33 ms with ``SCHED_IDLE``, 31 and 48 ms
  without parses; bench/results/hostile-quick.md);
- workers start on first use (a test app that never parses never spawns one), import the
  parser once, and exit with the server (or when it dies: their pipe closes).

A job names a module-level function (``"module:function"``) and picklable arguments; the
function may raise :class:`~normfree.api.errors.ApiError`, which travels back as itself. The
functions live beside the code they serve (``services.candidates``, ``api.fidelity``,
``services.studies``); the ones here are only the machinery.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import multiprocessing
import os
import threading
import time
from collections import Counter, OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from normfree.api.errors import ApiError

log = logging.getLogger(__name__)

# Added to a worker's niceness where the idle scheduling class is not available.
WORKER_NICENESS = 10
# A job that has waited this many times its CPU-time limit (and at least MIN_WAIT_SECONDS)
# without finishing is answered 503: the host had no idle core for it (a saturated machine,
# training on every core), which is not the formula's fault.
WAIT_FACTOR = 4.0
# A job at the idle scheduling class whose worker has waited STARVED_AFTER_S in all for a
# core (the kernel's run-queue time, /proc/PID/schedstat) is starved: other work at normal
# priority fills every core (a study training on both), where SCHED_IDLE gets ~0.3% of a
# core and a 1-s parse would take minutes (the submit form and POST /api/studies answered
# 503 "busy", a fidelity page hung for minutes). It is run again at once on a worker at the
# server's own priority, and the slot's workers keep that priority for ESCALATED_S. While
# only the server and its clients load the cores (the hostile-client benchmark) a worker
# waits milliseconds, so the idle class keeps the event loop's margin there.
STARVED_AFTER_S = 2.0
ESCALATED_S = 60.0
MIN_WAIT_SECONDS = 30.0
# A worker that has not said "ready" in this long is killed and its job refused with 503.
_START_SECONDS = 120.0
# What a worker does before it says ready, so that no job pays for it (against its time
# limit): import the parser, build the catalog (seconds of sympy) and take each job's first-use
# costs (scipy.special, the dedup probes: a first submission took 4 s, the next 0.5 s).
_WARM_UP: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("normfree.search_space.catalog:all", ()),
    ("normfree.api.services.candidates:parse_submission", ("atan(u)*u+erf(u)", "warm-up")),
    ("normfree.api.services.candidates:parse_for_read", ("tanh(u)*0.5+u",)),
)


def _worker_main(conn: Connection, idle: bool | None = True) -> None:
    """A worker process: warm up, say ready, then run one job at a time until the pipe closes.
    ``idle``: at the idle scheduling class (a parse worker); False: only niced (the server's
    background worker: its lines and analyses are the server's own pages, which a host busy
    training on every core must not starve); None: at the server's own priority (a parse
    worker that replaces a starved one, :data:`STARVED_AFTER_S`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C is the server's to handle
    exit_with_parent()
    # Background work: when parses and the server want the same cores, the server's answers
    # (every other client's reads) go first.
    if idle is not None:
        background_priority(idle)
    warm_up()
    conn.send(("ready",))
    while True:
        try:
            target, args = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(_run_job(target, args))


def background_priority(idle: bool = True) -> None:
    """Run this process only when a core would otherwise idle (``SCHED_IDLE``); where that
    class is missing (not Linux), or with ``idle=False``, at ``nice`` +10. Its time limit counts
    CPU time, so waiting for a core costs a job nothing (:meth:`_Slot.run`)."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)  # kept if the class below is refused
    if not idle:
        return
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) process ``pid`` has used, from ``/proc`` (Linux); None where it
    cannot be read (another system, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


def runqueue_seconds(pid: int) -> float | None:
    """Time process ``pid``'s main thread has spent runnable but waiting for a core
    (``/proc/PID/schedstat``, Linux); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def exit_with_parent() -> None:
    """Exit this process as soon as its parent is gone (it was re-parented), checked twice a
    second on a daemon thread.

    Why: the forkserver notices its server's end only when it next reads its pipe, and a
    worker only between jobs; one still importing or warming up (seconds of sympy, niced, on a
    busy host) outlived a stopped ``normfree serve`` by more than 30 s. A parent-death signal
    (prctl) would fire when the *thread* that started the process ends, which a thread pool's
    thread may do at any time."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="normfree-exit-with-parent", daemon=True).start()


def warm_up() -> None:
    """Take :data:`_WARM_UP`'s costs in this process (once: later calls hit the caches)."""
    for target, args in _WARM_UP:
        _run_job(target, args)


_PRELOADED = False


def _context() -> Any:
    """The forkserver context, its server preloading :mod:`._offload_preload` (the warm-up):
    it is started once per server process (seconds: the imports and the catalog), and every
    worker after it, a replacement too, is a fork of it (milliseconds), never of the threaded
    server itself."""
    global _PRELOADED
    ctx = multiprocessing.get_context("forkserver")
    if not _PRELOADED:
        ctx.set_forkserver_preload(["normfree.api._offload_preload"])
        _PRELOADED = True
    return ctx


def _run_job(target: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """One job's outcome: ``("ok", value)``, ``("api", status, code, message, detail, headers)``
    or ``("crash", text)``; never raises (an unpicklable value is a crash, not a dead worker)."""
    import pickle

    try:
        module, _, name = target.partition(":")
        value = getattr(importlib.import_module(module), name)(*args)
        out: tuple[Any, ...] = ("ok", value)
        pickle.dumps(out)
        return out
    except ApiError as exc:
        return ("api", exc.status_code, exc.error, exc.message, exc.detail, exc.headers)
    except RecursionError:
        return ("api", 422, "invalid", "rejected: the input is nested too deeply", None, None)
    except Exception as exc:  # reported to the client as a 500-free refusal, logged there
        return ("crash", f"{type(exc).__name__}: {exc}"[:500])


class _Slot:
    """One worker process, started on demand; used by one thread at a time."""

    def __init__(self, index: int | str, *, idle: bool = True) -> None:
        self.index = index
        self.idle = idle  # the worker's scheduling (_worker_main)
        self.process: Any = None
        self.conn: Connection | None = None
        self.replaced = 0  # how many times this slot's process was killed (tests read it)
        self.escalated = 0  # jobs run again at the server's priority after starving
        self._escalated_until = 0.0  # until then, workers start at the server's priority
        self._started_at: bool | None = idle  # the running worker's priority
        # The server's warm start (``OffloadPool.start``) and a first request may both start
        # this slot; unlocked, the request could take the worker's "ready" for its answer.
        self._starting = threading.Lock()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def _start(self) -> None:
        ctx = _context()
        parent, child = ctx.Pipe()
        priority = self._priority()
        proc = ctx.Process(
            target=_worker_main,
            args=(child, priority),
            name=f"normfree-offload-{self.index}",
            daemon=True,
        )
        proc.start()
        child.close()
        self.process, self.conn, self._started_at = proc, parent, priority
        if not parent.poll(_START_SECONDS):
            self.kill()
            raise TimeoutError("the worker did not start")
        parent.recv()

    def _priority(self) -> bool | None:
        """What the next worker runs at (``_worker_main``'s ``idle``)."""
        if self.idle and time.monotonic() < self._escalated_until:
            return None
        return self.idle

    def ensure_started(self) -> None:
        with self._starting:
            if (
                self.process is None
                or not self.process.is_alive()
                or self._started_at != self._priority()  # an escalation began or ended
            ):
                self.kill()
                self._start()

    def _watch(
        self, conn: Connection, pid: int, seconds: float, wait: float, idle: bool = False
    ) -> str | None:
        """Wait for the job's answer: None once it is there, ``"timeout"`` when the worker
        has used ``seconds`` of CPU on it (wall-clock where CPU time cannot be read), ``"busy"``
        when ``wait`` seconds have passed first, ``"starved"`` (``idle`` workers) when it has
        waited :data:`STARVED_AFTER_S` for a core since the job began. Checked
        every ``step``: a tenth of a second at most, so a 15 s limit holds within 1%, and a
        blocked thread's read of ``/proc`` ten times a second costs the server nothing it
        would notice."""
        t0 = time.monotonic()
        cpu0 = cpu_seconds(pid)
        rq0 = runqueue_seconds(pid) if idle else None
        step = max(0.005, min(0.1, seconds / 4))
        while not conn.poll(step):
            waited = time.monotonic() - t0
            cpu = cpu_seconds(pid) if cpu0 is not None else None
            used = waited if cpu is None or cpu0 is None else cpu - cpu0
            if used >= seconds:
                return "timeout"
            if waited >= wait:
                return "busy"
            if idle and rq0 is not None and waited >= STARVED_AFTER_S:
                rq = runqueue_seconds(pid)
                if rq is not None and rq - rq0 >= STARVED_AFTER_S:
                    return "starved"
        return None

    def kill(self) -> None:
        proc, conn = self.process, self.conn
        self.process = self.conn = None
        end_worker(proc, conn)

    def run(
        self, target: str, args: tuple[Any, ...], seconds: float, wait: float | None = None
    ) -> tuple[Any, ...]:
        """Blocking: the job's outcome, ``("timeout",)`` once it has used ``seconds`` of CPU,
        ``("busy",)`` once it has waited ``wait`` seconds (default: :func:`wait_limit`) (the
        process is killed in both; the next job starts a fresh one) or ``("crash", text)``."""
        t0 = time.monotonic()
        wait = wait or wait_limit(seconds)
        while True:
            try:
                self.ensure_started()
            except Exception as exc:
                return ("unavailable", f"{type(exc).__name__}: {exc}")
            conn, proc = self.conn, self.process  # a close() on another thread may clear
            assert conn is not None and proc is not None  # them: the pipe then fails
            idle = self._started_at is True  # only an idle-class worker can starve
            try:
                conn.send((target, args))
                left = max(0.0, wait - (time.monotonic() - t0))
                over = self._watch(conn, proc.pid, seconds, left, idle=idle)
                if over == "starved":  # again, at once, at the server's priority
                    self.kill()
                    self.replaced += 1
                    self.escalated += 1
                    self._escalated_until = time.monotonic() + ESCALATED_S
                    log.info("offload job %s starved at the idle class; run again", target)
                    continue
                if over is not None:
                    self.kill()
                    self.replaced += 1
                    return (over,)
                return conn.recv()
            except (EOFError, OSError) as exc:
                self.kill()
                self.replaced += 1
                return ("crash", f"the worker process died ({type(exc).__name__})")


def end_worker(proc: Any, conn: Connection | None) -> None:
    """Close a worker process's pipe (a job in flight ends with it) and kill the process."""
    if conn is not None:
        with contextlib.suppress(OSError):
            conn.close()
    if proc is not None and proc.is_alive():
        proc.kill()
        proc.join(5)


def wait_limit(seconds: float) -> float:
    """How long a job with a CPU-time limit of ``seconds`` may wait for its answer in all."""
    return max(WAIT_FACTOR * seconds, MIN_WAIT_SECONDS)


@dataclass
class _Job:
    target: str
    args: tuple[Any, ...]
    future: asyncio.Future[tuple[Any, ...]]
    what: str = "the formula"
    seconds: float | None = None
    started: bool = field(default=False)


class OffloadPool:
    """Worker processes behind per-client round-robin queues (see the module docstring)."""

    def __init__(
        self,
        workers: int = 2,
        seconds: float = 15.0,
        per_client: int = 4,
        wait: float | None = None,
    ) -> None:
        self.seconds = seconds  # CPU time a job may use
        self.wait = wait  # how long a job may wait in all (None: wait_limit of its seconds)
        self.per_client = per_client
        self.slots = [_Slot(i) for i in range(workers)]
        self._idle = list(self.slots)
        self._queues: OrderedDict[str, deque[_Job]] = OrderedDict()
        self._pending: dict[str, int] = {}
        self._served: dict[str, int] = {}  # client -> the turn it was last served (while pending)
        self._turn = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="normfree-offload")
        self._lock = threading.Lock()  # only close() and the loop touch state; close may be
        self._closed = False  # called from another thread at shutdown

    def open(self) -> None:
        """Accept work again after :meth:`close` (an app whose lifespan runs more than once, as
        a test client's does per request, gets a fresh executor; workers start on demand)."""
        with self._lock:
            if not self._closed:
                return
            self._executor = ThreadPoolExecutor(
                len(self.slots), thread_name_prefix="normfree-offload"
            )
            self._idle = list(self.slots)
            self._closed = False

    def start(self) -> None:
        """Start every worker now, in the background (a server does at start: a worker's start
        is seconds of imports and warm-up, better spent before the first request)."""
        for slot in self.slots:
            self._executor.submit(slot.ensure_started)

    def queued(self, client: str) -> int:
        """Jobs of ``client`` queued or running."""
        return self._pending.get(client, 0)

    async def call(
        self,
        client: str,
        target: str,
        *args: Any,
        what: str = "the formula",
        seconds: float | None = None,
    ) -> Any:
        """Run ``target(*args)`` in a worker; its value, or its ApiError raised here.

        429 when ``client`` already has ``per_client`` jobs queued or running; 422 when the job
        runs past its time limit (``what`` names it in the message); 503 when no worker starts.
        """
        if self._closed:
            raise ApiError(503, "unavailable", "the server is shutting down")
        n = self._pending.get(client, 0)
        if n >= self.per_client:
            raise ApiError(
                429,
                "too_many_requests",
                f"this client already has {n} parses or imports queued or running (at most "
                f"{self.per_client}); wait for their answers, then retry",
                {"queued": n, "limit": self.per_client},
                headers={"Retry-After": str(max(1, math.ceil(self.seconds)))},
            )
        loop = asyncio.get_running_loop()
        job = _Job(target, args, loop.create_future(), what, seconds)
        self._pending[client] = n + 1
        self._queues.setdefault(client, deque()).append(job)
        try:
            self._pump(loop)
            outcome = await job.future
        finally:
            left = self._pending.get(client, 1) - 1
            if left > 0:
                self._pending[client] = left
            else:
                self._pending.pop(client, None)
                self._served.pop(client, None)
        return self._unwrap(outcome, job)

    def _unwrap(self, outcome: tuple[Any, ...], job: _Job) -> Any:
        seconds = job.seconds if job.seconds is not None else self.seconds
        return unwrap(outcome, job.target, job.what, seconds)

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand queued jobs to idle workers, one client per turn."""
        while self._idle and self._queues:
            # the client served least recently (one never served first): a flood's later jobs
            # wait behind every other client's next one
            client = min(self._queues, key=lambda c: self._served.get(c, -1))
            queue = self._queues[client]
            job = queue.popleft()
            if not queue:
                del self._queues[client]
            self._turn += 1
            self._served[client] = self._turn
            if job.future.done():  # its request went away while it queued
                continue
            slot = self._idle.pop()
            task = loop.create_task(self._run(loop, slot, job))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, loop: asyncio.AbstractEventLoop, slot: _Slot, job: _Job) -> None:
        seconds = job.seconds if job.seconds is not None else self.seconds
        try:
            outcome = await loop.run_in_executor(
                self._executor, slot.run, job.target, job.args, seconds, self.wait
            )
        except BaseException as exc:  # the executor is gone (shutdown): answer, never hang
            outcome = ("unavailable", f"{type(exc).__name__}: {exc}")
        finally:
            self._idle.append(slot)
        if not job.future.done():
            job.future.set_result(outcome)
        if not self._closed:
            self._pump(loop)

    def close(self) -> None:
        """Stop every worker process (the server is stopping)."""
        with self._lock:
            self._closed = True
            for slot in self.slots:
                slot.kill()
            self._executor.shutdown(wait=False, cancel_futures=True)


def unwrap(outcome: tuple[Any, ...], target: str, what: str, seconds: float) -> Any:
    """A job's value from its outcome (:func:`_run_job`), or the ApiError that says why not."""
    kind = outcome[0]
    if kind == "ok":
        return outcome[1]
    if kind == "api":
        _, status, code, message, detail, headers = outcome
        raise ApiError(status, code, message, detail, headers)
    if kind == "timeout":
        raise ApiError(
            422,
            "too_expensive",
            f"{what} took longer than the server's limit of {seconds:g} s to check; simplify it",
            {"reason": "time_limit", "seconds": seconds},
        )
    if kind == "busy":
        log.warning("offload job %s waited too long for a core", target)
        raise ApiError(
            503,
            "unavailable",
            f"the server was too busy to check {what} in time; retry later",
            {"reason": "busy"},
            headers={"Retry-After": str(max(1, math.ceil(seconds)))},
        )
    if kind == "unavailable":
        log.error("offload worker unavailable: %s", outcome[1])
        raise ApiError(503, "unavailable", "no worker process could start; retry later")
    log.warning("offload job %s failed: %s", target, outcome[1])
    raise ApiError(
        422, "rejected", f"{what} could not be checked: {outcome[1]}", {"reason": "crash"}
    )


class BackgroundWorker:
    """One worker process for the server's own background computations (the fidelity lines,
    the catalog's public rows, the arms' function analyses), apart from :class:`OffloadPool`'s
    parse workers, used by one thread at a time.

    Why: a board's fidelity line is a report over every finished trial of its proxy (hundreds
    of ms of pure Python at 10k trials); computed on a thread of the server it held the GIL
    while 32 readers waited, which set the live reads' p99 under a writer (issue 27). Here the
    server only unpickles the small answer. Apart from the parse pool, so that neither a flood
    of parses delays the lines nor the lines take a client's turn.
    """

    def __init__(self) -> None:
        self._slot = _Slot("background", idle=False)
        self._lock = threading.Lock()
        self._closed = False
        self.jobs: Counter[str] = Counter()  # jobs run, by target (tests read it)

    def start(self) -> None:
        """Start the process now, in the background (a server does at start)."""
        threading.Thread(
            target=self._start_quietly, name="normfree-background-start", daemon=True
        ).start()

    def _start_quietly(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._slot.ensure_started()
            except Exception:  # the first job starts it again, and says why it cannot
                log.warning("background worker did not start", exc_info=True)

    def run(self, target: str, *args: Any, what: str, seconds: float) -> Any:
        """``target(*args)`` in the worker (blocking); its value, or an ApiError saying why not."""
        with self._lock:
            if self._closed:
                raise ApiError(503, "unavailable", "the server is shutting down")
            outcome = self._slot.run(target, args, seconds)
            if outcome[0] == "crash" and self._slot.process is None:
                # the process had died (killed, out of memory) before or during the job: once
                # more, in a fresh one, so that a lost worker loses no computation
                outcome = self._slot.run(target, args, seconds)
            self.jobs[target] += 1
        return unwrap(outcome, target, what, seconds)

    @property
    def pid(self) -> int | None:
        return self._slot.pid

    def close(self) -> None:
        self._closed = True
        self._slot.kill()  # unlocked: a job in flight ends with its pipe ("crash")


_BACKGROUND: BackgroundWorker | None = None
# Set once this process's server stops (``close_background(final=True)``): background work
# is then not computed here instead. A line or an analysis still queued at a stop had fallen
# back to sympy on a daemon thread, which the interpreter's exit aborted ("Fatal Python
# error: Aborted", exit status 134 after a clean shutdown); seen with studies warmed at start.
_STOPPING = False


class ServerStopping(RuntimeError):
    """Background work asked for while the server stops: nobody will read its result."""


def start_background() -> None:
    """Give this process (a server) its background worker, starting now."""
    global _BACKGROUND, _STOPPING
    _STOPPING = False
    if _BACKGROUND is None:
        _BACKGROUND = BackgroundWorker()
        _BACKGROUND.start()


def close_background(final: bool = False) -> None:
    """Stop this process's background worker. ``final``: the server is stopping (its app's
    shutdown), and no background work is computed here from now on (``in_background``)."""
    global _BACKGROUND, _STOPPING
    _STOPPING = _STOPPING or final
    worker, _BACKGROUND = _BACKGROUND, None
    if worker is not None:
        worker.close()


def in_background(target: str, *args: Any, what: str, seconds: float) -> tuple[bool, Any]:
    """(True, ``target(*args)``) computed in this process's background worker; (False, None)
    when the process has none (an app built in a test's process) or the worker failed (logged),
    so that the caller computes it here instead: a background computation is never lost.
    Raises :class:`ServerStopping` once the server stops (nothing is computed here then)."""
    worker = _BACKGROUND
    if _STOPPING:
        raise ServerStopping(f"{what}: the server is stopping")
    if worker is None:
        return False, None
    try:
        return True, worker.run(target, *args, what=what, seconds=seconds)
    except ApiError as exc:
        if _STOPPING:  # the worker was closed under this job
            raise ServerStopping(f"{what}: the server is stopping") from exc
        log.warning("%s in the background worker failed (%s); computed here", what, exc.message)
        return False, None


def pool(request: Any) -> OffloadPool:
    """The app's pool (``create_app`` makes one per app)."""
    return request.app.state.offload


__all__ = [
    "BackgroundWorker",
    "OffloadPool",
    "ServerStopping",
    "close_background",
    "in_background",
    "pool",
    "start_background",
    "unwrap",
]

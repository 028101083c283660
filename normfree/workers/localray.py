"""The embedded local Ray cluster: reachable from this machine only, and gone when we are.

``normfree serve`` and the study commands start a private Ray when no cluster address is set.
Three things Ray does not do for us by default:

- **Loopback only.** On Linux Ray takes the machine's outward address as the node address and
  its GCS, raylet, object manager, workers and agents listen on every interface. Ray binds
  everything to loopback when it treats the machine as a single-node "cluster-less" host (its
  behaviour on macOS/Windows, switched by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``). We set that
  switch, in this process and in the environment the Ray processes inherit, for the duration of
  ``ray.init`` only, and pass ``127.0.0.1`` as the node address. Joining a real cluster
  (``NORMFREE_RAY_ADDRESS``) never goes through here.
- **Our signals stay ours.** ``ray.init`` installs a C-level "failure signal handler" (absl's)
  for SIGTERM in the driver, over whatever Python had installed: a SIGTERM then printed a stack
  dump and ended the process with SIGABRT ("Aborted"), before uvicorn or our own handler could
  shut anything down, and Ray's agents survived it. The driver's core worker is created with
  that handler off (Ray's ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, read from the module constant
  while ``ray.init`` runs), so SIGTERM and SIGINT reach Python.
- **Fully stopped on exit.** ``ray.shutdown()`` runs at interpreter exit, but a SIGTERM kills
  Python without running exit handlers, and Ray's agents (dashboard agent, runtime-env agent)
  can outlive a raylet that died under them. :func:`start` turns SIGTERM into a normal exit
  (only where nobody else handles it: ``serve`` and ``study run`` install their own, which end
  in :func:`stop`), records every process the cluster started (even when ``ray.init`` is
  interrupted half way), and :func:`stop` shuts Ray down, then terminates that whole tree:
  SIGTERM, a grace period, SIGKILL. The tree is found by process ancestry in ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normfree.private import DIR_MODE, private_dir, private_umask

LOOPBACK = "127.0.0.1"
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_AUTH_MODE = "RAY_AUTH_MODE"

# Processes the embedded cluster started, recorded after ray.init for stop(): pid -> its start
# time (so a pid the kernel has since given to another process is never signalled).
_started: dict[int, int] = {}


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from ``/proc/*/stat`` (Linux; empty elsewhere)."""
    parent_of: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z":
            parent_of[int(entry.name)] = int(fields[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {c for c, p in parent_of.items() if p in frontier and c not in out}
        out |= frontier
    return out


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/PID/stat`` field 22); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has finished)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _sigterm_exits() -> None:
    """Make SIGTERM a normal exit (so atexit's ray.shutdown runs), if no one else handles it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return

    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


@contextlib.contextmanager
def _single_host() -> Iterator[None]:
    """Ray's single-host mode, and no failure signal handler, for the duration of ``ray.init``.

    The processes Ray starts inherit the switch from the environment at spawn time (and the
    raylet passes it on to every worker it starts later); this process reads the module constant
    (set at import) only while starting. Both are restored afterwards, so a later ``ray.init``
    that joins a real cluster, or a ``ray start`` this process runs, is not affected.
    """
    from ray._private import ray_constants

    old_env = os.environ.get(_CLUSTER_SWITCH)
    old_const = ray_constants.ENABLE_RAY_CLUSTER
    old_handler = ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER
    os.environ[_CLUSTER_SWITCH] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    # This process's core worker only: Ray's own processes keep their crash reports.
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old_const
        ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = old_handler
        if old_env is None:
            os.environ.pop(_CLUSTER_SWITCH, None)
        else:
            os.environ[_CLUSTER_SWITCH] = old_env


@contextlib.contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """Keep the caller's own Python SIGTERM handler through ``ray.init``.

    ``ray.init`` (in the main thread) replaces SIGTERM's handler with one that exits at once
    with status 15; a command that handles SIGTERM itself (``study run``: stop the study, hand
    its trials back, stop Ray) must keep its handler, also while Ray starts.
    """
    import ray._private.utils as ray_utils

    main = threading.current_thread() is threading.main_thread()
    if not main or not callable(signal.getsignal(signal.SIGTERM)):
        yield
        return
    original = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda _handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original


def private_temp_root() -> Path:
    """The folder the embedded cluster's temp dir lives in: this user's only (0700).

    Ray makes its temp, session, sockets and logs folders 0777 on purpose (shared machines);
    inside a folder no one else may enter, that sharing reaches no one. A path that exists but is
    not a folder of this user (someone else made it first) is refused rather than used. Short,
    under the system temp dir: Ray's socket paths must stay under the 107 bytes of a Unix socket.
    """
    root = Path(tempfile.gettempdir()) / f"nf-ray-{os.getuid()}"
    private_dir(root)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeError(
            f"{root} exists and is not a folder of this user: remove it (the embedded Ray "
            "cluster keeps its sockets there, so it must be private)"
        )
    os.chmod(root, DIR_MODE)
    return root


def _privatise(root: Path) -> None:
    """The folders Ray made 0777 under ``root`` back to 0700 (its processes are this user's)."""
    for folder, subfolders, _files in os.walk(root):
        for path in (folder, *(os.path.join(folder, d) for d in subfolders)):
            with contextlib.suppress(OSError):  # a folder Ray removed meanwhile
                if os.lstat(path).st_mode & 0o077 and not os.path.islink(path):
                    os.chmod(path, DIR_MODE)


def start(**init_kwargs: Any) -> None:
    """``ray.init`` a private local cluster bound to loopback (kwargs go to ``ray.init``)."""
    import ray

    before = descendants(os.getpid())
    root = private_temp_root()
    init_kwargs.setdefault("_temp_dir", str(root / "ray"))
    # Umask 077 while Ray starts: the files and sockets it and the processes it spawns (which
    # inherit the umask) create are private; the folders it makes 0777 are inside ``root``.
    try:
        with _single_host(), _keep_sigterm_handler(), private_umask():
            ray.init(address="local", _node_ip_address=LOOPBACK, **init_kwargs)
    finally:
        # Also when ray.init is interrupted (Ctrl-C while it starts): what it started so far
        # is ours to stop.
        for pid in descendants(os.getpid()) - before:
            if (t := start_time(pid)) is not None:
                _started[pid] = t
    _privatise(root)
    _sigterm_exits()


def address() -> str:
    """The running embedded cluster's GCS address as another process on this host reaches it.

    Ray reports the host's network address even in single-host mode, where nothing listens
    there; the GCS listens on loopback, at the same port.
    """
    import ray

    port = ray.get_runtime_context().gcs_address.rsplit(":", 1)[1]
    return f"{LOOPBACK}:{port}"


def join(addr: str, auth_mode: str | None = None, **init_kwargs: Any) -> None:
    """``ray.init`` as a driver of another process's embedded cluster on this host.

    Ray rewrites a loopback address to the host's network address unless single-host mode is
    on while it starts, so the switch is set for the ``ray.init`` here too. ``auth_mode``: the
    cluster's (``token`` for one Ray started with its default authentication); Ray never turns
    it on for an explicit address, and the cluster refuses a driver without it.
    """
    import ray

    if auth_mode and os.environ.get(_AUTH_MODE) != auth_mode:
        from ray._raylet import Config

        os.environ[_AUTH_MODE] = auth_mode
        Config.initialize("")  # Ray's cached config reads the mode again
    with _single_host():
        ray.init(address=addr, _node_ip_address=LOOPBACK, **init_kwargs)


def is_embedded(addr: str) -> bool:
    """Whether a ``host:port`` Ray address is another process's embedded cluster on this host.

    A loopback address whose port does not answer at the host's network address: a cluster
    started by ``ray start`` on this host listens on every interface and is joined as usual
    (Ray rewrites loopback to the network address), while an embedded one listens only on
    loopback and must be joined in single-host mode (:func:`join`).
    """
    import socket

    host, _, port = addr.removeprefix("ray://").rpartition(":")
    if host not in (LOOPBACK, "localhost") or not port.isdigit():
        return False
    import ray.util

    try:
        with socket.create_connection((ray.util.get_node_ip_address(), int(port)), timeout=1):
            return False
    except OSError:
        return True


# ----------------------------------------------------------------------------- sharing on a host
#
# A long-lived process (``normfree serve``) advertises its embedded cluster in a record in the
# private temp root; a study command started later on the same host joins it instead of starting
# its own (Ray's start-up is most of a small study's first seconds). The record names the
# process that owns the cluster (pid and start time: a reused pid is never trusted) and is keyed
# by the normfree package's folder and the Python executable, so a command joins only a
# cluster whose workers import the same code from the same environment. Only loopback, only
# this user (the root is 0700): nothing here reaches another machine or another user.


def _record_path() -> Path:
    import hashlib
    import sys

    import normfree

    code = f"{Path(normfree.__file__).resolve().parent}|{Path(sys.executable).resolve()}"
    key = hashlib.sha256(code.encode()).hexdigest()[:16]
    return private_temp_root() / f"cluster-{key}.json"


_advertised: list[Path] = []


def advertise() -> Path:
    """Record the running embedded cluster (started by this process) for other commands on
    this host to join (:func:`running`); :func:`stop` removes the record."""
    import json

    path = _record_path()
    record = {
        "address": address(),
        "pid": os.getpid(),
        "start_time": start_time(os.getpid()),
        # Ray turns token authentication on for a cluster it starts (in this process's
        # environment only); a process joining by address must turn it on itself (join).
        "auth_mode": os.environ.get(_AUTH_MODE),
    }
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with private_umask():
        tmp.write_text(json.dumps(record))
    os.replace(tmp, path)  # whole or not at all: a reader never sees half a record
    if not _advertised:
        import atexit

        atexit.register(_withdraw)  # also when the process ends without stop()
    _advertised.append(path)
    return path


def _withdraw() -> None:
    """Remove the records this process wrote (only while they still name this process)."""
    import json

    while _advertised:
        path = _advertised.pop()
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass


@dataclass(frozen=True)
class Shared:
    """An advertised cluster: its GCS address and Ray's authentication mode."""

    address: str
    auth_mode: str | None = None


def running() -> Shared | None:
    """The advertised embedded cluster this process may join, or None.

    Trusted only while its owner runs (same pid and start time) and its GCS port answers on
    loopback; a stale record (its owner was SIGKILLed) is removed.
    """
    import json
    import socket

    path = _record_path()
    try:
        record = json.loads(path.read_text())
        addr, pid, started = str(record["address"]), int(record["pid"]), record["start_time"]
        mode = record.get("auth_mode")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid():
        return None  # our own cluster: nothing to join
    if start_time(pid) != started or not alive(pid):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return Shared(addr, str(mode) if mode else None)
    except (OSError, ValueError):
        return None


def stop(grace_s: float = 3.0) -> None:
    """Shut the local cluster down and make sure none of its processes survive.

    The grace is short: what outlives ``ray.shutdown()`` is Ray's dashboard and runtime-env
    agents, which ignore SIGTERM and end only at the SIGKILL that follows it.
    """
    import ray

    _withdraw()  # first: no command may join a cluster that is going away
    # The cluster's process tree, taken before shutdown re-parents what survives it; only
    # processes the cluster started (and theirs) are ever signalled.
    tree = {p for p, t in _started.items() if start_time(p) == t}
    for p in set(tree):
        tree |= descendants(p)
    _started.clear()
    if ray.is_initialized():
        try:
            ray.shutdown()
        finally:
            terminate(tree, grace_s)
    else:
        terminate(tree, grace_s)


def terminate(pids: set[int], grace_s: float = 10.0) -> None:
    """SIGTERM every live process of ``pids``, SIGKILL those still alive after ``grace_s``."""
    left = {p for p in pids if alive(p)}
    deadline = time.monotonic() + grace_s
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        while left and time.monotonic() < deadline:
            left = {p for p in left if alive(p)}
            time.sleep(0.1)
        if not left:
            return
        deadline = time.monotonic() + 2.0


__all__ = [
    "LOOPBACK",
    "advertise",
    "alive",
    "descendants",
    "running",
    "start",
    "stop",
    "terminate",
]

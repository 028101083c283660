"""The embedded local Ray cluster: reachable from this machine only, and gone when we are.

``normfree serve`` and the study commands start a private Ray when no cluster address is set.
Two things Ray does not do for us by default:

- **Loopback only.** On Linux Ray takes the machine's outward address as the node address and
  its GCS, raylet, object manager, workers and agents listen on every interface. Ray binds
  everything to loopback when it treats the machine as a single-node "cluster-less" host (its
  behaviour on macOS/Windows, switched by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``). We set that
  switch, in this process and in the environment the Ray processes inherit, for the duration of
  ``ray.init`` only, and pass ``127.0.0.1`` as the node address. Joining a real cluster
  (``NORMFREE_RAY_ADDRESS``) never goes through here.
- **Fully stopped on exit.** ``ray.shutdown()`` runs at interpreter exit, but a SIGTERM kills
  Python without running exit handlers, and Ray's agents (dashboard agent, runtime-env agent)
  can outlive a raylet that died under them. :func:`start` turns SIGTERM into a normal exit
  (only where nobody else handles it: uvicorn installs its own handler, which ends in our
  shutdown through the app's lifespan), and :func:`stop` shuts Ray down and then terminates
  any process it had started that is still alive, found by process ancestry in ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# Processes the embedded cluster started (pids), recorded after ray.init for stop().
_started: set[int] = set()


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
    """Ray's single-host mode for the duration of ``ray.init`` only.

    The processes Ray starts inherit the switch from the environment at spawn time (and the
    raylet passes it on to every worker it starts later); this process reads the module constant
    (set at import) only while starting. Both are restored afterwards, so a later ``ray.init``
    that joins a real cluster, or a ``ray start`` this process runs, is not affected.
    """
    from ray._private import ray_constants

    old_env = os.environ.get(_CLUSTER_SWITCH)
    old_const = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_CLUSTER_SWITCH] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old_const
        if old_env is None:
            os.environ.pop(_CLUSTER_SWITCH, None)
        else:
            os.environ[_CLUSTER_SWITCH] = old_env


def start(**init_kwargs: Any) -> None:
    """``ray.init`` a private local cluster bound to loopback (kwargs go to ``ray.init``)."""
    import ray

    before = descendants(os.getpid())
    with _single_host():
        ray.init(address="local", _node_ip_address=LOOPBACK, **init_kwargs)
    _started.update(descendants(os.getpid()) - before)
    _sigterm_exits()


def stop(grace_s: float = 10.0) -> None:
    """Shut the local cluster down and make sure none of its processes survive."""
    import ray

    # The cluster's process tree, taken before shutdown re-parents what survives it; only
    # processes the cluster started (and theirs) are ever signalled.
    tree = set(_started)
    for p in _started:
        tree |= descendants(p)
    _started.clear()
    if ray.is_initialized():
        ray.shutdown()
    left = {p for p in tree if alive(p)}
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


__all__ = ["LOOPBACK", "alive", "descendants", "start", "stop"]

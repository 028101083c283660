"""A real multi-node Ray cluster on one machine, owned and ended by process id.

Each node is its own ``ray start --block`` process in its own session (process group), so a node
can be killed like a lost machine (SIGKILL to its raylet and everything under it) while the other
node keeps running. Nothing here ever calls ``ray stop``: that command ends every Ray process of
the machine, other people's test clusters included.

Isolation from other clusters on the machine: a private ``--temp-dir`` (Ray writes its
``ray_current_cluster`` file and sockets there, not in the shared ``/tmp/ray``), ports picked
free at start, and an explicit address everywhere (never ``auto`` from a test process).

Token authentication (on by default in this Ray) stays on: every process of the cluster and
every client gets ``RAY_AUTH_MODE=token`` and one random ``RAY_AUTH_TOKEN`` through its
environment, exactly as the docker-compose stack does.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from normfree.workers.localray import descendants

# The ports a node listens on, each given a free one: two nodes on one machine must not collide.
PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free right now on 127.0.0.1 (held open together while picked)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def proc_title(pid: int) -> str:
    """A process's command line ('' if it is gone); Ray workers show ``ray::<task name>``."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@dataclass
class RayNode:
    """One ``ray start --block`` process and its family (raylet, agents, workers)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    family: set[int] = field(default_factory=set)

    def refresh(self) -> set[int]:
        """Remember every process now under this node (a killed parent orphans its children)."""
        self.family |= descendants(self.proc.pid)
        return self.family

    def busy_workers(self, task_name: str) -> list[int]:
        """PIDs of this node's workers running a task called ``task_name`` right now."""
        return [p for p in self.refresh() if proc_title(p).startswith(f"ray::{task_name}")]

    def kill(self) -> None:
        """Lose the node: SIGKILL its process group and every process it started, by PID."""
        self.refresh()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in {self.proc.pid, *self.family}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class LocalRayCluster:
    """A head node plus worker nodes as separate OS processes. Use as a context manager."""

    def __init__(self, root: Path, *, cpus_per_node: int = 1, dashboard: bool = False) -> None:
        # Unix socket paths live under the temp dir and are limited to ~107 bytes: keep it short.
        self.temp_dir = Path(f"/tmp/nfray-{secrets.token_hex(4)}")
        self.root = root
        self.cpus = cpus_per_node
        self.dashboard = dashboard
        self.token = secrets.token_hex(16)
        self.nodes: list[RayNode] = []
        self.gcs_address = ""
        self.jobs_address = ""

    # ------------------------------------------------------------------ environment

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the cluster's processes and of every client that talks to it."""
        venv_bin = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_USAGE_STATS_ENABLED": "0",
            # Declare a silent node dead after ~3 s instead of Ray's default ~15 s.
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
            "OMP_NUM_THREADS": "1",
        }
        env.pop("RAY_ADDRESS", None)
        env.update(extra)
        return env

    # ------------------------------------------------------------------ nodes

    def _start(
        self, name: str, args: list[str], env: dict[str, str], timeout: float, attempts: int = 2
    ) -> RayNode:
        """Start a node; retry once on failure.

        Why retry: ``ray start`` gives a node a fixed 30 s to register with the GCS, which a
        machine shared by many test runs (load far above its core count) sometimes misses.
        """
        errors: list[str] = []
        for attempt in range(attempts):
            node = self._start_once(f"{name}-{attempt}" if attempt else name, args, env, timeout)
            if isinstance(node, RayNode):
                return node
            errors.append(node)
        raise RuntimeError("\n---\n".join(errors))

    def _start_once(
        self, name: str, args: list[str], env: dict[str, str], timeout: float
    ) -> RayNode | str:
        log = self.root / f"{name}.log"
        ports = free_ports(len(PORT_FLAGS))
        cmd = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--block",
            "--num-cpus",
            str(self.cpus),
            "--num-gpus",
            "0",
            "--object-store-memory",
            str(80 * 1024 * 1024),
            "--disable-usage-stats",
            "--node-ip-address",
            "127.0.0.1",
            *(a for flag, port in zip(PORT_FLAGS, ports, strict=True) for a in (flag, str(port))),
            *args,
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        node = RayNode(name, proc, log)
        self.nodes.append(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node.refresh()  # know the family even if `ray start` dies and orphans it
            text = log.read_text(errors="replace")
            if "Ray runtime started" in text:
                return node
            if proc.poll() is not None:
                break
            time.sleep(0.25)
        node.kill()
        self.nodes.remove(node)
        text = log.read_text(errors="replace")
        return f"ray start ({name}) failed (exit {proc.returncode}):\n{text[-2000:]}"

    def start_head(self, timeout: float = 120.0, **env: str) -> RayNode:
        gcs, client, dash = free_ports(3)
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        args = [
            "--head",
            "--port",
            str(gcs),
            "--ray-client-server-port",
            str(client),
            "--temp-dir",
            str(self.temp_dir),
        ]
        if self.dashboard:
            args += ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1"]
            args += ["--dashboard-port", str(dash)]
            self.jobs_address = f"http://127.0.0.1:{dash}"
        else:
            args += ["--include-dashboard", "false"]
        node = self._start("head", args, self.env(**env), timeout)
        self.gcs_address = f"127.0.0.1:{gcs}"
        return node

    def add_node(self, name: str, timeout: float = 120.0, **env: str) -> RayNode:
        assert self.gcs_address, "start the head first"
        return self._start(name, ["--address", self.gcs_address], self.env(**env), timeout)

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Kill every node this object started (workers first), by PID; remove the temp dir."""
        for node in reversed(self.nodes):
            node.kill()
        self.nodes.clear()
        import shutil

        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

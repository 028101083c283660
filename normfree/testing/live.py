"""A live ``normfree serve`` process on loopback for browser, CLI and load tests."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

CLI = [sys.executable, "-c", "from normfree.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(
    base: str, proc: subprocess.Popen[str], timeout: float, poll_s: float = 0.2
) -> bool:
    """True once ``{base}api/health`` answers 200; False if ``proc`` (the server) exits or
    ``timeout`` seconds pass first, so a server that died is reported at once, not at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(base + "api/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a child ``normfree`` process over ``database_url``."""
    env = {**os.environ, "NORMFREE_DATABASE_URL": database_url, **extra}
    env.setdefault("OMP_NUM_THREADS", "1")
    # A test's server starts Ray only when a study needs it, and a test's command never joins
    # a cluster some other server on the host advertises (tests that check sharing set it).
    env.setdefault("NORMFREE_SHARE_LOCAL_CLUSTER", "false")
    return env


def run_cli(args: list[str], database_url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=cli_env(database_url, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextmanager
def live_server(
    database_url: str, *args: str, timeout: float = 90.0, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Start ``normfree serve`` on a free loopback port; yield its printed URL; stop it.
    ``env``: extra environment variables of the server (settings)."""
    with live_server_process(database_url, *args, timeout=timeout, env=env) as (url, _proc):
        yield url


@contextmanager
def app_server(app: object) -> Iterator[str]:
    """Serve an app built in this process with a real uvicorn on a free loopback port (real
    HTTP, real concurrency: many client threads, the server's thread pool); yield its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")  # type: ignore[arg-type]
    )
    thread = threading.Thread(target=server.run, name="normfree-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the in-process server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def live_server_process(
    database_url: str, *args: str, timeout: float = 90.0, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`live_server`, also yielding the process (a test may kill it mid-write)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            *CLI,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            *args,
        ],
        env=cli_env(database_url, **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # the URL is the first line serve prints; log lines (stderr, merged) may come before it
        first = ""
        for _ in range(50):
            line = proc.stdout.readline()
            first += line
            m = re.search(r"(http://\S+/)", line)
            if m or not line:
                break
        assert m, f"serve printed no URL: {first!r}"
        url = m.group(1)
        # Keep draining the server's output so a full pipe can never block it.
        log: list[str] = []
        threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True).start()
        if not wait_healthy(url, proc, timeout):
            raise RuntimeError(f"server did not come up: {first}{''.join(log)[-3000:]}")
        try:
            yield url, proc
        except BaseException:
            # the server's side of a failing test (a 500's traceback is only here): pytest
            # shows what the test wrote to stderr beside the failure
            print(
                f"--- the server's log, last 6000 characters ---\n{''.join(log)[-6000:]}",
                file=sys.stderr,
            )
            raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

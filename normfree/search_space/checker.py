"""The checker: a long-lived local process that checks new formulas for ``candidates check``.

Why a process: importing sympy alone costs 0.27-0.55 s of CPU (``bench/results/cli.json``
names the CPU), and a first check in process
spends 0.6-1.3 s on the interpreter, the CLI, numpy, sympy, pydantic and the analysis modules
before it takes its first limit: over the command's whole 0.5 s budget. No change inside the
CLI's process brings the first check of a new formula under budget on that CPU, so the CLI
hands such a formula to a process that has all of that loaded, and prints its answer. The
checker runs :func:`.checks.check`, the very function the CLI runs without it (and stores the
result the same way), so the output is the same either way; the tests compare them.

How it works:

- one checker per cache folder and code version, listening on the unix socket
  ``<cache>/checker-<index_key>.sock`` (:func:`.catalog_index.index_key` hashes this package's
  code, this module included, and the numeric libraries' versions: after a code change the CLI
  looks for another socket and never talks to a stale checker). Each request carries the key
  too, and a checker answers only requests for its own;
- the CLI starts it on first use (:func:`check`): ``serve`` takes an exclusive lock on
  ``checker-<key>.lock`` (when two CLIs start one at once, one wins and the other connects to
  it), removes a stale socket file (the lock proves its checker gone), binds, listens, then
  forks: the CLI's child exits once the socket accepts, and the checker runs on, detached,
  with its errors in ``checker-<key>.log``;
- it loads sympy, numpy and the catalog index, answers one request at a time, warms itself up
  while idle (:data:`WARM_UP`: first-use costs such as scipy.special for erf) and exits after
  ``checker_idle_seconds`` (settings; 10 minutes) without a request;
- the CLI checks in its own process on any failure: checker turned off (``NORMFREE_CHECKER=
  false``), no socket, refused, no answer within ``checker_timeout_seconds``, an answer that is
  not a well-formed result for its request, the checker killed mid-request;
- ``normfree candidates checker stop`` stops every checker of the cache folder, of any code
  version, and removes stale socket files; ``status`` lists them.

Protocol: one request per connection, one line of JSON each way. ``{"op": "check", "protocol",
"key", "formula", "name"}`` is answered ``{"ok": Checked}``, ``{"rejected": {"message",
"position"}}`` or ``{"error": text}``; ``{"op": "status"}`` and ``{"op": "stop"}`` (the same in
every version, so a stop reaches old checkers) with ``{"ok": status}``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from normfree.private import private_dir
from normfree.search_space import catalog_index, checks
from normfree.search_space._syntax import parse_tree
from normfree.search_space.errors import ExpressionError

PROTOCOL = 1
# Checked once the checker is loaded and idle: the first erf imports scipy.special (0.2-0.3 s),
# the first limit sympy's series modules. Not a formula the benchmark times.
WARM_UP = ("erf(u)", "atan(u)*u")
# Exit statuses of ``serve`` in the CLI's child.
LISTENING, ANOTHER, WRONG_KEY = 0, 10, 11
_MAX_LINE = 1 << 20  # bytes of one request or answer
_MAX_SOCKET_PATH = 107  # Linux sun_path, less its NUL: a longer cache path checks in process
_SPAWN_WAIT_S = 30.0  # the child binds before it imports anything heavy: well under a second
_WINNER_WAIT_S = 3.0  # after losing the lock: how long the winner may take to listen
_READ_REQUEST_S = 10.0  # a checker drops a client that does not send its request in time


# -- paths -------------------------------------------------------------------------------------


def socket_path(key: str | None = None) -> Path:
    """The socket of the checker for ``key`` (default: this code's) in the cache folder."""
    key = catalog_index.index_key() if key is None else key
    return catalog_index.cache_dir() / f"checker-{key}.sock"


def _key_of(sock: Path) -> str:
    return sock.stem.removeprefix("checker-")


# -- the CLI's side ----------------------------------------------------------------------------


def enabled() -> bool:
    """Whether checks go to a checker: the setting, and a platform with unix sockets and fork."""
    from normfree.quick_settings import value

    return bool(value("checker")) and hasattr(socket, "AF_UNIX") and hasattr(os, "fork")


def check(formula: str, name: str | None = None) -> checks.Checked:
    """What :func:`.checks.check` returns, asked of the checker when the result is not stored.

    The syntax is checked and the stored result read here first (no sympy for either); only a
    formula not checked before goes to the checker, started if none is running. On any failure
    of the checker the formula is checked in this process. Raises
    :class:`~normfree.search_space.errors.ExpressionError` for a rejected formula, either way.
    """
    parse_tree(formula)
    known = checks.stored(formula, name)
    if known is not None:
        return known
    if enabled():
        answered = ask(formula, name)
        if answered is not None:
            return answered
    return checks.check(formula, name)


def ask(formula: str, name: str | None = None, key: str | None = None) -> checks.Checked | None:
    """The checker's result for ``formula`` (starting a checker if none is running), or None
    when no checker answered well. Raises ``ExpressionError`` when the checker rejected it."""
    key = catalog_index.index_key() if key is None else key
    message = {
        "op": "check", "protocol": PROTOCOL, "key": key, "formula": formula, "name": name
    }  # fmt: skip
    return _result(request(socket_path(key), message, start_key=key), formula, name)


def _result(answer: Any, formula: str, name: str | None) -> checks.Checked | None:
    """A well-formed answer to this very request as a result (or the rejection it reports)."""
    if not isinstance(answer, dict):
        return None
    rejected = answer.get("rejected")
    if isinstance(rejected, dict):
        message, position = rejected.get("message"), rejected.get("position")
        if isinstance(message, str) and (position is None or type(position) is int):
            raise ExpressionError(message, position)
        return None
    ok = answer.get("ok")
    if not isinstance(ok, dict) or set(ok) != {"data", "summary", "call"}:
        return None
    data, text = ok["data"], formula.strip()
    if not (
        isinstance(data, dict)
        and isinstance(ok["summary"], str)
        and isinstance(ok["call"], str)
        and data.get("formula") == text
        and data.get("name") == (text if name is None else name)
        and "duplicate_of" in data
    ):
        return None
    return checks.Checked(**ok)


def request(
    sock: Path,
    message: dict[str, Any],
    *,
    start_key: str | None = None,
    timeout: float | None = None,
) -> Any:
    """Send ``message`` to the checker at ``sock`` and return its decoded answer, or None on any
    failure. ``start_key``: start the checker of that key when none listens there."""
    if len(os.fsencode(sock)) > _MAX_SOCKET_PATH:
        return None
    if timeout is None:
        from normfree.quick_settings import value

        timeout = float(value("checker_timeout_seconds"))
    deadline = time.monotonic() + timeout
    try:
        conn = _connect(sock)
        if conn is None and start_key is not None:
            conn = _start(sock, start_key, deadline)
        if conn is None:
            return None
        with conn:
            conn.settimeout(max(0.001, deadline - time.monotonic()))
            conn.sendall(json.dumps(message).encode() + b"\n")
            return json.loads(_read_line(conn, deadline))
    except Exception:  # refused, reset, timed out, garbage: the caller checks in process
        return None


def _connect(sock: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(2.0)
    try:
        conn.connect(os.fspath(sock))
    except OSError:  # no file, a stale file (refused), not a socket
        conn.close()
        return None
    return conn


def _read_line(conn: socket.socket, deadline: float) -> bytes:
    """Bytes up to the first newline; ValueError at end of stream or past :data:`_MAX_LINE`."""
    chunks, size = [], 0
    while True:
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("the connection closed before a whole line")
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > _MAX_LINE:
            raise ValueError("line too long")


def _start(sock: Path, key: str, deadline: float) -> socket.socket | None:
    """Start a checker for ``key`` (``serve`` in a detached child) and connect to it."""
    import subprocess

    private_dir(sock.parent)
    root = os.fspath(Path(__file__).resolve().parents[2])  # the folder that holds this normfree
    boot = f"import sys; sys.path.insert(0, {root!r}); from {__name__} import main; main()"
    with open(sock.with_suffix(".log"), "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", boot, "serve", key],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=sock.parent,
            start_new_session=True,  # no terminal signals from the CLI's shell
        )
    try:
        status = child.wait(timeout=max(0.1, min(_SPAWN_WAIT_S, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return None
    if status not in (LISTENING, ANOTHER):
        return None
    until = min(deadline, time.monotonic() + (0.0 if status == LISTENING else _WINNER_WAIT_S))
    while True:
        conn = _connect(sock)
        if conn is not None or time.monotonic() >= until:
            return conn
        time.sleep(0.02)


def _all_sockets() -> list[Path]:
    return sorted(catalog_index.cache_dir().glob("checker-*.sock"))


def status_all() -> dict[str, Any]:
    """Every checker of the cache folder (any code version) that answers, and stale sockets."""
    running, silent = [], []
    for sock in _all_sockets():
        answer = request(sock, {"op": "status"}, timeout=5.0)
        if isinstance(answer, dict) and isinstance(answer.get("ok"), dict):
            running.append(answer["ok"])
        else:
            silent.append(_key_of(sock))
    return {"cache_dir": str(catalog_index.cache_dir()), "running": running, "silent": silent}


def stop_all() -> dict[str, Any]:
    """Stop every checker of the cache folder (any code version); remove stale socket files.

    ``busy``: a checker that did not answer in 5 s but holds its lock (a long check); left.
    """
    stopped, stale, busy = [], [], []
    for sock in _all_sockets():
        answer = request(sock, {"op": "stop"}, timeout=5.0)
        if isinstance(answer, dict) and isinstance(answer.get("ok"), dict):
            stopped.append({"key": _key_of(sock), "pid": answer["ok"].get("pid")})
        elif _remove_if_stale(sock):
            stale.append(_key_of(sock))
        else:
            busy.append(_key_of(sock))
    return {"stopped": stopped, "stale_removed": stale, "busy": busy}


def _remove_if_stale(sock: Path) -> bool:
    """Remove ``sock`` when no checker holds its lock (then none is serving or starting)."""
    import fcntl

    try:
        with open(sock.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            sock.unlink(missing_ok=True)
            return True
    except OSError:
        return False


# -- the checker's side ------------------------------------------------------------------------


def serve(key: str) -> int:
    """Become the checker for ``key``: lock, bind, listen, fork. Returns (in the CLI's child)
    :data:`LISTENING`, :data:`ANOTHER` (another checker holds the lock) or :data:`WRONG_KEY`
    (this code is not the code of ``key``); the forked checker serves until idle or stopped."""
    import fcntl

    if catalog_index.index_key() != key:
        return WRONG_KEY
    sock = socket_path(key)
    private_dir(sock.parent)
    lock = open(sock.with_suffix(".lock"), "a")  # noqa: SIM115 (held for the checker's life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return ANOTHER
    sock.unlink(missing_ok=True)  # a stale file: its checker is gone, or it would hold the lock
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the socket: this user only
    try:
        listener.bind(os.fspath(sock))
    finally:
        os.umask(umask)
    listener.listen(64)
    if os.fork():
        os._exit(LISTENING)  # the CLI's child: its checker listens (and inherits the lock)
    _Checker(key, sock, listener).run()
    os._exit(0)


class _Checker:
    """The forked checker: loads, then answers requests one at a time until idle or stopped."""

    def __init__(self, key: str, sock: Path, listener: socket.socket) -> None:
        self.key, self.sock, self.listener = key, sock, listener
        self.inode = os.stat(sock).st_ino
        self.started = time.time()
        self.served = 0
        self.closed = False
        self.answered_cpu_s = 0.0  # this process's CPU seconds when its last check was answered
        self.warm_up = list(WARM_UP)

    def run(self) -> None:
        import select
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            from normfree.settings import get_settings

            idle = get_settings().checker_idle_seconds
            from normfree.search_space import candidate, dedup, properties  # noqa: F401

            catalog_index.entries()
            last = time.monotonic()
            while True:
                wait = 0.0 if self.warm_up else max(0.0, last + idle - time.monotonic())
                if not select.select([self.listener], [], [], wait)[0]:
                    if self.warm_up:
                        self._warm_one()
                    elif time.monotonic() >= last + idle:
                        return
                    continue
                conn, _ = self.listener.accept()
                with conn:
                    stop = self._serve_one(conn)
                last = time.monotonic()
                if stop:
                    return
        finally:
            self._close()

    def _close(self) -> None:
        """Stop taking clients: remove the socket file (if still this checker's), answer the
        connections already queued (a client that connected as the checker went idle gets its
        answer, not a reset), then close."""
        import select

        if self.closed:
            return
        self.closed = True
        try:
            if os.stat(self.sock).st_ino == self.inode:
                self.sock.unlink()
        except OSError:
            pass
        self.listener.setblocking(False)
        while select.select([self.listener], [], [], 0)[0]:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:  # the client gave up in between
                break
            conn.setblocking(True)
            with conn:
                self._serve_one(conn)
        self.listener.close()

    def _warm_one(self) -> None:
        from normfree.search_space.candidate import parse

        formula = self.warm_up.pop(0)
        try:
            c = parse(formula)
            c.to_dict()
            catalog_index.duplicate_of(c)
        except Exception as exc:  # a warm-up only saves time; never a reason to stop
            print(f"warm-up {formula!r}: {type(exc).__name__}: {exc}", file=sys.stderr)

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "key": self.key,
            "protocol": PROTOCOL,
            "socket": os.fspath(self.sock),
            "started": self.started,
            "served": self.served,
            "warm": not self.warm_up,
            "cpu_s": time.process_time(),
            "answered_cpu_s": self.answered_cpu_s,
        }

    def _serve_one(self, conn: socket.socket) -> bool:
        """Answer one connection; True when asked to stop."""
        try:
            message = json.loads(_read_line(conn, time.monotonic() + _READ_REQUEST_S))
        except Exception:
            return False
        stop = isinstance(message, dict) and message.get("op") == "stop"
        if stop:
            self._close()  # no new client reaches a checker that is stopping
        answer = self.answer(message)
        try:
            conn.settimeout(_READ_REQUEST_S)
            conn.sendall(json.dumps(answer).encode() + b"\n")
        except OSError:  # the client left
            pass
        if isinstance(message, dict) and message.get("op") == "check":
            self.answered_cpu_s = time.process_time()
        return stop

    def answer(self, message: Any) -> dict[str, Any]:
        op = message.get("op") if isinstance(message, dict) else None
        if op in ("status", "stop"):
            return {"ok": self.status()}
        if op != "check":
            return {"error": f"unknown request {op!r}"}
        if message.get("protocol") != PROTOCOL or message.get("key") != self.key:
            return {"error": f"this checker answers protocol {PROTOCOL}, key {self.key}"}
        formula, name = message.get("formula"), message.get("name")
        if not isinstance(formula, str) or not (name is None or isinstance(name, str)):
            return {"error": "a check needs a formula (text) and a name (text or null)"}
        try:
            result = checks.check(formula, name)
        except ExpressionError as exc:
            return {"rejected": {"message": exc.message, "position": exc.position}}
        except Exception as exc:  # the CLI then checks in its own process, and shows it there
            return {"error": f"{type(exc).__name__}: {exc}"}
        self.served += 1
        return {"ok": result.__dict__}


__all__ = ["ask", "check", "enabled", "request", "serve", "socket_path", "status_all", "stop_all"]


def main(argv: list[str] | None = None) -> None:
    """``serve KEY``: what :func:`_start` runs in its child."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "serve":
        sys.exit("usage: python -m normfree.search_space.checker serve KEY")
    sys.exit(serve(args[1]))


if __name__ == "__main__":
    main()

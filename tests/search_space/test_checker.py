"""The checker process answers what checking in process answers, and every way it can fail
ends in a correct check: real processes, real unix sockets.

Each test gets its own short cache folder under /tmp (a unix socket path has at most 107
bytes) with the catalog index copied in, and stops every checker it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from normfree.search_space import ExpressionError, catalog_index, checker, checks, parse

ROOT = Path(__file__).resolve().parents[2]


def _reference(formula: str, name: str | None = None) -> checks.Checked:
    """The check computed in this process, as the CLI computes it without a checker."""
    c = parse(formula, name=name)
    return checks.Checked(
        data={**c.to_dict(), "duplicate_of": catalog_index.duplicate_of(c)},
        summary=c.properties.summary(),
        call=c.lineage.call,
    )


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope="module")
def index_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The catalog index of this code, built once for the module's caches."""
    folder = tmp_path_factory.mktemp("index")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NORMFREE_KERNEL_CACHE": str(folder / "k")}
    subprocess.run(
        [sys.executable, "-m", "normfree", "candidates", "list", "--json"],
        env=env, cwd=ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (found,) = folder.glob("catalog-index-*.json")
    return found


class Cache:
    """One cache folder, the environment that points at it, and CLI runs against it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pids: set[int] = set()

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "NORMFREE_KERNEL_CACHE": str(self.path / "kernels"),
            "NORMFREE_CHECKER": "true",
            **extra,
        }

    def cli(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "normfree", *args]
        return subprocess.run(
            cmd, env=self.env(**extra), cwd=ROOT, capture_output=True, text=True, timeout=300
        )

    def running(self) -> list[dict]:
        """The checkers that answer in this folder (their pids are killed at the end)."""
        out = json.loads(self.cli("candidates", "checker", "status", "--json").stdout)["running"]
        self.pids.update(c["pid"] for c in out)
        return out

    def sockets(self) -> list[Path]:
        return sorted(self.path.glob("checker-*.sock"))


@pytest.fixture
def cache(index_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cache]:
    """A fresh cache folder (index copied in); this process's settings point at it."""
    folder = Path(tempfile.mkdtemp(prefix="nfc", dir="/tmp"))
    shutil.copy(index_file, folder / index_file.name)
    c = Cache(folder)
    for k, v in c.env().items():
        if k.startswith("NORMFREE_"):
            monkeypatch.setenv(k, v)
    try:
        yield c
    finally:
        for log in folder.glob("*.log"):  # shown with a failure
            print(f"--- {log.name}\n{log.read_text()}")
        c.running()
        c.cli("candidates", "checker", "stop")
        for pid in c.pids:  # stopped ones are gone; SIGSTOPped or hung ones are not
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


CASES = [
    ("u/(1+abs(u))", None),
    ("tanh(u) + 0.1*u", None),
    ("2*sigmoid(2*u) - 1", None),
    ("tanh(2*u)/2", "half"),
    ("-erf(u)", None),
    ("min(max(u, -1), 1)", None),
]


def test_the_checker_answers_exactly_what_the_process_computes(cache: Cache) -> None:
    for formula, name in CASES:
        assert checker.ask(formula, name) == _reference(formula, name)
        assert checks.stored(formula, name) == _reference(formula, name)  # stored by the checker
    for formula in ("log(u)", "1/u", "sqrt(150 - abs(u))"):
        with pytest.raises(ExpressionError) as via_checker:
            checker.ask(formula)
        with pytest.raises(ExpressionError) as here:
            parse(formula)
        assert (via_checker.value.message, via_checker.value.position) == (
            here.value.message,
            here.value.position,
        )
    (one,) = cache.running()
    assert one["served"] == len(CASES) and one["key"] == catalog_index.index_key()


def test_the_cli_prints_the_same_with_and_without_the_checker(cache: Cache) -> None:
    for args in (("tanh(u) + 0.1*u", "--json"), ("u/(3+abs(u))",), ("log(u)", "--json")):
        via = cache.cli("candidates", "check", *args)
        for stored in checks.stored_path(args[0]).parent.glob("*.json"):
            stored.unlink()  # the in-process run computes it again
        here = cache.cli("candidates", "check", *args, NORMFREE_CHECKER="false")
        assert (via.returncode, via.stdout) == (here.returncode, here.stdout)
    assert cache.running()[0]["served"] == 2


def test_a_checker_killed_mid_request_leaves_a_correct_check(cache: Cache) -> None:
    checker.ask("atan(u)")  # start one
    (first,) = cache.running()
    os.kill(first["pid"], signal.SIGSTOP)  # it accepts (the kernel queues) but never answers
    client = subprocess.Popen(
        [sys.executable, "-m", "normfree", "candidates", "check", "tanh(u) + 0.1*u", "--json"],
        env=cache.env(), cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    # the client has connected: /proc/net/unix lists the queued connection under the path too
    path = str(checker.socket_path())

    def queued() -> bool:
        lines = Path("/proc/net/unix").read_text().splitlines()
        return sum(line.endswith(path) for line in lines) > 1

    assert _wait(queued, timeout=60)
    os.kill(first["pid"], signal.SIGKILL)
    out, _ = client.communicate(timeout=300)
    assert client.returncode == 0
    assert json.loads(out) == {**_reference("tanh(u) + 0.1*u").data}
    # checked in the client's own process: no new checker, the dead one's socket file is left
    assert cache.running() == [] and len(cache.sockets()) == 1


def test_a_stale_socket_file_is_replaced_by_a_new_checker(cache: Cache) -> None:
    checker.ask("atan(u)")
    (first,) = cache.running()
    os.kill(first["pid"], signal.SIGKILL)
    (sock,) = cache.sockets()  # left behind
    # stale once it refuses: a killed process may still accept for a few ms as it exits (the
    # client then checks in process, the case of the test above)
    assert _wait(lambda: checker._connect(sock) is None)
    assert checker.ask("atan(2*u)") == _reference("atan(2*u)")
    (second,) = cache.running()
    assert second["pid"] != first["pid"] and second["served"] == 1
    # not even a socket: a plain file where the socket should be
    cache.cli("candidates", "checker", "stop")
    sock.write_text("not a socket")
    assert checker.ask("atan(3*u)") == _reference("atan(3*u)")
    assert [c["served"] for c in cache.running()] == [1]


def test_a_checker_of_another_code_version_is_never_used(cache: Cache, tmp_path: Path) -> None:
    checker.ask("atan(u)")
    (mine,) = cache.running()
    other = "0" * 16
    # it refuses a request for another key
    answer = checker.request(
        checker.socket_path(),
        {"op": "check", "protocol": 1, "key": other, "formula": "u", "name": None},
    )
    assert "error" in answer
    # a checker is never started for a key that is not its code's
    assert checker.ask("atan(4*u)", key=other) is None
    assert not checker.socket_path(other).exists()
    # a changed copy of the code: its CLI starts its own checker and answers correctly
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "normfree", copy / "normfree")
    with open(copy / "normfree" / "search_space" / "checks.py", "a") as f:
        f.write("\n# a change\n")
    env = {**cache.env(), "PYTHONPATH": str(copy)}
    key = subprocess.run(
        [sys.executable, "-c", "from normfree.search_space import catalog_index as c;"
         "print(c.index_key(), c.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert key[0] != mine["key"] and key[1].startswith(str(copy))
    index = next(cache.path.glob("catalog-index-*.json"))
    shutil.copy(index, cache.path / f"catalog-index-{key[0]}.json")  # same content, new key
    out = subprocess.run(
        [sys.executable, "-m", "normfree", "candidates", "check", "atan(5*u)", "--json"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    assert json.loads(out) == _reference("atan(5*u)").data
    running = {c["key"]: c for c in cache.running()}
    assert set(running) == {mine["key"], key[0]}
    assert running[mine["key"]]["served"] == 1 and running[key[0]]["served"] == 1


def test_the_checker_exits_when_idle(cache: Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMFREE_CHECKER_IDLE_SECONDS", "1")
    checker.ask("atan(u)")
    (one,) = cache.running()
    assert _wait(lambda: not _alive(one["pid"]))
    assert cache.sockets() == []


def test_two_clients_starting_at_once_share_one_checker(cache: Cache) -> None:
    formulas = ["atan(u)/2", "atan(u)/3", "atan(u)/5"]
    cmd = [sys.executable, "-m", "normfree", "candidates", "check"]
    env = cache.env()
    clients = [
        subprocess.Popen([*cmd, f, "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for f in formulas
    ]
    outs = [json.loads(c.communicate(timeout=300)[0]) for c in clients]
    assert outs == [_reference(f).data for f in formulas]
    (one,) = cache.running()
    assert one["served"] == 3


class _FakeChecker:
    """A listener at the checker's socket that answers ``reply(request)`` (None: silence)."""

    def __init__(self, path: Path, reply: Callable[[bytes], bytes | None]) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.fspath(path))
        self.listener.listen(4)
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            request = conn.recv(65536)
            answer = self.reply(request)
            if answer is None:
                time.sleep(5)
            else:
                conn.sendall(answer)
            conn.close()

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept
        self.listener.close()


def _wrong_formula(request: bytes) -> bytes:
    ok = _reference("atan(u)").__dict__  # well-formed, but not this request's formula
    return json.dumps({"ok": ok}).encode() + b"\n"


@pytest.mark.parametrize(
    "reply",
    [
        lambda _: b"garbage\n",
        lambda _: b'{"ok": {"data": 1}}\n',
        lambda _: b'{"rejected": {"message": 3}}\n',
        lambda _: b'{"ok": ',  # cut off
        _wrong_formula,
        lambda _: None,  # never answers: the timeout
    ],
    ids=["garbage", "malformed", "bad-rejection", "cut-off", "wrong-formula", "silent"],
)
def test_a_bad_answer_falls_back_to_checking_in_process(
    cache: Cache, monkeypatch: pytest.MonkeyPatch, reply: Callable[[bytes], bytes | None]
) -> None:
    monkeypatch.setenv("NORMFREE_CHECKER_TIMEOUT_SECONDS", "0.5")
    fake = _FakeChecker(checker.socket_path(), reply)
    try:
        t0 = time.monotonic()
        assert checker.ask("tanh(u)/3") is None
        assert time.monotonic() - t0 < 5
        assert checker.check("tanh(u)/3") == _reference("tanh(u)/3")
    finally:
        fake.close()
    assert cache.running() == []  # the fake's socket was there: no checker was started


def test_a_checker_that_is_off_is_never_started(cache: Cache) -> None:
    out = cache.cli("candidates", "check", "atan(u)/7", "--json", NORMFREE_CHECKER="false")
    assert json.loads(out.stdout) == _reference("atan(u)/7").data
    assert cache.sockets() == []


def test_serve_refuses_a_key_that_is_not_its_code(cache: Cache) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from normfree.search_space.checker import main; main()",
         "serve", "0" * 16],
        env=cache.env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == checker.WRONG_KEY and cache.sockets() == []

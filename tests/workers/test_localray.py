"""The embedded Ray cluster listens on loopback only, keeps its files private and leaves no
process behind a SIGTERM.

A real local Ray, started by :class:`RayExecutor` in a child process exactly as ``normfree
serve`` and the study commands start it; the listening sockets come from ``/proc/net/tcp{,6}``
and the processes from ``/proc`` (Linux only, like the deployment).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from normfree.workers.localray import alive, descendants

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

HOLD = """
import sys, time
from normfree.settings import Settings
from normfree.workers.execution import RayExecutor
RayExecutor(Settings(), num_cpus=1).start()
import ray
print("READY", ray._private.worker._global_node.get_session_dir_path(), flush=True)
time.sleep(600)
"""


def _hex_addr(text: str) -> str:
    """/proc/net/tcp's little-endian hex address as dotted or IPv6 text."""
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
    full = b"".join(words)
    if full[:12] == b"\x00" * 10 + b"\xff\xff":  # IPv4-mapped
        return "::ffff:" + ".".join(str(b) for b in full[12:])
    return ":".join(full[i : i + 2].hex() for i in range(0, 16, 2))


def listening(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets in LISTEN state owned by ``pids``."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            for fd in fd_dir.iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                addr, _port = cols[1].split(":")
                out.append(_hex_addr(addr))
    return out


def _assert_private(session: Path) -> None:
    """Issue 28, 7: the cluster's folders (Ray makes them 0777) and sockets are this user's
    only, inside a 0700 root that only this user may enter."""
    from normfree.workers.localray import private_temp_root

    root = private_temp_root()
    assert session.is_relative_to(root), (session, root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (session / "sockets").is_dir()
    shared = []
    for folder, subfolders, files in os.walk(session):
        for name in (".", *subfolders, *files):
            path = Path(folder) / name
            if not path.is_symlink() and path.lstat().st_mode & 0o077:
                shared.append(f"{path.relative_to(session)} {oct(path.lstat().st_mode)}")
    assert not shared, shared[:20]


def test_embedded_ray_is_loopback_only_and_gone_after_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("READY"), line
        time.sleep(2)  # the agents start just after ray.init returns
        _assert_private(Path(line.split()[1]))
        tree = descendants(proc.pid) | {proc.pid}
        assert len(tree) >= 4, "expected the GCS, raylet and agents below the driver"
        addrs = listening(tree)
        assert addrs, "the cluster listens somewhere"
        loopback = ("127.0.0.1", "::ffff:127.0.0.1", "0000:0000:0000:0000:0000:0000:0000:0001")
        assert all(a in loopback for a in addrs), addrs
        tree = descendants(proc.pid) | {proc.pid}
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(p) for p in tree):
            time.sleep(0.2)
        left = sorted(p for p in tree if alive(p))
        assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()

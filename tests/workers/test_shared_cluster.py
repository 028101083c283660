"""A study command joins the local cluster a running server keeps instead of starting its own
(issue 27, 3): a real local Ray held by a process that advertises it as ``normfree serve``
does, and the real command in a process of its own."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from normfree.settings import Settings
from normfree.workers import localray

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")

ROOT = Path(__file__).resolve().parents[2]
# What serve's study runner does at start (workers.lifecycle: RayExecutor(advertise=True)).
HOLD = """
import time
from normfree.settings import Settings
from normfree.workers.execution import RayExecutor
from normfree.workers import localray
ex = RayExecutor(Settings(), num_cpus=1, advertise=True).start()
print("READY", localray.address(), ex.cluster, flush=True)
time.sleep(600)
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def _core(pid: int) -> set[int]:
    """The GCS server and raylet below ``pid``."""
    out = set()
    for p in localray.descendants(pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if cmd.endswith((b"gcs_server", b"raylet")):
            out.add(p)
    return out


def test_study_command_joins_the_advertised_cluster(tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    holder = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(NORMFREE_SHARE_LOCAL_CLUSTER="true"),
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().decode().split()
        assert line[:1] == ["READY"] and line[2] == "started", line
        address = line[1]
        shared = localray.running()
        assert shared is not None and shared.address == address
        record = next(localray.private_temp_root().glob("cluster-*.json"))
        assert stat.S_IMODE(record.stat().st_mode) & 0o077 == 0  # this user's only
        core = _core(holder.pid)  # workers come and go; the GCS and the raylet are the cluster
        assert len(core) == 2, core
        db = f"sqlite:///{tmp_path / 'cli.db'}"
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "normfree", "study", "property", "--transform", "shift_h",
             "--functions", "erf", "--values", "0", "--proxy", "vit-tiny", "--seeds", "1",
             "--epochs", "1", "--baselines", "", "--json", "--db", db],
            capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        run = json.loads(out.stdout)["run"]
        assert run["cluster"] == f"joined {address}", run
        assert run["status"] == "complete" and run["counts"]["COMPLETE"] == 1
        # the command's exit left the server's cluster running, whole, and still advertised
        assert _core(holder.pid) == core, "the joined cluster lost its GCS or raylet"
        again = localray.running()
        assert again is not None and again.address == address
        # a refused study (joined meanwhile, on a thread) says why and leaves the cluster up
        bad = subprocess.run(
            [sys.executable, "-m", "normfree", "study", "property", "--transform", "shift_h",
             "--functions", "tahn", "--values", "0", "--proxy", "vit-tiny", "--seeds", "1",
             "--baselines", "", "--json", "--db", db],
            capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path,
        )  # fmt: skip
        assert bad.returncode == 2, bad.stderr[-3000:]
        assert "tanh" in json.loads(bad.stdout)["error"]
        assert _core(holder.pid) == core and localray.running() is not None
        assert time.monotonic() - t0 < 300
        # off: the command starts its own (not run here: covered by every other CLI test)
        off = Settings(share_local_cluster=False)
        from normfree.workers.execution import RayExecutor

        assert RayExecutor(off)._join_shared({}) is False
    finally:
        holder.terminate()
        holder.wait(60)


def test_a_stale_record_is_never_joined(tmp_path: Path) -> None:
    """A record whose owner is gone (SIGKILLed server: no chance to remove it) is ignored and
    removed; so is one naming a live process that is not its owner (a reused pid)."""
    path = localray._record_path()
    if path.exists():
        pytest.skip("a server of this checkout is running on this host")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    try:
        for pid, started in ((int(dead.stdout), 1), (os.getppid(), -1)):
            path.write_text(
                json.dumps({"address": "127.0.0.1:1", "pid": pid, "start_time": started})
            )
            assert localray.running() is None
            assert not path.exists()
    finally:
        path.unlink(missing_ok=True)


def test_serve_keeps_an_advertised_cluster_and_takes_it_away_on_sigterm(tmp_path: Path) -> None:
    """``normfree serve`` starts its Ray at once and advertises it; SIGTERM withdraws the
    record and stops the whole cluster (nothing left for a command to join or to leak)."""
    import signal

    from normfree.testing.live import live_server_process

    if localray._record_path().exists():
        pytest.skip("a server of this checkout is running on this host")
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    with live_server_process(url, env={"NORMFREE_SHARE_LOCAL_CLUSTER": "true"}) as (_, proc):
        deadline = time.monotonic() + 180
        while (shared := localray.running()) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "no cluster advertised"
            time.sleep(0.2)
        core = _core(proc.pid)
        assert len(core) == 2, core
        tree = localray.descendants(proc.pid) | {proc.pid}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    assert localray.running() is None and not localray._record_path().exists()
    deadline = time.monotonic() + 30
    while any(localray.alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if localray.alive(p)], shared

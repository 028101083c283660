"""``normfree serve`` and ``normfree study run`` leave no process behind on SIGTERM or Ctrl-C.

Real commands in their own process, each with its own embedded Ray, driving a real study on the
smoke preset. The test lists the command's whole process tree (``/proc``) once Ray and a trial
are running, sends the signal, and checks: the documented exit status (serve 0; study run 128 +
the signal: 143 / 130), no "Aborted" (neither SIGABRT nor click's "Aborted!"), every process of
the tree gone, and no trial left RUNNING under a lease of the stopped driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from normfree.testing.live import CLI, cli_env, free_port, run_cli, wait_healthy
from normfree.workers.localray import alive, descendants

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]
# Long enough that trials are still running when the signal comes (vit-tiny: ~1 s an epoch).
STUDY = {
    "kind": "property",
    "proxy": "vit-tiny",
    "functions": ["erf"],
    "transform": "shift_v",
    "values": [0, 0.25, 0.5, 0.75, 1.0, 1.25],
    "seeds": 1,
    "epochs": 30,
}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
    except OSError:
        return "?"


def _running_trials(database_url: str, study_id: int) -> int:
    from normfree.storage import Database, Repository

    db = Database(database_url)
    try:
        return Repository(db).study_progress(study_id)["counts"].get("RUNNING", 0)
    finally:
        db.dispose()


def _wait_for_ray_and_a_trial(proc: subprocess.Popen, database_url: str, study_id: int) -> set:
    """The command's process tree once Ray's agents run and a trial of the study is RUNNING."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the command ended early: {proc.communicate()}"
        tree = descendants(proc.pid)
        names = " ".join(_cmdline(p) for p in tree)
        if (
            "raylet" in names
            and "DashboardAgent" in names
            and "RuntimeEnvAgent" in names
            and _running_trials(database_url, study_id) > 0
        ):
            time.sleep(1.0)  # let the trial's worker settle into training
            return descendants(proc.pid)
        time.sleep(0.5)
    raise AssertionError("Ray and a running trial never showed up under the command")


def _stop_and_check(proc: subprocess.Popen, sig: int, tree: set[int]) -> tuple[int, str]:
    """Send ``sig``; the exit status and stderr once every process of ``tree`` is gone."""
    assert len(tree) >= 5, [_cmdline(p) for p in tree]  # GCS, raylet, agents, a worker ...
    names = {p: _cmdline(p) for p in tree}  # read now: a process being killed shows none
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the command did not end within 120 s of the signal") from None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(p) for p in tree):
        time.sleep(0.2)
    left = sorted(p for p in tree if alive(p))
    for p in left:  # never leave them to the next test, whatever the outcome
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, f"left behind: {[names[p] for p in left]}"
    assert "Aborted" not in err, err[-2000:]
    assert "SIGTERM received" not in err, err[-2000:]  # Ray's C-level failure handler
    return proc.returncode, err


@pytest.mark.parametrize("sig", SIGNALS)
def test_serve_stops_whole_and_cleanly(tmp_path: Path, sig: int) -> None:
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    token = json.loads(run_cli(["token", "create", "sig", "--json"], url).stdout)["token"]
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=cli_env(url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}/"
        assert wait_healthy(base, proc, 120, poll_s=0.3), "serve did not come up"
        made = httpx.post(
            base + "api/studies",
            json=STUDY,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        tree = _wait_for_ray_and_a_trial(proc, url, sid) | {proc.pid}
        code, err = _stop_and_check(proc, sig, tree)
        assert code == 0, err[-2000:]
        # the stopped driver handed its running trials back: nothing waits for a lease to lapse
        assert _running_trials(url, sid) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig", SIGNALS)
def test_study_run_stops_whole_and_says_how_to_carry_on(tmp_path: Path, sig: int) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    # fmt: off
    made = run_cli(
        [
            "study", "property", "--proxy", "vit-tiny", "--functions", "erf",
            "--transform", "shift_v", "--values", ",".join(str(v) for v in STUDY["values"]),
            "--baselines", "", "--seeds", "1", "--epochs", str(STUDY["epochs"]),
            "--detach", "--json",
        ],
        url,
    )
    # fmt: on
    assert made.returncode == 0, made.stderr
    sid = json.loads(made.stdout.strip().splitlines()[-1])["study_id"]
    proc = subprocess.Popen(
        [*CLI, "study", "run", str(sid)],
        env=cli_env(url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tree = _wait_for_ray_and_a_trial(proc, url, sid) | {proc.pid}
        code, err = _stop_and_check(proc, sig, tree)
        assert code == 128 + sig, err[-2000:]
        name = signal.Signals(sig).name
        assert f"study {sid} interrupted by {name}" in err, err[-2000:]
        assert f"normfree study run {sid}" in err
        assert _running_trials(url, sid) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_whose_parent_has_exited_stops_whole_and_cleanly(tmp_path: Path) -> None:
    """``nohup normfree serve &`` from a shell that then exits (or a service manager): the
    server's parent is gone, and SIGTERM still ends it cleanly with its warm cluster. Ray's GCS
    and raylet die with the *thread* that started them (PR_SET_PDEATHSIG); ended before Ray's
    shutdown, that thread took the cluster down under the driver, which then exited the server
    with status 1 mid-shutdown and left Ray's agents running."""
    url = f"sqlite:///{tmp_path / 'orphan.db'}"
    port = free_port()
    log = tmp_path / "serve.log"
    serve = " ".join(
        [*(f"'{a}'" for a in CLI), "serve", "--host", "127.0.0.1", "--port", str(port)]
    )
    # the shell starts the server in the background, prints its pid and exits at once
    env = cli_env(url, NORMFREE_SHARE_LOCAL_CLUSTER="true")
    launched = subprocess.run(
        ["sh", "-c", f"{serve} > '{log}' 2>&1 & echo $!"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    pid = int(launched.stdout.strip())
    try:
        deadline = time.monotonic() + 240
        tree: set[int] = set()
        while time.monotonic() < deadline:  # the server up, its cluster warm (at its start)
            assert alive(pid), log.read_text()[-3000:]
            tree = descendants(pid)
            names = " ".join(_cmdline(p) for p in tree)
            if "raylet" in names and "DashboardAgent" in names and "RuntimeEnvAgent" in names:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the server's cluster never came up: {log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=30)
        tree = descendants(pid) | {pid}
        names = {p: _cmdline(p) for p in tree}
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(alive(p) for p in tree):
            time.sleep(0.2)
        left = sorted(p for p in tree if alive(p))
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        assert not left, f"left behind: {[names[p] for p in left]}"
        text = log.read_text()
        assert "Application shutdown complete" in text, text[-3000:]
        assert "Raylet is dead" not in text, text[-3000:]
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)

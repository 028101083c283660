"""An interrupted prescreen is re-queued at start by exactly one server process (issue 28,
point 4). Every process of ``serve --workers N`` re-queues at its start; two real processes
over one database start together here, each counting the prescreens it runs, and between them
the stored pending prescreen runs once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from normfree.search_space import parse
from normfree.storage import Database, Repository

# A server process: the real app and prescreen, with the prescreen runs counted on the way.
CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from fastapi.testclient import TestClient
    from normfree.api import create_app, prescreens, services
    from normfree.settings import Settings

    url, name = sys.argv[1], sys.argv[2]
    runs = []
    real = services.run_prescreen_uncached

    def counted(cand):
        runs.append(cand.name)
        return real(cand)

    services.run_prescreen_uncached = counted
    app = create_app(Settings(database_url=url), run_studies=False, prescreen=True)
    with TestClient(app):
        for t in threading.enumerate():
            if t.name == "normfree-prescreen-requeue":
                t.join(timeout=120)
        repo = app.state.services.repo
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if (repo.get_candidate(name)["prescreen"] or {}).get("status") != "pending":
                break
            time.sleep(0.2)
        while prescreens._PENDING and time.monotonic() < deadline:
            time.sleep(0.2)
        print(json.dumps({"runs": runs, "prescreen": repo.get_candidate(name)["prescreen"]}))
    """
)


def _dead_claimant() -> str:
    """The claim of a server killed mid-prescreen: this host, a pid no process has now."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return f"{socket.gethostname()}:{int(done.stdout)}:killed"


@pytest.mark.parametrize("claimant", [None, "dead"])
def test_two_starting_processes_run_an_interrupted_prescreen_once(
    tmp_path: Path, claimant: str | None
) -> None:
    """``None``: a row left pending before claims existed; ``dead``: one whose claimant was
    killed (re-queued at once, not a lease later)."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    db = Database(url)
    db.migrate()
    name = "interrupted"
    Repository(db).claim_candidate(
        parse("u/(11+u**2)", name=name),
        submitter="t",
        prescreen={"status": "pending", "ok": False},
        prescreen_claimant=_dead_claimant() if claimant else None,
    )
    db.dispose()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    runs = [n for o in outs for n in o["runs"]]
    assert runs == [name], outs
    assert all(o["prescreen"]["status"] == "done" for o in outs), outs

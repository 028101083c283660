"""Live progress over REST, on the study page and in ``normfree study status`` (issue 27, 2):
trials per status, throughput, ETA and the best arm; the page polls conditionally (ETag); the
state badge never disagrees with the counts beside it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from normfree.testing.seeding import SPEC, synthetic_result
from tests.api.conftest import Api


def _start(api: Api) -> int:
    """A property study as the engine plans it, marked running (its driver's first write)."""
    from normfree.workers.driver import create_study

    study_id = create_study(SPEC, settings=api.settings)
    api.repo.set_study_status(study_id, "running")
    return study_id


def _finish(api: Api, study_id: int, n: int | None = None, *, fail: bool = False) -> int:
    """Lease and finish ``n`` trials (all when None) as a worker would; how many."""
    done = 0
    while n is None or done < n:
        leased = api.repo.lease_next(study_id, "test-worker", 600.0)
        if leased is None:
            break
        ax = leased.axis_values
        if fail:
            assert api.repo.fail_trial(leased.id, "test-worker", leased.attempt, "boom")
        else:
            result = synthetic_result(
                str(ax["function"]), ax.get("shift_h"), int(ax["seed"]), False
            )
            assert api.repo.finish_trial(leased.id, "test-worker", leased.attempt, result)
        done += 1
    return done


def _summary(api: Api, study_id: int, **headers: str) -> Any:
    return api.client.get(f"/api/studies/{study_id}?trials=false", headers=headers)


def test_progress_has_throughput_eta_and_best_arm(api: Api) -> None:
    study_id = _start(api)
    _finish(api, study_id, 5)
    body = _summary(api, study_id).json()
    p = body["progress"]
    assert body["status"] == "running" and p["state"] == "running"
    assert p["complete"] == 5 and p["finished"] == 5 and p["waiting"] == p["total"] - 5
    assert p["throughput_per_min"] > 0 and p["window_trials"] == 5
    assert p["last_finished_at"] and p["eta_at"] and p["eta_s"] > 0
    best = p["best"]
    assert best["n"] >= 1 and best["objective"] == "val_acc"
    # the best arm is the best cell's mean, as the study's cells show it
    cells = {c["label"]: c for c in body["cells"]}
    assert cells[best["label"]]["mean"] == best["mean"]
    assert best["mean"] == max(c["mean"] for c in body["cells"] if c["mean"] is not None)
    # the documented full answer carries the same progress
    assert api.client.get(f"/api/studies/{study_id}").json()["progress"] == p


def test_conditional_polling_answers_304_until_a_trial_finishes(api: Api) -> None:
    study_id = _start(api)
    _finish(api, study_id, 2)
    first = _summary(api, study_id)
    etag = first.headers["ETag"]
    again = _summary(api, study_id, **{"If-None-Match": etag})
    assert again.status_code == 304 and not again.content
    _finish(api, study_id, 1)
    moved = _summary(api, study_id, **{"If-None-Match": etag})
    assert moved.status_code == 200 and moved.headers["ETag"] != etag
    assert moved.json()["progress"]["finished"] == 3


def _page_state(api: Api, study_id: int) -> tuple[str, str]:
    html = api.client.get(f"/studies/{study_id}").text
    badge = re.search(r'id="study-state"><span class="badge [a-z]+">([a-z]+)</span>', html)
    text = re.search(r'id="progress-text">([a-z]+): (\d+)/(\d+) finished', html)
    assert badge and text, html[:2000]
    return badge.group(1), f"{text.group(1)}: {text.group(2)}/{text.group(3)}"


def test_badge_never_says_running_beside_everything_finished(api: Api) -> None:
    """Every trial finished, the stored status still ``running`` (the driver writes the outcome
    a moment later, or died before it could): the API's state, the page's badge and the CLI
    show the outcome, never "running" beside "14/14 finished"."""
    study_id = _start(api)
    _finish(api, study_id, 3)
    assert _page_state(api, study_id)[0] == "running"
    n = 3 + _finish(api, study_id)
    body = _summary(api, study_id).json()
    assert body["status"] == "running"  # as stored
    assert body["progress"]["state"] == "complete"
    assert body["progress"]["finished"] == body["progress"]["total"] == n
    assert body["progress"]["eta_at"] is None
    badge, text = _page_state(api, study_id)
    assert badge == "complete" and text.startswith(f"complete: {n}/{n}")
    listed = api.client.get("/studies").text
    assert 'badge no">running' not in listed
    out = subprocess.run(
        [sys.executable, "-m", "normfree", "study", "status", str(study_id), "--json",
         "--db", api.settings.database_url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    cli = json.loads(out.stdout)
    assert cli["state"] == "complete" and cli["finished"] == n
    assert cli["best"]["label"] == body["progress"]["best"]["label"]
    listed = subprocess.run(
        [sys.executable, "-m", "normfree", "study", "list", "--db", api.settings.database_url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    line = next(x for x in listed.stdout.splitlines() if x.startswith(f"{study_id}\t"))
    assert "\tcomplete\t" in line and "running" not in line.split("\t")[3], line


def test_nothing_trained_shows_failed(api: Api) -> None:
    study_id = _start(api)
    _finish(api, study_id, fail=True)
    body = _summary(api, study_id).json()
    assert body["progress"]["state"] == "failed" and body["progress"]["best"] is None
    assert _page_state(api, study_id)[0] == "failed"

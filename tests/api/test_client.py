"""``normfree.Client`` against a real app (real uvicorn and HTTP for one test, the app's test
client for the rest) over a real database, and ``normfree.record_trial`` from a notebook."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import pandas as pd
import pytest

import normfree
from normfree import Client, record_trial
from normfree.api import create_app
from normfree.client import ClientError
from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.testing.live import app_server
from normfree.testing.seeding import Seeded, synthetic_result
from tests.api.conftest import Api


def _close(a: object, b: object) -> bool:
    if b is None:
        return a is None or (isinstance(a, float) and math.isnan(a))
    return math.isclose(float(a), float(b), abs_tol=1e-12)  # type: ignore[arg-type]


def test_top_level_names_are_lazy() -> None:
    assert normfree.Client is Client and normfree.record_trial is record_trial
    with pytest.raises(AttributeError):
        normfree.NoSuchThing  # noqa: B018


def test_data_frames_over_real_http(api: Api, seeded: Seeded) -> None:
    """A server on a loopback port; the client's frames hold the JSON's numbers."""
    app = create_app(api.settings, run_studies=False)
    with app_server(app) as url, Client(url) as nf:
        sid = seeded.study_id
        trials = nf.to_dataframe("trials", sid)
        listed = nf.trials(sid)
        assert list(trials["id"]) == [t["id"] for t in listed] == seeded.trial_ids
        for row, t in zip(trials.to_dict("records"), listed, strict=True):
            assert _close(row["objective_value"], t["objective_value"])
        first = nf.trial(seeded.trial_ids[0])
        assert trials["metrics.val_acc"][0] == first["metrics"]["val_acc"]
        assert trials["config.norm.name"][0] == first["config"]["norm"]["name"]

        arms = nf.to_dataframe("arms", sid)
        assert list(arms["mean"].fillna(-1)) == [
            -1 if c["mean"] is None else c["mean"] for c in nf.arms(sid)
        ]
        board = nf.leaderboard("vit-tiny")
        frame = nf.to_dataframe("leaderboard", "vit-tiny", study_id=sid)
        assert list(frame["candidate"]) == [r["candidate"] for r in board["rows"]]
        for row, arm in zip(frame.to_dict("records"), board["rows"], strict=True):
            assert _close(row["ci_low"], arm["ci_low"]) and row["n"] == arm["n"]

        # a formula holding "/" and a name percent-encoded once (uvicorn decodes once)
        assert nf.candidate("u/(1+abs(u))")["canonical"] == "u/(Abs(u) + 1)"
        assert nf.candidate("erf")["name"] == "erf"
        with pytest.raises(ClientError) as err:
            nf.candidate("u/(1+")
        assert err.value.status == 422

        with pytest.raises(ClientError) as err:
            nf.study(999)
        assert err.value.status == 404 and "no study 999" in err.value.message
        with pytest.raises(ValueError, match="unknown table"):
            nf.export("studies", sid)  # type: ignore[arg-type]


def test_csv_frames_without_pyarrow(
    api: Api, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    nf = Client(http=api.client)
    typed = nf.to_dataframe("arms", seeded.study_id)
    # as if pyarrow were not installed here (pandas, imported with it, still reads CSV)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    plain = nf.to_dataframe("arms", seeded.study_id)
    assert list(plain["label"]) == list(typed["label"])
    assert list(plain["n"]) == list(typed["n"])


def test_create_and_wait_with_progress(api: Api) -> None:
    """A study made through the client; a worker (this test) finishes it while wait() polls."""
    nf = Client(token=api.token, http=api.client)
    study = nf.create_study(kind="options", proxy="vit-tiny", functions=["erf"], seeds=2,
                            options={"depth": [2]}, epochs=1)  # fmt: skip
    sid = study["id"]
    assert study["status"] in ("pending", "running")
    codes: list[int] = []
    api.client.event_hooks["response"].append(lambda r: codes.append(r.status_code))
    with pytest.raises(TimeoutError):
        nf.wait(sid, timeout=0.3, poll=0.1, progress=False)
    assert codes[0] == 200 and 304 in codes[1:]  # an unchanged study: conditional polls
    api.client.event_hooks["response"].clear()

    def work() -> None:
        time.sleep(0.3)
        repo = api.repo
        repo.set_study_status(sid, "running")
        while (lease := repo.lease_next(sid, "client-test", 60)) is not None:
            result = synthetic_result("erf", None, lease.config.seed, diverged=False)
            assert repo.finish_trial(lease.id, "client-test", lease.attempt, result)
        repo.set_study_status(sid, "complete")

    seen: list[dict] = []
    worker = threading.Thread(target=work)
    worker.start()
    try:
        done = nf.wait(sid, timeout=60, poll=0.1, progress=seen.append)
    finally:
        worker.join()
    assert done["progress"]["state"] == "complete" and done["progress"]["finished"] == 2
    assert seen[0]["progress"]["finished"] < 2 and seen[-1] == done
    assert len(nf.to_dataframe("trials", sid)) == 2
    with pytest.raises(ClientError) as err:
        Client(http=api.client).create_study(kind="options", proxy="vit-tiny")
    assert err.value.status == 401


def _config(seed: int) -> TrialConfig:
    return TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=seed, epochs=1)


def test_record_trial_from_a_notebook(api: Api) -> None:
    """Recorded trials show in the API as a study's trials, arms and leaderboard rows."""
    db = api.settings.database_url
    first = record_trial(synthetic_result("erf", None, 0, False), _config(0), db=db)
    sid = first["study_id"]
    again = record_trial(synthetic_result("erf", None, 1, False), _config(1), db=db, study_id=sid)
    assert again["study_id"] == sid and again["trial_id"] != first["trial_id"]

    nf = Client(http=api.client)
    assert nf.study(sid)["status"] == "complete"
    assert nf.wait(sid, timeout=5)["status"] == "complete"  # with its progress bar
    stored = nf.trial(first["trial_id"])
    result = synthetic_result("erf", None, 0, False)
    assert stored["status"] == "COMPLETE" and stored["metrics"] == result.metrics
    assert len(stored["curves"]) == len(result.curves)
    (arm,) = nf.arms(sid)
    assert arm["function"] == "erf" and arm["n"] == 2
    board = nf.leaderboard("vit-tiny", study_id=sid)
    assert [r["n"] for r in board["rows"]] == [2]

    with pytest.raises(ValueError, match="already holds this config"):
        record_trial(result, _config(0), db=db, study_id=sid)
    other = api.repo.create_study(StudySpec(kind="options", proxy="vit-tiny", name="driven"))
    with pytest.raises(ValueError, match="not made by record_trial"):
        record_trial(result, _config(2), db=db, study_id=other)
    with pytest.raises(ValueError, match="no study"):
        record_trial(result, _config(2), db=db, study_id=10_000)
    with pytest.raises(TypeError):
        record_trial({"status": "complete"}, _config(2), db=db)  # type: ignore[arg-type]


@pytest.mark.slow
def test_record_a_real_train_trial(make_api: Callable[..., Api], sqlite_database_url: str) -> None:
    """The notebook path whole: ``train_trial`` on the tiny ViT, then one call to store it."""
    import torch

    from normfree.workers.trainer import train_trial

    torch.set_num_threads(1)
    api = make_api(sqlite_database_url)
    config = TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=0, epochs=1)
    result: TrialResult = train_trial(config)
    ids = normfree.record_trial(result, config, db=api.settings.database_url, name="notebook")
    frame = Client(http=api.client).to_dataframe("trials", ids["study_id"])
    assert list(frame["id"]) == [ids["trial_id"]]
    assert _close(frame["objective_value"][0], result.value)
    assert frame["diag.layers"][0] > 0
    # the training monitor's maxima, named in storage without importing torch
    from normfree.storage.exports import TRAINING_MAXIMA
    from normfree.workers.diagnostics import MONITOR_KEYS

    assert set(TRAINING_MAXIMA) == {*MONITOR_KEYS, "train_nonfinite"}
    detail = Client(http=api.client).trial(ids["trial_id"])["diagnostics"]
    most = max(d["extra"]["train_absmax"] for d in detail if "train_absmax" in d["extra"])
    assert _close(frame["diag.train_absmax_max"][0], most)
    assert isinstance(frame, pd.DataFrame)

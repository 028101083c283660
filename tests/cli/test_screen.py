"""``normfree screen FUNCTION`` (issue 25, points 4 and 6): one study of the 16 + the function
+ LayerNorm + the identity with the published operator; on a database that already holds the
16, only the new function's seeds are trained (real training, local Ray, a smoke preset)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from normfree.search_space.catalog import SEARCH16
from normfree.settings import Settings
from normfree.specs import StudySpec, TrialResult
from normfree.storage import Database, Repository
from normfree.workers.driver import create_study
from normfree.workers.versions import trainer_version
from tests.cli import run as _run
from tests.cli import run_json as _json
from tests.workers.engine_support import ray_cluster

NEW = "u/(1+abs(u)+u*u)"


@pytest.fixture(scope="module")
def _ray() -> Iterator[None]:
    yield from ray_cluster()


def _hold_the_16(db: str) -> int:
    """A user's options study of the 16 with s (as the issue's command asks it), its trials
    finished under this trainer code (values by arm, so the board has an order)."""
    spec = StudySpec(
        kind="options",
        proxy="vit-tiny",
        functions=list(SEARCH16),
        options={"shift": ["scalar"]},
        baselines=["layernorm", "identity"],
        seeds=2,
        epochs=1,
    )
    sid = create_study(spec, settings=Settings(database_url=db), request=True)
    repo = Repository(Database(db), max_attempts=3)
    order = [*SEARCH16, "layernorm", "identity"]
    while (lease := repo.lease_next(sid, "w", 60)) is not None:
        v = 0.9 - 0.02 * order.index(lease.config.norm.name) + 0.001 * lease.config.seed
        result = TrialResult(status="complete", metrics={"val_acc": v}, objective="val_acc",
                             code_version=trainer_version())  # fmt: skip
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)
    return sid


def test_screen_trains_only_the_new_function_and_places_it(tmp_path: Path, _ray: None) -> None:
    db = f"sqlite:///{tmp_path / 'screen.db'}"
    _hold_the_16(db)
    args = ("screen", NEW, "--proxy", "vit-tiny", "--seeds", "2", "--epochs", "1", "--db", db)
    out = _json(*args, "--parallel", "2")
    s = out["screens"][0]
    # 16 + the function + LayerNorm + identity, 2 seeds: all but the function's 2 reused
    assert s["trials"] == 38 and s["reused"] == 36 and s["to_train"] == 2
    assert s["run"]["dispatched"] == 2 and s["run"]["status"] == "complete"
    p = s["placement"]
    assert p["found"] and p["of"] == 17 and 1 <= p["among_16"] <= 17 and p["n"] == 2
    assert p["reliability"]["seeds"] == 2 and "rank reliability" in p["reliability"]["text"]
    assert p["fidelity"].startswith("no fidelity headline")  # a smoke preset: no verdict
    assert any("not calibrated" in c for c in p["caveats"])
    # the published operator ran: every pointwise arm has s, the baselines none
    board = _json("leaderboard", "--proxy", "vit-tiny", "--study", str(s["study_id"]), "--db", db)
    norms = {r["candidate"]: r["norm"] for r in board["rows"]}
    assert norms[NEW]["shift"] == "scalar" and norms["erf"]["shift"] == "scalar"
    assert norms["layernorm"].get("shift", "none") == "none"
    # asked again: the same study, nothing to train, nothing run
    again = _json(*args)["screens"][0]
    assert again["found_existing"] and again["study_id"] == s["study_id"]
    assert again["to_train"] == 0 and "run" not in again
    code, text = _run(*args)
    assert code == 0 and f"{NEW} + s on vit-tiny" in text and "rank reliability" in text


def test_screen_refuses_bad_input_with_a_clear_error(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'bad.db'}"
    code, out = _run("screen", "u/(1+", "--proxy", "vit-tiny", "--detach", "--db", db)
    assert code == 2 and "error" in out
    code, out = _run("screen", "erf", "--proxy", "no-such-proxy", "--detach", "--db", db)
    assert code == 2 and "no-such-proxy" in out
    code, out = _run("screen", "erf", "--seeds", "1", "--detach", "--db", db)
    assert code == 2 and "at least 2" in out

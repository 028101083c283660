"""A generative study end to end on real parts: the CLI, the driver on a local Ray, SQLite, real
training of a tiny proxy (1 epoch), then the same study through REST and the dashboard page.

It must dedup, filter by constraints, prescreen, train only survivors, record lineage, and
report property importance (JSON and a plot)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from normfree.cli import main
from normfree.search_space import catalog, parse
from normfree.settings import Settings
from normfree.workers.generate import Constraint, Seen
from tests.workers.engine_support import ray_cluster

CONSTRAINTS = "bounded and monotone"


@pytest.fixture(scope="module", autouse=True)
def _ray() -> Iterator[None]:
    yield from ray_cluster()


def _cli(*args: str) -> dict:
    res = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output.strip().splitlines()[-1])


def test_generate_study_cli_rest_and_dashboard(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'gen.db'}"
    out = _cli(
        "study", "generate", "--proxy", "vit-tiny", "--generations", "1", "--population", "3",
        "--children", "2", "--constraints", CONSTRAINTS, "--seeds", "1", "--epochs", "1",
        "--max-prescreen", "3", "--baselines", "layernorm", "--parallel", "2", "--db", db,
    )  # fmt: skip
    assert out["kind"] == "generate" and out["run"]["status"] == "complete"
    report = out["generate"]
    gens = report["generations"]
    assert [g["generation"] for g in gens] == [0, 1]
    assert [len(g["trained"]) for g in gens] == [3, 2]
    totals = report["totals"]
    # rejected before any training: duplicates of the catalog or of each other, and
    # functions that are not bounded and monotone
    assert totals["duplicate"] > 0 and totals["constraint"] > 0
    assert report["rejected_before_training"] == report["proposed"] - 5
    assert 0 < report["fraction_rejected"] < 1
    # only survivors were trained: 5 candidates + LayerNorm, one seed each, all finished
    counts = out["run"]["counts"]
    assert sum(counts.values()) == 6 and counts["WAITING"] == counts["RUNNING"] == 0
    board = {r["candidate"]: r for r in out["leaderboard"]}
    trained = [n for g in gens for n in g["trained"]]
    assert set(board) == {*trained, "layernorm"}

    # stored with lineage; distinct, new, and within the constraints
    from normfree.storage import Database, Repository

    repo = Repository(Database(db))
    rule, fresh = Constraint(CONSTRAINTS), Seen(catalog.all())
    cands = [repo.get_candidate(n) for n in trained]
    assert len({c["fingerprint"] for c in cands}) == 5
    for c in cands:
        parsed = parse(c["formula"])
        assert rule(parsed.properties) and fresh.match(parsed) is None
        assert c["group"] == "generated" and c["lineage"]["study_id"] == out["study_id"]
    gen0, gen1 = gens[0]["trained"], gens[1]["trained"]
    for c in cands:
        lin = c["lineage"]
        if c["name"] in gen1:
            assert lin["generation"] == 1 and lin["mutation"]
            assert lin["parents"] and set(lin["parents"]) <= set(gen0)
        else:
            assert lin["generation"] == 0 and lin["mutation"] == "sample"
    # the trials reference the candidate by name + formula, like any user formula
    trials = repo.list_trials(out["study_id"])
    t = next(t for t in trials if t["candidate"] == gen1[0])
    assert t["norm"]["formula"] == repo.get_candidate(gen1[0])["formula"]
    assert t["axis_values"]["generation"] == 1 and t["status"] in ("COMPLETE", "DIVERGED")
    imp = report["importance"]
    assert imp["n_candidates"] == 5 and imp["method"].startswith("spearman")
    by_name = {f["name"]: f for f in imp["features"]}
    assert by_name["bounded"]["constant"]  # the constraint made every candidate bounded

    # REST: the same study with its report; a generate study can be created; bad input -> 422
    from normfree.api import create_app

    app = create_app(Settings(database_url=db), run_studies=False, prescreen=False)
    with TestClient(app) as client:
        token = app.state.services.repo.create_token("gen-tester")
        h = {"Authorization": f"Bearer {token}"}
        detail = client.get(f"/api/studies/{out['study_id']}").json()
        assert detail["kind"] == "generate"
        assert detail["generate"]["totals"] == totals
        assert detail["generate"]["importance"]["n_candidates"] == 5
        cand = client.get(f"/api/candidates/{gen1[0]}").json()
        assert cand["lineage"]["parents"] and cand["group"] == "generated"
        assert client.get(f"/candidates/{gen1[0]}").status_code == 200
        page = client.get(f"/studies/{out['study_id']}")
        assert page.status_code == 200
        assert 'id="importance-figure"' in page.text and gen1[0] in page.text
        body = {
            "kind": "generate",
            "proxy": "vit-tiny",
            "seeds": 1,
            "epochs": 1,
            "params": {"generations": 2, "population": 4, "constraints": "odd and smooth"},
        }
        r = client.post("/api/studies", json=body, headers=h)
        assert r.status_code == 201, r.text
        assert r.json()["kind"] == "generate" and r.json()["status"] == "pending"
        bad = {**body, "params": {**body["params"], "constraints": "__import__('os')"}}
        r = client.post("/api/studies", json=bad, headers=h)
        assert r.status_code == 422 and "constraint" in r.text
        bad = {**body, "params": {**body["params"], "population": 0}}
        assert client.post("/api/studies", json=bad, headers=h).status_code == 422


def test_generate_baselines_take_the_studys_affine(tmp_path: Path) -> None:
    """Like a grid study's: ``params["affine"]`` reaches the baselines' NormSpec too."""
    from normfree.specs import StudySpec
    from normfree.workers.driver import StudyDriver, create_study
    from tests.workers.engine_support import engine_settings

    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(
        kind="generate",
        proxy="vit-tiny",
        seeds=1,
        functions=["erf"],
        baselines=["layernorm"],
        epochs=1,
        params={"affine": False, "generations": 1, "prescreen": False},
    )
    sid = create_study(spec, settings=settings)
    driver = StudyDriver(sid, settings=settings)
    assert driver.kind.refill(driver)
    norms = {r["config"]["norm"]["name"]: r["config"]["norm"] for r in _trials(driver, sid)}
    assert norms["layernorm"]["affine"] is False
    assert norms["erf"]["affine"] is False


def _trials(driver: object, sid: int) -> list[dict]:
    return driver.store.repo.list_trials(sid)  # type: ignore[attr-defined]

"""The REST API through real HTTP (TestClient) over a real database: success and failure paths."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from normfree.search_space.catalog import SEARCH16
from normfree.testing.seeding import Seeded, seed_property_study
from tests.api.conftest import Api

STUDY = {
    "kind": "property",
    "proxy": "vit-tiny",
    "functions": ["erf", "tanh"],
    "transform": "shift_h",
    "values": [-0.5, 0, 0.5],
    "seeds": 2,
    "epochs": 1,
}


def _error(resp, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) >= {"error", "message"}
    assert body["message"]
    if code is not None:
        assert body["error"] == code, body
    return body


# ---------------------------------------------------------------------------- health, docs


def test_health_version_and_openapi(api: Api) -> None:
    h = api.client.get("/api/health").json()
    assert h == {
        "status": "ok",
        "database": "sqlite",
        "database_ok": True,
        "detail": None,
        "read_builder": None,  # an app built in a test has none (a server does)
        # how its anonymous reads were answered: this one, the first, went through the app
        "fast_lane": {"replayed": 0, "revalidated": 0, "shared": 0, "routed": 1, "direct": 0},
    }
    assert api.client.get("/api/version").json()["version"]
    spec = api.client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    # Every API operation documents a response model.
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            ok = op["responses"].get("200") or op["responses"].get("201")
            assert ok and "schema" in ok["content"]["application/json"], (method, path)
    unknown = _error(api.client.get("/api/nothing-here"), 404, "not_found")
    assert "/docs" in unknown["message"]
    _error(api.client.delete("/api/health"), 405)


# ------------------------------------------------------------------------------------- auth


def test_writes_need_a_valid_token(api: Api) -> None:
    body = {"name": "needs_token", "formula": "tanh(2*u)"}
    r = api.client.post("/api/candidates", json=body)
    err = _error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    assert "normfree token create" in err["message"]
    _error(api.client.post("/api/candidates", json=body, headers={"Authorization": "Basic x"}), 401)
    bad = {"Authorization": "Bearer nf_not_a_real_token"}
    _error(api.client.post("/api/candidates", json=body, headers=bad), 403, "forbidden")
    _error(api.client.post("/api/studies", json=STUDY), 401)
    # a revoked token stops working at once
    assert api.repo.revoke_token("tester1")
    _error(api.client.post("/api/candidates", json=body, headers=api.auth), 403)
    _error(api.client.post("/api/studies/1/pause", headers=api.auth), 403)
    assert api.repo.list_candidates(name_contains="needs_token") == []


def test_private_reads(make_api, sqlite_database_url: str) -> None:
    api = make_api(sqlite_database_url, public_reads=False)
    _error(api.client.get("/api/candidates"), 401)
    _error(api.client.get("/api/leaderboards/vit-tiny"), 401)
    _error(api.client.get("/api/studies", headers={"Authorization": "Bearer nope"}), 403)
    assert api.client.get("/api/studies", headers=api.auth).status_code == 200
    assert api.client.get("/api/health").status_code == 200  # health stays public
    assert api.client.get("/", headers={"Accept": "text/html"}).status_code == 401


# ------------------------------------------------------------------------------- candidates


def _prescreen_when_done(api: Api, name: str, timeout: float = 120.0) -> dict:
    """Poll the candidate (as a client would after a 202) until its prescreen has run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pre = api.client.get(f"/api/candidates/{name}").json()["prescreen"]
        if pre and pre["status"] != "pending":
            return pre
        time.sleep(0.2)
    raise AssertionError(f"the prescreen of {name} did not finish in {timeout} s")


def test_submit_candidate_new_duplicate_and_conflicts(api: Api) -> None:
    c = api.client
    r = c.post(
        "/api/candidates",
        json={"name": "halfsquash", "formula": "2*u/(2+abs(u))", "description": "a wider ratio"},
        headers=api.auth,
    )
    # stored at once; the prescreen (seconds of training) runs after the answer
    assert r.status_code == 202, r.text
    assert r.headers["location"] == "/api/candidates/halfsquash"
    body = r.json()
    assert body["created"] is True and body["duplicate_of"] is None
    assert body["canonical"] and body["fingerprint"]
    assert body["properties"]["bounded"] is True
    assert body["properties"]["monotone"] == "increasing"
    assert body["description"] == "a wider ratio"
    assert body["submitter"] == "tester1"
    assert body["prescreen"]["status"] == "pending"
    pre = _prescreen_when_done(api, "halfsquash")
    assert pre["proxy"] == "vit-tiny" and pre["error"] is None, pre
    assert isinstance(pre["ok"], bool) and "survives" in pre["result"]
    # stored on the candidate: every API process shows it
    assert api.repo.get_candidate("halfsquash")["prescreen"]["result"] == pre["result"]
    # the same submission again: nothing new, the stored one is named
    again = c.post(
        "/api/candidates",
        json={"name": "halfsquash", "formula": "2*u/(2+abs(u))"},
        headers=api.auth,
    )
    assert again.status_code == 200 and again.json()["created"] is False
    # a known function's submission answers its prescreen at once
    dup_known = c.post(
        "/api/candidates",
        json={"name": "halfsquash3", "formula": "4*u/(4+2*abs(u))"},
        headers=api.auth,
    )
    assert dup_known.status_code == 200, dup_known.text
    assert dup_known.json()["prescreen"]["result"] == pre["result"]
    # the same function under another name and spelling: a duplicate of the stored one
    dup = c.post(
        "/api/candidates",
        json={"name": "halfsquash2", "formula": "u/(1+abs(u)/2)"},
        headers=api.auth,
    )
    assert dup.status_code == 200, dup.text
    assert dup.json()["duplicate_of"] == "halfsquash"
    # a catalog function in disguise (2*sigmoid(2u)-1 is tanh)
    tanh = c.post(
        "/api/candidates", json={"name": "mytanh", "formula": "2*sigmoid(2*u)-1"}, headers=api.auth
    )
    assert tanh.json()["duplicate_of"] == "tanh"
    assert (
        api.repo.get_candidate("mytanh") is None and api.repo.get_candidate("halfsquash2") is None
    )
    # name conflicts
    _error(c.post("/api/candidates", json={"name": "erf", "formula": "u"}, headers=api.auth), 409)
    other = c.post(
        "/api/candidates", json={"name": "halfsquash", "formula": "atan(u)"}, headers=api.auth
    )
    assert "already named" in _error(other, 409, "name_taken")["message"]


@pytest.mark.parametrize(
    ("formula", "needle", "position"),
    [
        ("u/(1+abs(u)", "expected ')'", 11),
        ("__import__('os').system('x')", "", None),
        ("u.real", "", None),
        ("(lambda: 1)()", "", None),
        ("log(u)", "not finite", None),
        ("(" * 400 + "u" + ")" * 400, "", None),
        ("9" * 400, "", None),
        ("u**100000", "", None),
    ],
)
def test_hostile_formulas_are_422_with_the_parsers_message(
    api: Api, formula: str, needle: str, position: int | None
) -> None:
    r = api.client.post(
        "/api/candidates", json={"name": "hostile", "formula": formula}, headers=api.auth
    )
    body = _error(r, 422)
    assert body["message"].startswith(("formula rejected:", "formula:")), body
    assert needle in body["message"]
    if position is not None:
        assert body["detail"]["position"] == position


def test_invalid_bodies_say_what_to_fix(api: Api) -> None:
    c, h = api.client, api.auth
    missing = _error(c.post("/api/candidates", json={"name": "x"}, headers=h), 422)
    assert "formula: this field is required" in missing["message"]
    extra = _error(
        c.post("/api/candidates", json={"name": "x", "formula": "u", "y": 1}, headers=h), 422
    )
    assert "y: Extra inputs are not permitted" in extra["message"]
    badname = _error(c.post("/api/candidates", json={"name": "1x", "formula": "u"}, headers=h), 422)
    assert "name:" in badname["message"]
    hdr = {**h, "Content-Type": "application/json"}
    broken = _error(c.post("/api/candidates", content=b'{"name": ', headers=hdr), 422)
    assert "not valid JSON" in broken["message"]
    _error(c.post("/api/candidates", content=b"[1, 2]", headers=hdr), 422)


def test_request_size_limit_is_413(api: Api) -> None:
    big = {"name": "big", "formula": "u", "description": "x" * 1900}
    body = b'{"name": "big", "formula": "' + b"u+" * 20000 + b'u"}'
    r = api.client.post(
        "/api/candidates", content=body, headers={**api.auth, "Content-Type": "application/json"}
    )
    err = _error(r, 413, "request_too_large")
    assert "NORMFREE_MAX_REQUEST_BYTES" in err["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"name": "big", "formula": "'
        for _ in range(100):
            yield b"u+" * 200
        yield b'u"}'

    r = api.client.post(
        "/api/candidates",
        content=chunks(),
        headers={**api.auth, "Content-Type": "application/json"},
    )
    _error(r, 413, "request_too_large")
    # just under the limit is fine (a 422 from validation, not a 413)
    assert api.client.post("/api/candidates", json=big, headers=api.auth).status_code != 413


def test_list_filter_and_get_candidates(api: Api) -> None:
    c = api.client
    all_ = c.get("/api/candidates").json()
    names = {x["name"] for x in all_["items"]}
    assert {"erf", "tanh", "smoothsign", "linear"} <= names and all_["count"] == len(names)
    natural = c.get("/api/candidates", params={"group": "natural"}).json()["items"]
    assert {x["name"] for x in natural} == {"erf", "tanh", "arctan"}
    bounded = {x["name"] for x in c.get("/api/candidates?property=bounded").json()["items"]}
    assert "erf" in bounded and "linear" not in bounded
    nonmono = c.get("/api/candidates", params={"property": "monotone=neither"}).json()["items"]
    assert "sin" in {x["name"] for x in nonmono} and "erf" not in {x["name"] for x in nonmono}
    assert c.get("/api/candidates?source=user").json()["count"] == 0
    _error(c.get("/api/candidates?source=elsewhere"), 422)

    erf = c.get("/api/candidates/erf").json()
    assert erf["group"] == "natural" and erf["source"] == "catalog"
    plot = erf["plot"]
    assert len(plot["u"]) == len(plot["f"]) == len(plot["df"]) == 201
    mid = len(plot["u"]) // 2
    assert (
        plot["u"][mid] == 0
        and plot["f"][mid] == 0
        and plot["df"][mid] == pytest.approx(1.1284, 1e-3)
    )
    shifted = c.get("/api/candidates/shift_h(erf, 0.5)").json()
    assert shifted["plot"]["f"][mid] == pytest.approx(0.5205, 1e-3)
    _error(c.get("/api/candidates/no_such_function"), 404, "not_found")
    _error(c.get("/api/candidates/" + "x" * 400), 422)


# ---------------------------------------------------------------------------------- studies


def test_create_list_get_and_control_a_study(api: Api) -> None:
    c, h = api.client, api.auth
    r = c.post("/api/studies", json={**STUDY, "name": "zero-centredness"}, headers=h)
    assert r.status_code == 201, r.text
    study = r.json()
    sid = study["id"]
    assert study["status"] == "pending" and study["progress"]["total"] == 12
    assert study["spec"]["transform"] == "shift_h"
    assert [s["id"] for s in c.get("/api/studies").json()["items"]] == [sid]
    assert c.get("/api/studies?kind=search").json()["count"] == 0
    detail = c.get(f"/api/studies/{sid}").json()
    assert len(detail["trials"]) == 12 and detail["objective"] == "val_acc"
    assert {cell["label"] for cell in detail["cells"]} >= {"erf @ -0.5", "tanh @ 0.5"}
    assert c.get(f"/api/studies/{sid}?trials=false").json()["trials"] == []

    assert c.post(f"/api/studies/{sid}/pause", headers=h).json()["status"] == "paused"
    again = _error(c.post(f"/api/studies/{sid}/pause", headers=h), 409, "conflict")
    assert "paused" in again["message"]
    assert c.post(f"/api/studies/{sid}/resume", headers=h).json()["status"] == "running"
    cancelled = c.post(f"/api/studies/{sid}/cancel", headers=h).json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["progress"]["waiting"] == 0 and cancelled["progress"]["cancelled"] == 12
    _error(c.post(f"/api/studies/{sid}/resume", headers=h), 409)
    _error(c.post("/api/studies/999/cancel", headers=h), 404)
    _error(c.get("/api/studies/999"), 404, "not_found")
    _error(c.get("/api/studies/0"), 422)
    _error(c.get("/api/studies/99999999999999999999"), 422)
    _error(c.get("/api/studies/abc"), 422)


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"proxy": "resnet"}, "unknown 'resnet'"),
        ({"functions": []}, "at least one function"),
        ({"functions": ["erf", "nope"]}, "unknown function 'nope'"),
        ({"transform": None}, "needs a transform"),
        ({"transform": "twist"}, "not a known transform"),
        ({"values": []}, "needs transform values"),
        ({"seeds": 0}, "seeds"),
        ({"values": [1e300]}, "finite"),
        ({"kind": "generate"}, "kind"),
        ({"params": {"sed0": 3}}, "params: unknown ['sed0']"),
        ({"kind": "options", "options": {"depthh": [1, 2]}}, "options: unknown ['depthh']"),
        (
            {"seeds": 20, "values": list(range(30)), "functions": list(SEARCH16[:5])},
            "limit is 2000",
        ),
    ],
)
def test_invalid_studies_are_422(api: Api, patch: dict, needle: str) -> None:
    r = api.client.post("/api/studies", json={**STUDY, **patch}, headers=api.auth)
    assert needle in _error(r, 422)["message"]
    assert api.client.get("/api/studies").json()["count"] == 0


def test_property_study_with_the_untransformed_cell(api: Api) -> None:
    """The paper's parameterless cells (sign_flip, "unclipped too") travel through the API."""
    body = {**STUDY, "transform": "sign_flip", "values": [], "params": {"untransformed_cell": True}}
    r = api.client.post("/api/studies", json=body, headers=api.auth)
    assert r.status_code == 201, r.text
    assert r.json()["progress"]["total"] == 4  # 2 functions x 1 cell x 2 seeds
    labels = {
        cell["label"] for cell in api.client.get(f"/api/studies/{r.json()['id']}").json()["cells"]
    }
    assert len(labels) == 2


def test_search_study_is_created(api: Api) -> None:
    body = {
        "kind": "search",
        "proxy": "vit-tiny",
        "functions": ["erf", "tanh", "isru"],
        "sampler": "tpe",
        "pruner": "sha",
        "n_trials": 6,
        "seeds": 1,
        "epochs": 2,
    }
    r = api.client.post("/api/studies", json=body, headers=api.auth)
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "search" and r.json()["status"] == "pending"


# ------------------------------------------------------------------------- trials, boards


def test_trial_with_curves_and_diagnostics(api: Api, seeded: Seeded) -> None:
    tid = seeded.trial_ids[0]
    t = api.client.get(f"/api/trials/{tid}").json()
    assert t["status"] == "COMPLETE" and t["objective"] == "val_acc"
    assert t["objective_value"] == pytest.approx(t["metrics"]["val_acc"])
    assert [p["epoch"] for p in t["curves"]] == [0, 1, 2]
    assert len(t["diagnostics"]) == 15
    assert {"alpha", "input_std", "gamma_mean", "branch_norm"} <= set(t["diagnostics"][0])
    div = api.client.get(f"/api/trials/{seeded.diverged_trial_ids[0]}").json()
    assert div["status"] == "DIVERGED" and div["diverged_at_step"] == 7
    assert (div["spike_step"], t["spike_step"]) == (6, None)  # stored since migration 0005
    _error(api.client.get("/api/trials/424242"), 404)
    _error(api.client.get("/api/trials/-1"), 422)


def test_leaderboard_with_cis_and_filters(api: Api, seeded: Seeded) -> None:
    c = api.client
    board = c.get("/api/leaderboards/vit-tiny").json()
    assert board["objective"] == "val_acc" and board["direction"] == "maximize"
    rows = board["rows"]
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    top = rows[0]
    assert top["candidate"] == "layernorm" and top["is_best"] and top["group"] == "baseline"
    assert top["ci_low"] < top["mean"] < top["ci_high"] and top["n"] == 2
    by_name = {r["candidate"]: r for r in rows}
    assert by_name["shift_h(tanh, 1)"]["n_diverged"] == 1 and by_name["shift_h(tanh, 1)"]["n"] == 1
    erf0 = by_name["shift_h(erf, 0)"]
    assert erf0["vs_layernorm"]["n_pairs"] == 2 and erf0["vs_layernorm"]["mean_diff"] < 0
    assert erf0["properties"]["zero_centred"] is True and erf0["group"] == "natural"
    # property filter: only the zero-centred cells (shift 0) and nothing shifted
    zc = c.get("/api/leaderboards/vit-tiny", params={"property": "zero_centred"}).json()["rows"]
    assert {r["candidate"] for r in zc} == {"shift_h(erf, 0)", "shift_h(tanh, 0)"}
    base = c.get("/api/leaderboards/vit-tiny?group=baseline").json()
    assert [r["candidate"] for r in base["rows"]] == ["layernorm"]
    assert base["filters"] == {"group": "baseline"}
    assert c.get(f"/api/leaderboards/vit-tiny?study_id={seeded.study_id + 1}").json()["rows"] == []
    assert c.get("/api/leaderboards/dit-tiny").json()["rows"] == []
    _error(c.get("/api/leaderboards/no-such-proxy"), 404)
    # the candidate page's JSON lists its results across proxies
    res = c.get("/api/candidates/shift_h(erf, 0)").json()["results"]
    assert [r["proxy"] for r in res] == ["vit-tiny"] and res[0]["rank"] == erf0["rank"]


@pytest.mark.postgres
def test_core_flow_on_both_backends(make_api, database_url: str) -> None:
    """The same API over SQLite and the real PostgreSQL server."""
    api = make_api(database_url, prescreen=False)
    seeded = seed_property_study(api.settings)
    c, h = api.client, api.auth
    assert c.get("/api/health").json()["database_ok"] is True
    rows = c.get("/api/leaderboards/vit-tiny").json()["rows"]
    assert rows[0]["candidate"] == "layernorm" and len(rows) == 7
    assert len(c.get(f"/api/trials/{seeded.trial_ids[1]}").json()["curves"]) == 3
    sub = c.post("/api/candidates", json={"name": "pgsquash", "formula": "atan(2*u)"}, headers=h)
    assert sub.status_code == 201 and sub.json()["prescreen"] is None
    assert c.get("/api/candidates?source=user").json()["items"][0]["name"] == "pgsquash"
    r = c.post("/api/studies", json=STUDY, headers=h)
    assert r.status_code == 201
    sid = r.json()["id"]
    assert c.post(f"/api/studies/{sid}/cancel", headers=h).json()["status"] == "cancelled"
    assert c.get(f"/api/studies/{seeded.study_id}").json()["status"] == "complete"
    # the creator deletes its cancelled study (trials, Optuna study, leaderboard fold)
    gone = c.delete(f"/api/studies/{sid}", headers=h).json()
    assert gone["id"] == sid and gone["deleted"] is True and gone["dry_run"] is False
    assert c.get(f"/api/studies/{sid}").status_code == 404
    assert len(c.get("/api/leaderboards/vit-tiny").json()["rows"]) == 7  # the seeded study's

"""Issue 28, point 5: no input an anonymous reader (or a token holder) sends makes a 500.

Each probe of the issue, on SQLite and PostgreSQL (the ``database_url`` fixture), through the real
app: integers past the database's range, NUL and other control characters in paths, queries and
body fields, 30,000 levels of JSON nesting, and the security headers on a 500.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from normfree.api.inputs import MAX_JSON_DEPTH, body_problem, db_int, json_problem
from tests.api import bodies
from tests.api.conftest import Api, internal_error

STUDY = bodies.study()
REFERENCE = bodies.reference()


@pytest.fixture
def both(make_api: Callable[..., Api], database_url: str) -> Api:
    """The app on each backend, with the default 64 KiB body limit (room for 30,000 brackets)."""
    return make_api(database_url, prescreen=False, max_request_bytes=64 * 1024)


def _refused(r: Any, needle: str = "") -> dict:
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    body = r.json() if r.headers["content-type"].startswith("application/json") else {}
    if needle and body:
        assert needle in body["message"], body
    return body


def test_cursor_past_the_integer_range_is_422(both: Api) -> None:
    sid = both.client.post("/api/studies", json=STUDY, headers=both.auth).json()["id"]
    ok = both.client.get(f"/api/studies/{sid}/trials?cursor=0")
    assert ok.status_code == 200 and ok.json()["count"] == 1
    for cursor in ("99999999999999999999", "2147483648", "-1", "1e3", "+5"):
        r = both.client.get(f"/api/studies/{sid}/trials?cursor={cursor}")
        assert r.json()["error"] == "invalid_cursor", cursor
        _refused(r)
    assert both.client.get(f"/api/studies/{sid}/trials?cursor=2147483647").json()["count"] == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/studies/2147483648",
        "/api/trials/99999999999999999999",
        "/api/studies/2147483648/trials",
        "/api/fidelity?study_id=2147483648",
        "/api/leaderboards/vit-tiny?study_id=99999999999999999999",
        "/studies/2147483648",
        "/trials/2147483648",
    ],
)
def test_ids_past_the_integer_range_are_422(both: Api, path: str) -> None:
    _refused(both.client.get(path))


READS_WITH_NUL = [
    "/api/candidates/a%00b",
    "/api/candidates/tanh(u)%00",
    "/api/candidates/a%00b/results",
    "/api/candidates?q=a%00",
    "/api/candidates?group=%00",
    "/api/references/pub%00lished",
    "/api/references/published?format=csv%00",
    "/api/leaderboards/vit-tiny%00",
    "/api/leaderboards/vit-tiny?group=a%00",
    "/api/leaderboards/vit-tiny?property=bounded%00",
    "/api/fidelity?proxy=vit%00",
    "/api/fidelity?reference=published%00",
    "/candidates/a%00b",
    "/fidelity?reference=%00",
    "/?proxy=%00",
]


@pytest.mark.parametrize("path", READS_WITH_NUL)
def test_nul_in_any_read_path_is_422(both: Api, path: str) -> None:
    _refused(both.client.get(path), "control character U+0000")


@pytest.mark.parametrize("char", ["%01", "%0A", "%1B", "%7F", "%C2%85"])
def test_other_control_characters_in_urls_are_422(both: Api, char: str) -> None:
    _refused(both.client.get(f"/api/candidates/a{char}b"), "control character")
    _refused(both.client.get(f"/api/candidates?q=a{char}"), "control character")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/candidates", {"name": "nul", "formula": "tanh(u)", "description": "a\x00b"}),
        ("/api/candidates", {"name": "nul", "formula": "tanh(u)\x00"}),
        ("/api/candidates", {"name": "nul", "formula": "tanh(u)", "description": "back\x08"}),
        ("/api/candidates", {"name": "nul\x00", "formula": "tanh(u)"}),
        ("/api/studies", {**STUDY, "functions": ["erf\x00"]}),
        ("/api/studies", {**STUDY, "proxy": "vit-tiny\x1b"}),
        ("/api/references", {**REFERENCE, "source": "my\x00paper"}),
        ("/api/references", {**REFERENCE, "rows": [{**REFERENCE["rows"][0], "setting": "s\x00"}]}),
    ],
)
def test_control_characters_in_write_fields_are_422(both: Api, path: str, body: dict) -> None:
    _refused(both.client.post(path, json=body, headers=both.auth), "control character")
    assert both.repo.get_candidate("nul") is None
    assert both.repo.list_studies() == []
    assert both.client.get("/api/references/mine").status_code == 404


def test_control_characters_in_csv_forms_and_raw_bodies_are_422(both: Api) -> None:
    csv = "setting,family,metric,direction,function,value\ns\x00,vit,accuracy,maximize,tanh,80\n"
    r = bodies.post_csv(both, "/api/references?name=mini&source=S", csv)
    _refused(r, "U+0000")
    _refused(
        bodies.post_csv(both, "/api/references?name=mini%00&source=S", csv.replace("\x00", ""))
    )
    form = {"name": "formnul", "formula": "tanh(u)\x00", "token": both.token}
    _refused(both.client.post("/submit", data=form))
    assert both.repo.get_candidate("formnul") is None


def test_lines_in_free_text_still_pass(both: Api) -> None:
    body = {
        "name": "lines",
        "formula": "u/(1+abs(u))+0.001*u",
        "description": "two\nlines\twith a tab, a \\b and a \\u0000 as text",
    }
    r = both.client.post("/api/candidates", json=body, headers=both.auth)
    assert r.status_code == 201, r.text
    assert r.json()["description"] == body["description"]


@pytest.mark.parametrize("path", ["/api/references", "/api/candidates", "/api/studies", "/submit"])
def test_deep_json_is_422_not_a_recursion_error(both: Api, path: str) -> None:
    deep = "[" * 30_000 + "]" * 30_000
    r = both.client.post(
        path, content=deep, headers={**both.auth, "Content-Type": "application/json"}
    )
    _refused(r, "nests more than")
    wrapped = json.dumps({**REFERENCE, "rows": []})[:-1] + ', "x": ' + deep + "}"
    r = both.client.post(
        path, content=wrapped, headers={**both.auth, "Content-Type": "application/json"}
    )
    _refused(r, "nests more than")
    assert both.client.get("/api/references/mine").status_code == 404


def test_json_nesting_is_counted_on_the_decoded_document() -> None:
    def nested(levels: int) -> str:
        return '{"a": ' * (levels - 1) + "[1]" + "}" * (levels - 1)

    assert body_problem(nested(MAX_JSON_DEPTH).encode(), "application/json") is None
    assert "nests more" in body_problem(nested(MAX_JSON_DEPTH + 1).encode(), "")
    assert body_problem(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "") is None
    assert "nests more" in body_problem(b"[" * 100_000, "application/json")  # never a crash
    assert json_problem({"k\x00": 1}, strings=True) is not None  # keys are strings too


def test_db_int_bounds_text() -> None:
    assert db_int("2147483647", "cursor") == 2**31 - 1
    for bad in ("2147483648", "99999999999999999999", "-1", " 1", "١٢", ""):
        with pytest.raises(Exception, match="cursor: expected an integer"):
            db_int(bad, "cursor")


def test_a_500_carries_the_security_headers(api: Api) -> None:
    r = internal_error(api, "boom")
    assert r.status_code == 500
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert r.headers["Referrer-Policy"] == "same-origin"

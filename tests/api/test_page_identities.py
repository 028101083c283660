"""One function is one row on every page (issue 24, point 6): with stored trials of ``erf`` and
``shift_h(erf, 0)`` (one function under two names), the home page, the leaderboard page, erf's
"Results across proxies" and the study page each show one erf row, labelled as the API labels
it (``erf [alpha0=1.0]`` for an option arm)."""

from __future__ import annotations

import html as htmllib
import re
from collections.abc import Callable

import pytest

from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from tests.api.conftest import Api

HTML = {"Accept": "text/html"}
ARMS = [
    (NormSpec(name="erf"), {}),
    (NormSpec(name="shift_h(erf, 0)"), {}),
    (NormSpec(name="erf", alpha0=1.0), {"alpha0": 1.0}),
    (NormSpec(name="layernorm"), {"baseline": True}),
]


@pytest.fixture
def two_names(make_api: Callable[..., Api], sqlite_database_url: str) -> tuple[Api, int]:
    """An options study whose trials ran erf as ``erf`` (seeds 0, 1) and as ``shift_h(erf, 0)``
    (seeds 1, 2), plus an alpha0 arm and LayerNorm; every trial finished."""
    api = make_api(sqlite_database_url, prescreen=False)
    repo = api.repo
    sid = repo.create_study(StudySpec(kind="options", proxy="vit-tiny", name="identities"))
    items = []
    for norm, axes in ARMS:
        seeds = (1, 2) if norm.name.startswith("shift_h") else (0, 1)
        for seed in seeds:
            config = TrialConfig(proxy="vit-tiny", norm=norm, seed=seed, epochs=1)
            items.append((config, {"function": norm.name, **axes, "seed": seed}))
    repo.add_trials(sid, items)
    repo.set_study_status(sid, "running")
    while (lease := repo.lease_next(sid, "identity-test", 60)) is not None:
        value = 0.5 + lease.config.seed / 100 + (0.1 if lease.config.norm.alpha0 == 1.0 else 0)
        result = TrialResult(
            status="complete", objective="val_acc", direction="maximize",
            metrics={"val_acc": value},
        )  # fmt: skip
        assert repo.finish_trial(lease.id, "identity-test", lease.attempt, result)
    return api, sid


def _table(page: str, marker: str) -> str:
    """The HTML of the first table after ``marker``."""
    rest = page.split(marker, 1)[1]
    return rest[: rest.index("</table>")]


def _first_cells(table: str) -> list[str]:
    """The text of each body row's arm cell (the first cell with a link, else the second)."""
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        linked = [c for c in cells if "<a " in c and "page_leaderboard" not in c]
        text = linked[0] if linked and "?proxy=" not in linked[0] else cells[1]
        out.append(htmllib.unescape(re.sub(r"<[^>]+>", "", text)).strip())
    return out


def _erf_rows(labels: list[str]) -> list[str]:
    return [lb for lb in labels if "erf" in lb]


def test_every_page_shows_one_row_per_function(two_names: tuple[Api, int]) -> None:
    api, sid = two_names
    for url in ("/", "/?proxy=vit-tiny"):  # the home page is the first proxy's leaderboard
        page = api.client.get(url, headers=HTML)
        assert page.status_code == 200
        labels = _first_cells(_table(page.text, 'id="leaderboard"'))
        assert sorted(_erf_rows(labels)) == ["erf", "erf [alpha0=1.0]"], (url, labels)
        assert "shift_h(erf, 0)" not in page.text

    # erf's page, and the identity transform's own page: one erf row across proxies
    for name in ("erf", "shift_h(erf, 0)"):
        page = api.client.get(f"/candidates/{name}", headers=HTML)
        assert page.status_code == 200
        results = _table(page.text, "Results across proxies")
        labels = _first_cells(results)
        assert sorted(labels) == ["erf", "erf [alpha0=1.0]"], (name, labels)
        assert ">3/4<" in results  # seeds 0, 1 (erf) and 2 (shift_h(erf, 0)); 4 trials

    page = api.client.get(f"/studies/{sid}", headers=HTML)
    assert page.status_code == 200
    cells = _first_cells(_table(page.text, 'id="cells"'))
    assert sorted(_erf_rows(cells)) == ["erf", "erf [alpha0=1.0]"], cells
    assert "shift_h(erf, 0)" not in _table(page.text, 'id="cells"')
    detail = api.client.get(f"/api/studies/{sid}?trials=false").json()
    erf = next(c for c in detail["cells"] if c["label"] == "erf")
    assert erf["n"] == 3 and erf["n_total"] == 4  # seed 1 ran under both names: counted once

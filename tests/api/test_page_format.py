"""Rows of the board page rendered in Python and kept by what they show (``api.page_format``)."""

from __future__ import annotations

from types import SimpleNamespace

from normfree.api import page_format
from normfree.api import schemas as S


def _row(**changes: object) -> S.LeaderboardRow:
    base = dict(
        rank=2,
        ranked=True,
        candidate="<script>alert(1)</script>",
        function="mine",
        group="user",
        properties={"bounded": True, "monotone": "increasing"},
        n=3,
        n_diverged=1,
        n_failed=0,
        n_total=4,
        mean=0.91,
        std=0.01,
        ci_low=0.88,
        ci_high=0.94,
        is_best=False,
        indistinguishable=False,
        p_vs_best=0.012,
        vs_layernorm={"mean_diff": -0.004, "ci_half_width": 0.003, "n_pairs": 3},
    )
    return S.LeaderboardRow(**{**base, **changes})


def _request(base: str) -> SimpleNamespace:
    return SimpleNamespace(
        scope={"normfree.candidates_url": f"{base}/candidates"}, url_for=lambda _name: None
    )


def test_a_row_shows_its_data_escaped_and_is_rendered_again_when_it_changes() -> None:
    here = _request("http://a:1")
    first = str(page_format.board_rows([_row()], here))
    assert "<script>" not in first and "&lt;script&gt;" in first
    assert 'href="http://a:1/candidates/mine"' in first
    assert "0.91 \u00b1 0.03" in first and "worse (p=0.012)" in first and "(n=3)" in first
    assert 'class="badge " title="bounded = true">bounded<' in first
    # kept: the same row renders to the same HTML
    assert str(page_format.board_rows([_row()], here)) == first
    # every field it shows is part of what it is kept by
    moved = str(page_format.board_rows([_row(mean=0.92)], here))
    assert moved != first and "0.92" in moved
    best = str(page_format.board_rows([_row(is_best=True, rank=1)], here))
    assert "badge good" in best and "worse" not in best
    # a page served under another host links there, never to the host of a kept row
    there = str(page_format.board_rows([_row()], _request("http://b:2")))
    assert 'href="http://b:2/candidates/mine"' in there and "http://a:1" not in there
    # unranked rows are the other table's
    assert str(page_format.board_rows([_row(ranked=False, rank=None)], here)) == ""


def test_a_heavy_tailed_slope_is_the_first_badge_and_says_why() -> None:
    """exproot's place on a CPU screen is its gradient noise, not a rank (diagnoses section 2f):
    the board says so on its row, ahead of the flags that would crowd it out of six badges."""
    from normfree.search_space import catalog

    props = catalog.get("exproot").properties.model_dump(mode="json")
    badges = page_format.property_badges(props)
    assert badges[0]["label"] == "heavy tailed slope" and badges[0]["cls"] == "warn"
    assert "small batches" in badges[0]["title"]
    html = str(page_format.board_rows([_row(properties=props)], _request("http://a:1")))
    assert 'class="badge warn"' in html and ">heavy tailed slope<" in html
    erf = catalog.get("erf").properties.model_dump(mode="json")
    assert all(b["label"] != "heavy tailed slope" for b in page_format.property_badges(erf))

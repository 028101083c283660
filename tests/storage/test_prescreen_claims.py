"""Prescreen claims and canonical keys on every stored row (issue 28, point 4), on SQLite and
PostgreSQL (``repo`` fixture).

- Of the server processes that re-queue an interrupted prescreen at start, one claims it; a
  claim is taken again when it outlived its lease or its process is gone.
- A row the catalog or generate path upserted holds its function's canonical key, so a
  submission of that function under another name loses the unique claim and learns its name.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from normfree.search_space import catalog, parse
from normfree.storage import Repository
from normfree.storage.candidates import CandidateConflict

LEASE = timedelta(minutes=15)
PENDING = {"status": "pending", "ok": False}


def _stored_pending(repo: Repository, name: str = "waiting") -> str:
    row = parse("u/(6+u**2)", name=name)
    repo.claim_candidate(row, submitter="t", prescreen=PENDING)
    return name


def test_one_claimant_wins_a_pending_prescreen(repo: Repository) -> None:
    name = _stored_pending(repo)
    assert repo.claim_prescreen(name, "host:1:a", LEASE)
    assert not repo.claim_prescreen(name, "host:2:b", LEASE)  # held: the other process skips
    assert not repo.claim_prescreen("absent", "host:2:b", LEASE)


def test_a_claim_is_taken_again_when_its_lease_ends_or_its_process_is_gone(
    repo: Repository,
) -> None:
    name = _stored_pending(repo)
    assert repo.claim_prescreen(name, "host:1:a", LEASE)
    assert repo.claim_prescreen(name, "host:2:b", timedelta(0))  # expired: taken
    # a holder known dead is replaced at once; only the named holder, not a live one
    assert not repo.claim_prescreen(name, "host:3:c", LEASE, gone=lambda h: h == "host:1:a")
    assert repo.claim_prescreen(name, "host:3:c", LEASE, gone=lambda h: h == "host:2:b")


def test_a_finished_prescreen_ends_its_claim(repo: Repository) -> None:
    name = _stored_pending(repo)
    assert repo.claim_prescreen(name, "host:1:a", LEASE)
    repo.set_candidate_prescreen(name, {"status": "done", "ok": True})
    assert repo.claim_prescreen(name, "host:2:b", LEASE)


def test_a_submission_written_with_its_claim_is_not_claimed_again(repo: Repository) -> None:
    row = parse("u/(8+u**2)", name="fresh")
    repo.claim_candidate(row, submitter="t", prescreen=PENDING, prescreen_claimant="host:1:a")
    assert not repo.claim_prescreen("fresh", "host:2:b", LEASE)


@pytest.mark.parametrize("entry", ["erf", "tanh"])
def test_an_upserted_catalog_row_holds_its_function(repo: Repository, entry: str) -> None:
    """The probe: catalog and generate rows were upserted without a canonical key, so a user's
    claim of the same function under a new name stored a second row."""
    repo.upsert_candidate(catalog.get(entry), submitter="catalog")
    mine = parse(catalog.get(entry).formula, name="mine")
    with pytest.raises(CandidateConflict) as lost:
        repo.claim_candidate(mine, submitter="user")
    assert lost.value.field == "canonical" and lost.value.existing["name"] == entry
    assert repo.get_candidate("mine") is None


def test_an_upsert_of_a_function_held_elsewhere_still_stores(repo: Repository) -> None:
    """A second name for a stored function (a generated alias of a claimed row) is kept, its
    key left to the row that holds it; upserting it again changes nothing else."""
    first = parse("u/(2+u**2)", name="first")
    repo.claim_candidate(first, submitter="user")
    alias = parse("u/(2+u**2)", name="alias")
    repo.upsert_candidate(alias)
    repo.upsert_candidate(alias)
    assert {c["name"] for c in repo.list_candidates()} == {"first", "alias"}
    with pytest.raises(CandidateConflict) as lost:
        repo.claim_candidate(parse("u/(2+u**2)", name="third"))
    assert lost.value.existing["name"] == "first"

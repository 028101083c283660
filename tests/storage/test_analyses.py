"""Function analyses kept across restarts (``storage.analyses``), SQLite and PostgreSQL."""

from __future__ import annotations

import math

from normfree.storage import Database, analyses

INFO = ("natural", {"bounded": False, "limit_pos": math.inf, "slope0": 0.415107497421, "t": []})


def test_analyses_round_trip_exactly_by_version(db: Database) -> None:
    """What is stored reads back equal (an infinite limit, a float's last digit, "not a
    catalog function"), and only under the version it was made with."""
    stored = [("shift_h(erf, 1.0)", INFO), ("not_a_function(", None)]
    assert analyses.save(db, "v1", stored) == 2
    assert analyses.load(db, "v1") == sorted(stored, key=lambda x: x[0])
    assert analyses.load(db, "v2") == []
    assert dict(analyses.load(db, "v1"))["shift_h(erf, 1.0)"][1]["limit_pos"] == math.inf


def test_a_name_stored_twice_keeps_its_first_analysis(db: Database) -> None:
    """Two processes may analyse one name; the second store is not an error and changes
    nothing, and a name too long to be an arm is skipped rather than refused."""
    analyses.save(db, "v1", [("erf", INFO)])
    analyses.save(db, "v1", [("erf", ("other", {})), ("x" * 201, INFO), ("tanh", None)])
    assert analyses.load(db, "v1") == [("erf", INFO), ("tanh", None)]
    analyses.save(db, "v2", [("erf", ("other", {}))])
    assert analyses.load(db, "v2") == [("erf", ("other", {}))]
    assert analyses.save(db, "v1", []) == 0

"""docs/architecture.md's "How to extend normfree" is exact: each drilled extension, made in a
scratch copy by editing only the files its section lists, works end to end and is covered by
the existing tests unchanged (see ``drills.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.extend.drills import DRILLS, Drill, suite_of
from tests.extend.drills_registry import REGISTRY_DRILLS
from tests.extend.scratch import ROOT, edit, run, scratch_copy

pytestmark = pytest.mark.timeout(900)
ALL_DRILLS = (*DRILLS, *REGISTRY_DRILLS)


@pytest.mark.parametrize("drill", ALL_DRILLS, ids=lambda d: d.what or d.section)
def test_the_doc_lists_exactly_the_files_the_drill_touches(drill: Drill) -> None:
    listed = drill.listed()
    assert listed == set(drill.edits), (drill.section, sorted(listed), sorted(drill.edits))
    # every listed file exists, but a new one the drill creates (a kind's module)
    new = {path for path in listed if any(v in path for _, v in drill.placeholders)}
    assert all((ROOT / path).is_file() for path in listed - new), sorted(listed)


@pytest.mark.parametrize("drill", ALL_DRILLS, ids=lambda d: d.what or d.section)
def test_drill_in_a_scratch_copy(drill: Drill, tmp_path: Path) -> None:
    root = scratch_copy(tmp_path / "checkout")
    for path, change in drill.edits.items():
        edit(root, path, change)
    checks = [(args, {"TRITON_INTERPRET": "1"}) for args in drill.checks]
    checks += [(args, {}) for args in drill.uninterpreted]
    for args, env in checks:
        proc = run(root, list(args), env=env)
        output = (proc.stdout + proc.stderr)[-6000:]
        assert proc.returncode == 0, f"{drill.section}: {' '.join(args)[:200]}\n{output}"


def test_a_row_the_existing_tests_do_not_reach_fails_its_drill(tmp_path: Path) -> None:
    """The drills' pytest wrapper fails when the tests it runs pass without running a test of
    the new row (as a row would whose tests needed an edit in a test file the doc omits)."""
    args = [*suite_of("nosuchrow", "nosuchrow or derived", "tests/search_space/test_primitives.py")]
    proc = run(ROOT, args, env={"NORMFREE_KERNEL_CACHE": str(tmp_path)})
    assert proc.returncode != 0 and "('nosuchrow', [])" in proc.stderr, proc.stderr[-2000:]
    assert "1 passed" in proc.stdout  # the other test ran and passed: only the count fails

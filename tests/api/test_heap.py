"""A server freezes its long-lived heap after the warm-up; a test process (many apps) does not."""

from __future__ import annotations

import gc

from normfree.api import services


def test_freeze_long_lived_only_in_a_server() -> None:
    gc.unfreeze()
    try:
        services.FREEZE_HEAP.clear()
        services.freeze_long_lived()
        assert gc.get_freeze_count() == 0  # apps built by tests never freeze the process

        services.FREEZE_HEAP.set()
        kept = [object() for _ in range(1000)]  # long-lived objects of a "server"
        services.freeze_long_lived()
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        # a full collection no longer walks the frozen heap
        assert len(gc.get_objects()) < frozen
    finally:
        services.FREEZE_HEAP.clear()
        gc.unfreeze()


# A server's start and first fidelity line, in a fresh interpreter (this one has imported and
# allocated everything already): how many objects the line leaves in the collector's reach.
_FIRST_LINE = """
import gc, sys, tempfile, time
from normfree.api import app, lines, services
from normfree.settings import Settings
from normfree.specs import NormSpec
from tests.api.test_reads import _finish, _study

services.FREEZE_HEAP.set()
state = services.ServiceState.open(
    Settings(database_url=f"sqlite:///{tempfile.mkdtemp()}/heap.db"), run_studies=False,
    prescreen=False,
)
_finish(state.repo, _study(state.repo, [NormSpec(name="erf"), NormSpec(name="layernorm")]))
app._warm_up(state, True)
deadline = time.monotonic() + 120
while services.ENRICHER.pending() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)  # the analyses' freeze when their queue runs empty
gc.collect()
before = len(gc.get_objects())
state.settings.fidelity_line_wait_s = 120.0
assert lines.proxy_line(state, "vit-tiny") is not None
while not lines.LINES._settled and time.monotonic() < deadline:
    time.sleep(0.05)
gc.collect()
print(len(gc.get_objects()) - before)
"""


def test_a_servers_first_fidelity_line_leaves_nothing_for_full_collections_to_walk() -> None:
    """The first line imports scipy.stats (~180 modules) and resolves names through sympy: ~40k
    objects that live as long as the process. Left unfrozen after the warm-up's freeze, every
    full collection walked them with the GIL held (55-150 ms on 2 shared cores: the worst
    ``/api/health`` probes of bench_hostile). Now they are imported and frozen before the
    first line computed in the process (``lines.preload_once``) and the rest frozen after it
    (``lines._settle``)."""
    left = int(_in_a_fresh_python(_FIRST_LINE, OMP_NUM_THREADS="1").strip().splitlines()[-1])
    assert left < 5_000, f"{left} objects from the first line stay in the collector's reach"


_SWITCH = """
import sys, tempfile
from normfree.api.app import create_app
from normfree.settings import Settings

url = f"sqlite:///{tempfile.mkdtemp()}/switch.db"
create_app(Settings(database_url=url), run_studies=False, prescreen=False)
print(sys.getswitchinterval())
create_app(
    Settings(database_url=url, gil_switch_interval_s=0.002),
    run_studies=False, prescreen=False, freeze_heap=True,
)
print(sys.getswitchinterval())
"""


def test_a_server_hands_the_gil_over_at_its_setting_and_a_test_app_leaves_it() -> None:
    """Under a writer the builds hold the GIL and the event loop waited up to an interval for
    it each time it gave it up (issue 27): a server process (``freeze_heap``) shortens it; an
    app built in another process (a test, a notebook) leaves that process's interval alone."""
    plain, server = (float(x) for x in _in_a_fresh_python(_SWITCH).split()[-2:])
    assert plain == 0.005  # Python's default, untouched
    assert server == 0.002


def _in_a_fresh_python(code: str, **env: str) -> str:
    """``code``'s stdout, run by a new interpreter from the repository's root (this one has
    imported, allocated and set everything already)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), **env},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_NO_PARSE_LATER = """
import sys
from normfree.api.app import create_app
from normfree.settings import Settings
from normfree.workers.versions import trainer_version
create_app(Settings(database_url="sqlite://"), run_studies=False, prescreen=False, migrate=False)
print(trainer_version.cache_info().currsize, "normfree.kernels._codegen" in sys.modules)
"""


def test_building_the_app_takes_the_source_walks_that_parse() -> None:
    """CPython 3.11 corrupts an ``ast.parse`` that runs beside another thread's (gh-106905):
    the digests that walk sources with it are taken while the app is built, before any request
    or prescreen thread runs, and never again in that process."""
    out = _in_a_fresh_python(_NO_PARSE_LATER).split()
    assert out[-2:] == ["1", "True"]

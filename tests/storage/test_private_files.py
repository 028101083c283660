"""Issue 28, point 7: what normfree writes for itself is this user's only.

Real files under a real umask of 022 (the usual one, which makes 0644 files and 0755 folders):
the SQLite database and its ``-wal``/``-shm``, the kernel cache (generated modules, compiled
libraries, their locks), the catalog index cache, and the embedded Ray's temp root. The embedded
cluster itself is started in ``tests/workers/test_localray.py``, which checks its folders too.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from normfree.kernels import _cache
from normfree.private import private_dir, private_file
from normfree.search_space import catalog_index
from normfree.storage import Database


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_sqlite_database_wal_and_shm_are_0600_in_a_0700_folder(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    path = base / "new" / "deeper" / "normfree.db"
    db = Database(f"sqlite:///{path}")
    try:
        db.migrate()
        with db.engine.connect() as conn:  # hold a connection: -wal and -shm exist meanwhile
            conn.exec_driver_sql("SELECT count(*) FROM studies")
            files = [path, path.with_name("normfree.db-wal"), path.with_name("normfree.db-shm")]
            assert all(f.exists() for f in files), sorted(os.listdir(path.parent))
            assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        db.engine.dispose()
    assert mode(base / "new") == mode(base / "new" / "deeper") == 0o700
    assert mode(base) == 0o755  # a folder that existed keeps its mode


def test_optunas_sibling_database_is_private_too(tmp_path: Path) -> None:
    from normfree import storage
    from normfree.settings import Settings

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'n.db'}")
    handle = storage.open(settings)
    try:
        handle.optuna_storage()
        files = sorted(p.name for p in tmp_path.iterdir())
        assert "n-optuna.db" in files and "n.db" in files
        assert {f: oct(mode(tmp_path / f)) for f in files} == {f: "0o600" for f in files}
    finally:
        handle.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch(mode=0o640)
    os.chmod(path, 0o640)
    db = Database(f"sqlite:///{path}")
    db.migrate()
    db.engine.dispose()
    assert mode(path) == 0o640  # the operator chose it; we only decide what we create


def test_kernel_cache_files_locks_and_folder_are_private(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "kernels"
    module = _cache.load_generated(cache, "torch", "probe", "p" * 20, lambda: "VALUE = 1\n")
    assert module.VALUE == 1
    assert mode(cache) == mode(cache.parent) == 0o700
    written = sorted(p for p in cache.iterdir() if p.is_file())
    modes = {p.name: oct(mode(p)) for p in written}
    assert written and set(modes.values()) == {"0o600"}, modes


def test_a_compiled_library_is_private(tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    from normfree.kernels import _native

    source = "int probe(void) { return 7; }\n"
    _cache.create_once(
        tmp_path / "k" / "lib.so",
        lambda tmp: _native._compile("cc", source, tmp_path / "k" / "lib.c", tmp),
    )
    for name in ("lib.so", "lib.c", "lib.so.lock"):
        assert mode(tmp_path / "k" / name) == 0o600, name


def test_catalog_index_cache_is_private(tmp_path: Path) -> None:
    path = tmp_path / "c" / "catalog-index-x.json"
    catalog_index.write_json(path, {"a": 1})
    assert catalog_index.read_json(path) == {"a": 1}
    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_private_helpers_never_loosen_or_tighten_what_exists(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir(mode=0o755)
    assert mode(private_dir(tmp_path / "open")) == 0o755
    made = private_file(tmp_path / "open" / "a" / "b.txt")
    assert mode(made) == 0o600 and mode(made.parent) == 0o700


def test_embedded_ray_root_is_private_and_refuses_someone_elses(monkeypatch, tmp_path) -> None:
    import tempfile

    from normfree.workers import localray

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    root = localray.private_temp_root()
    assert root.parent == tmp_path and mode(root) == 0o700
    os.chmod(root, 0o777)  # loosened since: taken back
    assert mode(localray.private_temp_root()) == 0o700
    root.rmdir()
    root.write_text("not a folder")
    with pytest.raises(RuntimeError, match="not a folder of this user"):
        localray.private_temp_root()

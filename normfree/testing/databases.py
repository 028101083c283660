"""Scratch PostgreSQL databases for tests and benchmarks.

Every PostgreSQL test works in a database of its own, created on the configured server and
dropped afterwards, so parallel runs and earlier failures never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def scratch_postgres(server_url: str, prefix: str = "normfree_test") -> Iterator[str]:
    """A new database on ``server_url``'s server, named ``prefix`` plus the pid and a random
    suffix (unique across concurrent test processes); dropped on exit, even after a failure."""
    from sqlalchemy.engine import make_url

    from normfree.storage import drop_database, ensure_database, normalize_url

    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    url = make_url(normalize_url(server_url)).set(database=name)
    rendered = url.render_as_string(hide_password=False)
    ensure_database(rendered)
    try:
        yield rendered
    finally:
        drop_database(rendered)

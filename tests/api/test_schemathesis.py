"""Property-based fuzzing of the whole OpenAPI surface: no request may produce a 5xx, on SQLite
and on PostgreSQL (whose stricter types were a source of 500s of their own: issue 28, 5).

schemathesis generates valid and invalid requests for every operation from the app's own
OpenAPI document and sends them through the ASGI app (real routing, validation, handlers and
database). Requests carry a valid write token, so writes reach the services rather than
stopping at auth. The prescreen is off here only: every random valid formula would otherwise
cost seconds of training. Examples per operation are bounded to keep the suite in budget.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from normfree.api import create_app
from normfree.settings import Settings
from normfree.testing.seeding import seed_property_study

# The schema is built at import: schemathesis' lazy ``from_fixture`` loader relies on a private
# pytest attribute that pytest 9 removed. The app's database lives in a temporary directory that
# is removed at interpreter exit; the seeding runs in a fixture (it needs the engine).
_DIR = tempfile.TemporaryDirectory(prefix="normfree-fuzz-")
_SETTINGS = Settings(
    database_url=f"sqlite:///{Path(_DIR.name) / 'normfree.db'}", max_request_bytes=16 * 1024
)
APP = create_app(_SETTINGS, run_studies=False, prescreen=False)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module")
def token() -> Any:
    seed_property_study(_SETTINGS)
    yield APP.state.services.repo.create_token("fuzzer")
    APP.state.services.close()


@pytest.fixture(scope="module")
def postgres_app(postgres_server_url: str) -> Any:
    """The same app over a fresh PostgreSQL database (dropped after): PostgreSQL refuses what
    SQLite stores (NUL in text, integers past 32 bits), so its 500s are its own (issue 28, 5)."""
    from normfree.testing.databases import scratch_postgres

    with scratch_postgres(postgres_server_url, "normfree_fuzz") as url:
        settings_ = Settings(database_url=url, max_request_bytes=16 * 1024)
        app = create_app(settings_, run_studies=False, prescreen=False)
        try:
            seed_property_study(settings_)
            yield app, app.state.services.repo.create_token("fuzzer")
        finally:
            app.state.services.close()
            from tests.api.conftest import _drop_optuna_sibling

            _drop_optuna_sibling(settings_)


# A first request may import scipy or sympy (seconds on a loaded 2-core machine); the check is
# "no 5xx", not speed, so a request may take up to a minute before it counts as a failure.
TIMEOUT_S = 60

FUZZ = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@FUZZ
def test_no_server_errors(case: Any, token: str) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT_S,
        checks=[not_a_server_error, response_schema_conformance],
    )


@pytest.mark.postgres
@schema.parametrize()
@FUZZ
def test_no_server_errors_on_postgres(case: Any, postgres_app: Any) -> None:
    app, token = postgres_app
    case.call_and_validate(
        app=app,
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT_S,
        checks=[not_a_server_error, response_schema_conformance],
    )

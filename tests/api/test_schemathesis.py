"""Property-based fuzzing of the whole OpenAPI surface: no request may produce a 5xx.

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


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: Any, token: str) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"},
        checks=[not_a_server_error, response_schema_conformance],
    )

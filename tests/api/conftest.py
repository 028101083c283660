"""Fixtures for the API tests: a real app over a real database, a write token, seeded studies.

Apps are built with ``run_studies=False``: creating a study plans its rows through the engine but
no Ray cluster starts inside the test process (the engine's own tests run studies end to end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from normfree.api import create_app
from normfree.settings import Settings
from normfree.testing.seeding import Seeded, seed_property_study


@dataclass
class Api:
    """A TestClient over a fresh app plus the handles a test needs."""

    client: TestClient
    settings: Settings
    token: str
    app: Any

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def repo(self) -> Any:
        return self.app.state.services.repo


def raising(exc: Exception) -> Callable[..., Any]:
    """A stand-in for a function that fails: it raises ``exc`` whatever it is called with."""

    def broken(*_a: Any, **_k: Any) -> Any:
        raise exc

    return broken


def internal_error(api: Api, message: str) -> httpx.Response:
    """``GET /api/studies`` answered while its service raises ``RuntimeError(message)``: what a
    client sees of any unexpected failure (a 500 from the app's own handler, not a traceback)."""
    from normfree.api import services

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services, "list_studies", raising(RuntimeError(message)))
        return TestClient(api.app, raise_server_exceptions=False).get("/api/studies")


def _drop_optuna_sibling(settings: Settings) -> None:
    """PostgreSQL: the engine creates ``<db>_optuna`` beside the test database; drop it too."""
    from normfree.storage import drop_database, optuna_storage_url

    if settings.database_url.startswith("postgresql"):
        with suppress(Exception):
            drop_database(optuna_storage_url(settings))


@pytest.fixture
def make_api(tmp_path: Any) -> Iterator[Callable[..., Api]]:
    """Factory: ``make_api(database_url, **settings_overrides)`` -> a started :class:`Api`."""
    opened: list[tuple[TestClient, Settings]] = []

    def factory(database_url: str, *, prescreen: bool = True, **overrides: Any) -> Api:
        settings = Settings(database_url=database_url, **overrides)
        app = create_app(settings, run_studies=False, prescreen=prescreen)
        client = TestClient(app)
        client.__enter__()
        opened.append((client, settings))
        token = app.state.services.repo.create_token(f"tester{len(opened)}")
        return Api(client, settings, token, app)

    yield factory
    for client, settings in opened:
        client.__exit__(None, None, None)
        _drop_optuna_sibling(settings)


@pytest.fixture
def api(make_api: Callable[..., Api], sqlite_database_url: str) -> Api:
    """The app over a fresh SQLite file (most tests)."""
    return make_api(sqlite_database_url, max_request_bytes=16 * 1024)


def wait_for_analyses(api: Api, timeout: float = 120.0) -> None:
    """What a server started after the data does at start: analyse every function with finished
    trials (``api.enrich``), so unfiltered leaderboards show their groups and properties."""
    import time

    from normfree.api import services

    services.warm_up(api.app.state.services)
    deadline = time.monotonic() + timeout
    while services.ENRICHER.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not services.ENRICHER.pending(), "function analyses did not finish"


@pytest.fixture
def seeded(api: Api) -> Seeded:
    """A finished property study in ``api``'s database (synthetic results, one diverged cell),
    its functions analysed as a server started now would have them."""
    out = seed_property_study(api.settings)
    wait_for_analyses(api)
    return out


@pytest.fixture
def half_finished(make_api: Callable[..., Api], database_url: str) -> tuple[Api, int]:
    """An app over a study of erf and LayerNorm (2 seeds) with 2 of its 4 trials finished, and
    its analyses done (else a finishing analysis would change the boards' ETags too); with the
    study's id."""
    from normfree.specs import NormSpec
    from tests.api.test_reads import _finish, _study

    api = make_api(database_url, prescreen=False)
    sid = _study(api.repo, [NormSpec(name="erf"), NormSpec(name="layernorm")])
    _finish(api.repo, sid, limit=2)
    wait_for_analyses(api)
    return api, sid

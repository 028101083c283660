"""One router per resource (candidates, studies, trials, leaderboards, health) plus the pages.

:func:`add_action` is how a router registers a family of POST actions made by one factory
(archive/unarchive, pause/resume/cancel): one place names the operation and documents it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter


def add_action(
    router: APIRouter,
    path: str,
    endpoint: Callable[..., Any],
    *,
    name: str,
    doc: str,
    response_model: Any,
    responses: dict[int | str, dict[str, Any]],
) -> None:
    """Register ``endpoint`` as ``POST path`` named ``name``. The factory-made function carries
    the name and doc too, since FastAPI reads the OpenAPI description from ``__doc__``."""
    endpoint.__name__ = name
    endpoint.__doc__ = doc
    router.add_api_route(
        path,
        endpoint,
        methods=["POST"],
        response_model=response_model,
        responses=responses,
        name=name,
    )

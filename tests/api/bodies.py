"""Request bodies the API tests share: one small property study and one one-row reference set,
and the CSV import of a reference set (``post_csv``).

One definition, so that a change to the study schema is made once; each test states only what it
varies (``study(epochs=100)``, ``reference(name="alices")``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from tests.api.conftest import Api


def study(**changes: Any) -> dict[str, Any]:
    """A one-seed property study of erf under ``shift_h`` 0.5 on vit-tiny: the cheapest body."""
    body: dict[str, Any] = {
        "kind": "property",
        "proxy": "vit-tiny",
        "functions": ["erf"],
        "transform": "shift_h",
        "values": [0.5],
        "seeds": 1,
        "epochs": 1,
    }
    return {**body, **changes}


def reference(name: str = "mine", **changes: Any) -> dict[str, Any]:
    """A reference set of one accuracy row for tanh."""
    row = {
        "setting": "s",
        "family": "vit",
        "metric": "accuracy",
        "direction": "maximize",
        "cell": {"function": "tanh"},
        "value_low": 80,
        "value_high": 80,
    }
    return {"name": name, "source": "my paper", "rows": [row], **changes}


def post_csv(api: Api, path: str, content: str | bytes) -> httpx.Response:
    """POST ``content`` as ``text/csv`` to ``path`` (``/api/references?name=..&source=..``) with
    the test's write token: the form a spreadsheet export arrives in."""
    return api.client.post(path, content=content, headers={**api.auth, "Content-Type": "text/csv"})

"""Headless Chromium for the browser tests: one home for the binary, its flags, the skip rule
and the waits.

Debian's package (``/usr/bin/chromium``) is the browser: Playwright never downloads one here.
Without it a test skips with the reason, except under CI=true where it fails.

Why the waits are long: the test servers wait up to ``NORMFREE_FIDELITY_LINE_WAIT_S`` (120 s,
tests/conftest.py) for a board's first fidelity line, so that lines and reports agree; a browser
that gave up after Playwright's default 30 s failed on a loaded machine while the server was still
doing what it was told. Every wait of a page therefore outlasts the server's.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from normfree.settings import get_settings

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 150_000  # the servers' 120-s line wait plus a margin for the page's own work


def need_chromium() -> None:
    """Skip (fail under CI=true) with the reason when Chromium or Playwright is missing."""
    reason = None
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        reason = "Debian chromium is not installed (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError as exc:
            reason = f"playwright is not importable: {exc}"
    if reason:
        if get_settings().ci:
            pytest.fail(f"{reason} (CI=true: the browser test must run)")
        pytest.skip(reason)


@dataclass
class Tab:
    """A browser context, its first page, and what went wrong in them."""

    ctx: Any
    page: Any
    errors: list[str] = field(default_factory=list)  # uncaught JavaScript exceptions
    outside: list[str] = field(default_factory=list)  # requests that left the live server


@contextmanager
def chromium(tmp_path: Path, base: str | None = None, *, height: int = 1000) -> Iterator[Tab]:
    """A fresh persistent Chromium profile in ``tmp_path`` with one page open; with ``base``,
    every request to anywhere else is recorded in :attr:`Tab.outside` (nothing may leave the
    machine)."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=shutil.which("chromium") or CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": height},
        )
        ctx.set_default_timeout(WAIT_MS)
        ctx.set_default_navigation_timeout(WAIT_MS)
        try:
            tab = Tab(ctx, ctx.new_page())
            tab.page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
            if base is not None:
                ctx.on(
                    "request",
                    lambda req: None if req.url.startswith(base) else tab.outside.append(req.url),
                )
            yield tab
        finally:
            ctx.close()

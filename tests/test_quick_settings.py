"""``normfree.quick_settings`` reads what ``Settings`` reads, or defers to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from normfree import quick_settings
from normfree.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch):
    for field in quick_settings.DEFAULTS:
        monkeypatch.delenv(f"NORMFREE_{field.upper()}", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_defaults_are_the_settings_defaults() -> None:
    for field, default in quick_settings.DEFAULTS.items():
        assert Settings.model_fields[field].default == default
        assert quick_settings.value(field) == getattr(Settings(), field)
    assert quick_settings.cache_dir() == Settings().kernel_cache.parent


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("kernel_cache", "/tmp/x/kernels"),
        ("kernel_cache", "relative/kernels"),
        ("kernel_cache", " padded "),  # deferred: pydantic decides
        *[("checker", t) for t in ("1", "on", "t", "true", "Y", "YES", "0", "Off", "f", "no")],
        ("checker_timeout_seconds", "60"),
        ("checker_timeout_seconds", "1.5"),
        ("checker_timeout_seconds", "5."),
        ("checker_timeout_seconds", "1e3"),  # deferred
        ("checker_timeout_seconds", " 5"),  # deferred
        ("checker_timeout_seconds", "inf"),  # deferred
    ],
)
def test_a_value_reads_as_settings_reads_it(
    monkeypatch: pytest.MonkeyPatch, field: str, text: str
) -> None:
    monkeypatch.setenv(f"NORMFREE_{field.upper()}", text)
    assert quick_settings.value(field) == getattr(Settings(), field)


@pytest.mark.parametrize(
    ("field", "text"),
    [("checker", "maybe"), ("checker", " true"), ("checker", ""), ("checker_timeout_seconds", "0")],
)
def test_a_value_settings_refuses_is_refused(
    monkeypatch: pytest.MonkeyPatch, field: str, text: str
) -> None:
    monkeypatch.setenv(f"NORMFREE_{field.upper()}", text)
    with pytest.raises(ValidationError):
        Settings()
    with pytest.raises(ValidationError):
        quick_settings.value(field)


def test_names_are_case_insensitive_like_pydantic_settings(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("normfree_kernel_cache", "/tmp/lower/kernels")
    assert quick_settings.cache_dir() == Path("/tmp/lower") == Settings().kernel_cache.parent

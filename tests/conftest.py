"""Shared fixtures: every test gets a fresh secret so context ids never leak between tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _app_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYVIA_SECRET", "test-secret")

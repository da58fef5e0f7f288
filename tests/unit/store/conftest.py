"""Fixtures of the store's unit tests (their helpers are in helpers.py)."""

from __future__ import annotations

import pytest

from tests.unit.store.helpers import Clock


@pytest.fixture
def clock() -> Clock:
    """A settable millisecond clock at T0."""
    return Clock()

"""Shared pytest fixtures: brokers (`rdmalog serve` subprocesses or KAFKA_BOOTSTRAP) for the tests."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compat_tests.fixtures import (  # noqa: E402, F401
    bootstrap,
    broker,
    broker_factory,
    local_broker,
    pytest_runtest_makereport,
    session_broker,
)

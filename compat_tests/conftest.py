"""Fixtures for the compat scenarios: one broker per session, or KAFKA_BOOTSTRAP."""

from compat_tests.fixtures import (  # noqa: F401
    bootstrap,
    broker,
    broker_factory,
    local_broker,
    pytest_runtest_makereport,
    session_broker,
)

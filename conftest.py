"""Fixtures for every suite (tests/ and compat_tests/): brokers as `rdmalog serve` subprocesses, or the
external broker named by KAFKA_BOOTSTRAP."""

from compat_tests.fixtures import (  # noqa: F401
    bootstrap,
    broker,
    broker_factory,
    local_broker,
    pytest_runtest_makereport,
    session_broker,
)

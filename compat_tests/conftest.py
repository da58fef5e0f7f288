"""Fixtures for `pytest compat_tests`: the scenarios share one broker, the external KAFKA_BOOTSTRAP
one or an `rdmalog serve` started for the session; a failing scenario's report gets its stderr."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests.brokers import Broker, LiveBrokers

LIVE = LiveBrokers()


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for the whole session, or the external KAFKA_BOOTSTRAP one."""
    with LIVE.session(tmp_path_factory.mktemp("session-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def bootstrap(session_broker: Broker) -> str:
    return session_broker.bootstrap


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = (yield).get_result()
    if report.failed:
        uses_session = "session_broker" in getattr(item, "fixturenames", ())
        report.sections += LIVE.report_sections(item.nodeid, uses_session)

"""Fixtures for tests/: brokers as `rdmalog serve` subprocesses (compat_tests.brokers starts them), or
the external broker named by KAFKA_BOOTSTRAP; a failing test's report gets its brokers' stderr."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.brokers import (
    EXTERNAL_ENV,
    Broker,
    BrokerProcess,
    ExternalBroker,
    LiveBrokers,
    external_bootstrap,
)

LIVE = LiveBrokers()

BrokerFactory = Callable[..., Broker]


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for the whole session, or the external KAFKA_BOOTSTRAP one."""
    with LIVE.session(tmp_path_factory.mktemp("session-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def bootstrap(session_broker: Broker) -> str:
    return session_broker.bootstrap


@pytest.fixture
def broker_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerFactory]:
    """`factory(overrides=None, properties_file=None, local=False)` starts a fresh broker.

    With KAFKA_BOOTSTRAP set it returns the external broker instead, unless `local=True`
    (the test needs restart / the data dir), in which case the test is skipped.
    """
    started: list[BrokerProcess] = []

    def factory(
        overrides: dict[str, str] | None = None,
        properties_file: Path | None = None,
        local: bool = False,
    ) -> Broker:
        ext = external_bootstrap()
        if ext:
            if local or overrides or properties_file is not None:
                pytest.skip(
                    f"{EXTERNAL_ENV}={ext}: this test needs a local broker "
                    "(restart, data dir or config overrides)"
                )
            return ExternalBroker(ext)
        tmp = tmp_path / f"broker{len(started)}"
        broker = LIVE.start(tmp, overrides, properties_file, owner=request.node.nodeid)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        LIVE.close(broker)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> Broker:
    """A fresh broker for one test (or the external one)."""
    return broker_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = (yield).get_result()
    if report.failed:
        uses_session = "session_broker" in getattr(item, "fixturenames", ())
        report.sections += LIVE.report_sections(item.nodeid, uses_session)

"""Pytest fixtures and the failure hook shared by tests/conftest.py and compat_tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.brokers import (
    EXTERNAL_ENV,
    BrokerProcess,
    ExternalBroker,
    external_bootstrap,
)

Broker = BrokerProcess | ExternalBroker

# brokers started by fixtures and not yet closed, with the test that owns each (None: the session's);
# a failing test's report gets the stderr of its brokers
_LIVE: dict[BrokerProcess, str | None] = {}


def _start(
    tmp: Path, overrides: dict[str, str] | None, properties: Path | None, owner: str | None
) -> BrokerProcess:
    broker = BrokerProcess(tmp / "data", overrides, properties, log_dir=tmp)
    _LIVE[broker] = owner
    broker.start()
    return broker


def _close(broker: BrokerProcess) -> None:
    try:
        broker.close()
    finally:
        _LIVE.pop(broker, None)


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for a whole session (compat scenarios), or the external KAFKA_BOOTSTRAP one."""
    ext = external_bootstrap()
    if ext:
        yield ExternalBroker(ext)
        return
    broker = _start(tmp_path_factory.mktemp("session-broker"), None, None, None)
    try:
        yield broker
    finally:
        _close(broker)


@pytest.fixture(scope="session")
def bootstrap(session_broker: Broker) -> str:
    return session_broker.bootstrap


BrokerFactory = Callable[..., Broker]


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
        broker = _start(
            tmp_path / f"broker{len(started)}", overrides, properties_file, request.node.nodeid
        )
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        _close(broker)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> Broker:
    """A fresh broker for one test (or the external one)."""
    return broker_factory()


@pytest.fixture
def local_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A fresh `rdmalog serve` whose data dir the test can read and which it can restart."""
    broker = broker_factory(local=True)
    assert isinstance(broker, BrokerProcess)
    return broker


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        uses_session = "session_broker" in getattr(item, "fixturenames", ())
        for broker, owner in list(_LIVE.items()):
            if owner != item.nodeid and not (owner is None and uses_session):
                continue
            tail = broker.stderr_tail()
            state = "running" if broker.running else f"exited {broker.exit_codes}"
            report.sections.append(
                (f"broker {broker.bootstrap} stderr ({state}, {broker.stderr_path})", tail)
            )


__all__ = [
    "bootstrap",
    "broker",
    "broker_factory",
    "local_broker",
    "pytest_runtest_makereport",
    "session_broker",
]

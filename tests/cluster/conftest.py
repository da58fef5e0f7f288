"""Fixtures of the cluster tests: a real ZooKeeper (Debian's package) shared by the session, each test
in its own chroot of it, and a dedicated server for tests that stop ZooKeeper."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.zookeeper import ZooKeeperServer, missing_reason

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """A `zookeeper.connect` string with a chroot of its own for this test."""
    name = request.node.name.replace("[", "_").replace("]", "").replace("/", "_")[:60]
    return f"{zookeeper_server.connect}/t{next(_chroots)}-{name}"


@pytest.fixture(scope="module")
def module_cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory):
    """Three brokers shared by a module's tests (each test uses topics of its own)."""
    from compat_tests.cluster import BrokerCluster

    connect = f"{zookeeper_server.connect}/m{next(_chroots)}"
    c = BrokerCluster(tmp_path_factory.mktemp("module-cluster"), connect, 3).start()
    yield c
    c.stop()


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test alone (it may stop and restart it)."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    yield server
    server.stop()


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest):
    """Three `rdmalog serve` brokers (ids 1..3) in one ZooKeeper chroot; stopped after the test
    (their stderr tails are printed when the test failed)."""
    from compat_tests.cluster import BrokerCluster

    overrides = getattr(request, "param", None) or {}
    c = BrokerCluster(tmp_path / "cluster", zk_connect, 3, overrides).start()
    yield c
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(c.stderr())
    c.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)

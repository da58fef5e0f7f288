"""The gateway's sans-io bookkeeping of connections: log lines rate-limited per client, connection
counts against max.connections and max.connections.per.ip, the config keys that set them."""

from __future__ import annotations

import logging

import pytest

from gateway.acceptor import ConnectionLimits
from gateway.log_limit import RateLimitedLog
from rdmalog.config import BrokerConfig
from rdmalog.errors import InvalidConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limited(caplog):
    caplog.set_level(logging.INFO, logger="test.limited")
    clock = Clock()
    return RateLimitedLog(logging.getLogger("test.limited"), 3, 10.0, 5, clock=clock), clock


def test_a_client_gets_a_burst_per_interval_then_a_count(limited, caplog):
    rl, clock = limited
    written = [rl.log("10.0.0.1", logging.WARNING, "bad frame %d", i) for i in range(50)]
    assert written.count(True) == 3
    clock.now += 10.0
    assert rl.log("10.0.0.1", logging.WARNING, "bad frame %d", 50)
    assert [r.getMessage() for r in caplog.records] == [
        "bad frame 0",
        "bad frame 1",
        "bad frame 2",
        "bad frame 50 (47 more lines for 10.0.0.1 were not logged)",
    ]


def test_clients_are_limited_apart_and_all_together(limited, caplog):
    rl, _ = limited
    for i in range(10):
        rl.log("10.0.0.1", logging.WARNING, "one %d", i)
    assert rl.log("10.0.0.2", logging.WARNING, "two")  # its own burst
    assert rl.log("10.0.0.3", logging.WARNING, "three")  # 5 lines: the total per interval
    assert not rl.log("10.0.0.4", logging.WARNING, "four")
    assert len(caplog.records) == 5


def test_lines_below_the_level_cost_nothing(limited, caplog):
    rl, _ = limited
    for _ in range(10):
        assert not rl.log("10.0.0.1", logging.DEBUG, "debug")
    assert rl.log("10.0.0.1", logging.WARNING, "still has its burst")


def test_connection_limits_count_per_address_and_in_total():
    limits = ConnectionLimits(max_total=3, max_per_address=2)
    assert limits.admit("a") and limits.admit("a")
    assert not limits.admit("a")
    assert limits.admit("b") and limits.full
    limits.release("a")
    assert not limits.full and limits.admit("a")
    for address in ("a", "a", "b"):
        limits.release(address)
    assert limits.total == 0 and limits.admit("b")


def test_connection_config_keys_have_kafkas_names_defaults_and_checks():
    config = BrokerConfig.from_sources(None, {})
    assert config.get("max.connections") == 2**31 - 1
    assert config.get("max.connections.per.ip") == 2**31 - 1
    assert config.get("connections.max.idle.ms") == 600_000
    assert config.get("queued.max.request.bytes") == -1
    assert config.get("request.receive.timeout.ms") == 60_000
    with pytest.raises(InvalidConfigError, match="must be larger or equal to socket.request"):
        BrokerConfig.from_sources(
            None, {"queued.max.request.bytes": "1000", "socket.request.max.bytes": "2000"}
        )
    with pytest.raises(InvalidConfigError, match="max.connections.per.ip can be set to zero"):
        BrokerConfig.from_sources(None, {"max.connections.per.ip": "0"})
    with pytest.raises(InvalidConfigError, match="max.connections"):
        BrokerConfig.from_sources(None, {"max.connections": "-1"})
    with pytest.raises(InvalidConfigError, match="request.receive.timeout.ms"):
        BrokerConfig.from_sources(None, {"request.receive.timeout.ms": "0"})

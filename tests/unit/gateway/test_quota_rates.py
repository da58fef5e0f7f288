"""Quota resolution (Kafka's precedence of user / client-id entities) and throttle times."""

from __future__ import annotations

from gateway.quotas import QuotaManager, Rate, quota_entities
from rdmalog.security.entity_configs import DEFAULT, Entity, EntityConfigs


def test_precedence_order():
    assert quota_entities("alice", "app") == [
        Entity("alice", "app"),
        Entity("alice", DEFAULT),
        Entity("alice"),
        Entity(DEFAULT, "app"),
        Entity(DEFAULT, DEFAULT),
        Entity(DEFAULT),
        Entity(None, "app"),
        Entity(None, DEFAULT),
    ]


def test_most_specific_entity_wins_and_is_shared():
    configs = EntityConfigs(None)
    configs.alter(
        {
            Entity(DEFAULT): {"producer_byte_rate": "100"},
            Entity("alice"): {"producer_byte_rate": "1000"},
        }
    )
    quotas = QuotaManager(configs, samples=11, window_s=1.0)
    # alice's two clients share users/alice: 1000 B/s over a 10 s measured window = 10000 bytes
    assert quotas.record("alice", "a", 0, 5000, 0, 0.0, now=100.0) == 0
    assert quotas.record("alice", "b", 0, 5000, 0, 0.0, now=100.0) == 0
    assert quotas.record("alice", "b", 0, 1000, 0, 0.0, now=100.0) > 0
    # bob falls back to users/<default> (100 B/s): 1100 bytes is over 1000 in the window
    assert quotas.record("bob", "x", 0, 1100, 0, 0.0, now=100.0) == 1000


def test_throttle_time_as_kafka_computes_it():
    configs = EntityConfigs(None)
    configs.alter({Entity(None, "app"): {"consumer_byte_rate": "1000"}})
    quotas = QuotaManager(configs, samples=11, window_s=1.0)
    # 20000 bytes in a window measured as 10 s: rate 2000, (2000 - 1000) / 1000 * 10 s = 10 s
    assert quotas.record(None, "app", 1, 0, 20000, 0.0, now=50.0) == 10000
    # capped at the whole quota window (11 samples of 1 s)
    assert quotas.record(None, "app", 1, 0, 10**9, 0.0, now=50.0) == 11000


def test_changes_apply_to_the_next_request():
    configs = EntityConfigs(None)
    quotas = QuotaManager(configs, samples=11, window_s=1.0)
    assert not quotas.enabled
    configs.alter({Entity("alice"): {"request_percentage": "10"}})
    assert quotas.enabled
    # 2 s of handling in a 10 s window = 20% of a thread
    assert quotas.record("alice", "c", 3, 0, 0, 2.0, now=10.0) == 10000


def test_rate_window():
    rate = Rate(samples=3, window_s=1.0)
    rate.record(10, now=0.0)
    assert rate.measure(0.0) == (5.0, 2.0)  # a young rate counts (samples - 1) windows
    rate.record(10, now=5.0)  # the first window has expired
    assert rate.measure(5.0) == (5.0, 2.0)

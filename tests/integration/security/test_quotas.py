"""Client quotas: set and described with the Java Admin (what kafka-configs.sh uses), enforced on
Produce and Fetch with throttle_time_ms that confluent-kafka reports (no timing is asserted: the
responses say how long the broker held the client back)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.security.conftest import ADMIN, BOB

TIMEOUT = 30


def _java():
    from compat_tests import java

    return java.or_skip()


def _java_admin(java, broker, user):
    return java.admin(
        broker.listeners["SASL_PLAINTEXT"],
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{user[0]}" password="{user[1]}";',
            "request.timeout.ms": 10000,
            "default.api.timeout.ms": 15000,
        },
    )


def _alter(java, admin, entity: dict[str, str | None], values: dict[str, float | None]) -> None:
    j = java.jvm()
    quota = j.org.apache.kafka.common.quota
    names = j.java.util.HashMap()
    for k, v in entity.items():
        names.put(k, v)
    ops = j.java.util.ArrayList()
    for key, value in values.items():
        ops.add(
            quota.ClientQuotaAlteration.Op(
                key, None if value is None else j.java.lang.Double(value)
            )
        )
    alterations = j.java.util.ArrayList()
    alterations.add(quota.ClientQuotaAlteration(quota.ClientQuotaEntity(names), ops))
    java.wait(admin.alterClientQuotas(alterations).all())


def _describe(java, admin) -> dict[tuple, dict[str, float]]:
    j = java.jvm()
    quota = j.org.apache.kafka.common.quota
    filt = quota.ClientQuotaFilter.all()
    found = java.wait(admin.describeClientQuotas(filt).entities())
    out = {}
    for entry in found.entrySet().toArray():
        entity = tuple(sorted((k, v) for k, v in entry.getKey().entries().items()))
        out[entity] = {k: float(v) for k, v in entry.getValue().items()}
    return out


def test_quotas_through_the_java_admin_and_enforced(secure_broker):
    java = _java()
    broker = secure_broker
    admin = _java_admin(java, broker, ADMIN)
    try:
        _alter(
            java,
            admin,
            {"user": "admin"},
            {"producer_byte_rate": 20000.0, "consumer_byte_rate": 20000.0},
        )
        _alter(java, admin, {"user": None, "client-id": None}, {"request_percentage": 200.0})
        described = _describe(java, admin)
        assert described[(("user", "admin"),)] == {
            "producer_byte_rate": 20000.0,
            "consumer_byte_rate": 20000.0,
        }
        assert described[(("client-id", None), ("user", None))] == {"request_percentage": 200.0}
        bob = _java_admin(java, broker, BOB)
        try:
            with pytest.raises(Exception) as info:
                _alter(java, bob, {"user": "bob"}, {"producer_byte_rate": 1e9})
            assert "ClusterAuthorizationException" in str(info.value)
        finally:
            bob.close()
    finally:
        admin.close()

    topic = f"quota-{uuid.uuid4().hex[:6]}"
    settings = broker.sasl("SASL_SSL", ADMIN)
    creator = AdminClient(settings)
    creator.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    throttles: list[int] = []
    producer = Producer({**settings, "throttle_cb": lambda e: throttles.append(e.throttle_time),
                         "linger.ms": 5, "batch.size": 16384})  # fmt: skip
    payload = b"q" * 1000
    for _ in range(200):  # 200 kB against 20 kB/s
        producer.produce(topic, payload)
        producer.poll(0)
    assert producer.flush(60) == 0
    producer.close()
    assert throttles and max(throttles) > 0, "no produce response carried a throttle time"

    throttles.clear()
    consumer = Consumer({**settings, "group.id": "quota-readers", "auto.offset.reset": "earliest",
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})  # fmt: skip
    consumer.subscribe([topic])
    read = 0
    try:
        for _ in range(600):
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                read += 1
            if read == 200 and throttles:
                break
    finally:
        consumer.close()
    assert read == 200
    assert throttles and max(throttles) > 0, "no fetch response carried a throttle time"

"""What the transaction tests share: reading a partition at either isolation level (confluent-kafka
and kcat), the last stable offset, DescribeTransactions / ListTransactions through the raw client."""

from __future__ import annotations

import shutil
import subprocess
import time

from confluent_kafka import Consumer, TopicPartition

from compat_tests.common import TIMEOUT_S, Deadline
from tests.integration.rawkafka import RawClient

COMMITTED, UNCOMMITTED = "read_committed", "read_uncommitted"
# broker settings that let a test see a transaction time out within seconds
FAST_TIMEOUTS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> list[bytes]:
    """Every readable value of `topic` at `isolation`, from the start to the end the consumer sees
    (the last stable offset for read_committed), in partition then offset order."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = Deadline(TIMEOUT_S)
        while deadline and len(at_end) < partitions:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == m.error()._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise AssertionError(f"consumer error: {m.error()}")
            got[m.partition()].append(m.value())
        assert len(at_end) == partitions, f"{topic}: not at the end within {TIMEOUT_S}s"
        return [v for p in range(partitions) for v in got[p]]
    finally:
        c.close()


def kcat_values(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Partition 0 of `topic` read by kcat from the start to its end at `isolation`."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is not installed (apt package kcat)"
    out = subprocess.run(
        [kcat, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-X", f"isolation.level={isolation}", "-f", "%s\n"],
        capture_output=True, timeout=TIMEOUT_S, check=True,
    )  # fmt: skip
    return out.stdout.splitlines()


def offsets(bootstrap: str, topic: str, isolation: int, partition: int = 0) -> int:
    """The latest offset ListOffsets answers at `isolation` (1: the last stable offset)."""
    with RawClient(bootstrap) as c:
        body = {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
            ],
        }
        return c.call(2, 7, body)["topics"][0]["partitions"][0]["offset"]


def describe(bootstrap: str, txn_id: str) -> dict:
    """DescribeTransactions of `txn_id`, asked of its coordinator (FindCoordinator first: in a
    cluster another broker answers NOT_COORDINATOR)."""
    with RawClient(bootstrap.split(",")[0]) as c:
        found = c.call(10, 3, {"key": txn_id, "key_type": 1})
    at = f"{found['host']}:{found['port']}" if found["error_code"] == 0 else bootstrap.split(",")[0]
    with RawClient(at) as c:
        return c.call(65, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]


def list_transactions(bootstrap: str, states: list[str] | None = None) -> dict[str, str]:
    """transactional id -> state, from ListTransactions v1."""
    with RawClient(bootstrap) as c:
        body = {"state_filters": states or [], "producer_id_filters": [], "duration_filter": -1}
        resp = c.call(66, 1, body)
    assert resp["error_code"] == 0, resp
    return {t["transactional_id"]: t["transaction_state"] for t in resp["transaction_states"]}


def wait_for_state(bootstrap: str, txn_id: str, state: str) -> dict:
    """DescribeTransactions until `txn_id` is in `state` (bounded)."""
    deadline = Deadline(TIMEOUT_S)
    last: dict = {}
    while deadline:
        last = describe(bootstrap, txn_id)
        if last["transaction_state"] == state:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{txn_id} not {state} within {TIMEOUT_S}s: {last}")

"""Transactions with confluent-kafka (librdkafka) and kcat: commit and abort as read_committed and
read_uncommitted consumers see them, a consume-transform-produce loop with exactly-once output
(send_offsets_to_transaction), a producer killed mid-transaction (timed out and aborted), fencing by
a second producer with the same transactional.id, a broker restart and a crash mid-transaction,
DescribeTransactions and ListTransactions."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from compat_tests.common import TIMEOUT_S, Deadline, create_topic  # noqa: E402
from tests.integration.txn_helpers import (  # noqa: E402
    COMMITTED,
    FAST_TIMEOUTS,
    UNCOMMITTED,
    describe,
    kcat_values,
    list_transactions,
    offsets,
    read_values,
    wait_for_state,
)


def _producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    p.init_transactions(TIMEOUT_S)
    return p


def _in_transaction(p: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    p.flush(TIMEOUT_S)
    if commit:
        p.commit_transaction(TIMEOUT_S)
    else:
        p.abort_transaction(TIMEOUT_S)


def test_abort_invisible_to_read_committed_visible_to_read_uncommitted(broker) -> None:
    bootstrap = broker.bootstrap
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    p = _producer(bootstrap, f"t-{topic}")
    _in_transaction(p, topic, [b"c1", b"c2"], commit=True)
    _in_transaction(p, topic, [b"a1", b"a2"], commit=False)
    _in_transaction(p, topic, [b"c3"], commit=True)

    committed = [b"c1", b"c2", b"c3"]
    assert read_values(bootstrap, topic, COMMITTED) == committed
    assert read_values(bootstrap, topic, UNCOMMITTED) == [b"c1", b"c2", b"a1", b"a2", b"c3"]
    assert kcat_values(bootstrap, topic, COMMITTED) == committed
    assert kcat_values(bootstrap, topic, UNCOMMITTED) == [b"c1", b"c2", b"a1", b"a2", b"c3"]
    state = describe(bootstrap, f"t-{topic}")
    assert state["error_code"] == 0 and state["transaction_state"] == "CompleteCommit"


def test_open_transaction_holds_the_last_stable_offset(broker) -> None:
    bootstrap = broker.bootstrap
    topic = f"lso-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    p = _producer(bootstrap, f"t-{topic}")
    _in_transaction(p, topic, [b"c1"], commit=True)  # offsets 0, marker 1
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)  # offset 2
    p.flush(TIMEOUT_S)
    assert offsets(bootstrap, topic, 0) == 3
    assert offsets(bootstrap, topic, 1) == 2  # read_committed stops at the open transaction
    assert read_values(bootstrap, topic, COMMITTED) == [b"c1"]
    assert read_values(bootstrap, topic, UNCOMMITTED) == [b"c1", b"open"]
    state = describe(bootstrap, f"t-{topic}")
    assert state["transaction_state"] == "Ongoing"
    assert state["topics"] == [{"topic": topic, "partitions": [0]}]
    assert list_transactions(bootstrap, ["Ongoing"]).get(f"t-{topic}") == "Ongoing"
    p.commit_transaction(TIMEOUT_S)
    assert offsets(bootstrap, topic, 1) == 4
    assert read_values(bootstrap, topic, COMMITTED) == [b"c1", b"open"]
    assert f"t-{topic}" not in list_transactions(bootstrap, ["Ongoing"])


def test_consume_transform_produce_exactly_once(broker) -> None:
    """Each input record is transformed into exactly one committed output record, although one
    transaction is aborted half-way and its input processed again from the committed offsets."""
    bootstrap = broker.bootstrap
    src, dst = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 2)
    group = f"eos-{uuid.uuid4().hex[:6]}"
    n = 60
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        plain.produce(src, b"%d" % i, partition=i % 2)
    plain.flush(TIMEOUT_S)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": COMMITTED,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = _producer(bootstrap, f"eos-{group}")
    consumer.subscribe([src])
    done, aborted_once = 0, False
    deadline = Deadline(3 * TIMEOUT_S)
    try:
        while done < n and deadline:
            msgs = [m for m in consumer.consume(10, 0.5) if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, b"x" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
            )
            if not aborted_once and done >= n // 3:
                aborted_once = True
                producer.flush(TIMEOUT_S)  # the output is written, then aborted
                producer.abort_transaction(TIMEOUT_S)
                # back to the committed offsets: the aborted batch is processed again
                committed = consumer.committed(consumer.assignment(), timeout=TIMEOUT_S)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(TIMEOUT_S)
            done += len(msgs)
    finally:
        consumer.close()
    assert done == n and aborted_once
    out = read_values(bootstrap, dst, COMMITTED, partitions=2)
    assert sorted(out) == sorted(b"x%d" % i for i in range(n))  # each exactly once
    assert len(read_values(bootstrap, dst, UNCOMMITTED, partitions=2)) > n  # the aborted ones

    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = check.committed(
            [TopicPartition(src, 0), TopicPartition(src, 1)], timeout=TIMEOUT_S
        )
        assert sum(tp.offset for tp in committed) == n
    finally:
        check.close()


_KILLED_PRODUCER = textwrap.dedent(
    """
    import os, sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
                  "transaction.timeout.ms": 2000})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(sys.argv[3], b"doomed-1", partition=0)
    p.produce(sys.argv[3], b"doomed-2", partition=0)
    p.flush(20)
    print("in transaction", flush=True)
    time.sleep(60)
    """
)


def test_producer_killed_mid_transaction_is_timed_out_and_aborted(broker_factory) -> None:
    broker = broker_factory(FAST_TIMEOUTS)
    bootstrap = broker.bootstrap
    topic = f"kill-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    txn_id = f"t-{topic}"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PRODUCER, bootstrap, txn_id, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in transaction"
        assert describe(bootstrap, txn_id)["transaction_state"] == "Ongoing"
        assert offsets(bootstrap, topic, 1) == 0  # the open transaction holds the LSO
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(TIMEOUT_S)
    state = wait_for_state(bootstrap, txn_id, "CompleteAbort")
    assert state["producer_epoch"] >= 1  # bumped: the dead producer's epoch is fenced
    assert offsets(bootstrap, topic, 1) == 3  # past the abort marker
    assert read_values(bootstrap, topic, COMMITTED) == []
    assert read_values(bootstrap, topic, UNCOMMITTED) == [b"doomed-1", b"doomed-2"]
    # the same transactional.id starts again and commits
    p = _producer(bootstrap, txn_id)
    _in_transaction(p, topic, [b"after"], commit=True)
    assert read_values(bootstrap, topic, COMMITTED) == [b"after"]


def test_second_producer_fences_the_first(broker) -> None:
    bootstrap = broker.bootstrap
    topic = f"fence-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    txn_id = f"t-{topic}"
    first = _producer(bootstrap, txn_id)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(TIMEOUT_S)
    second = _producer(bootstrap, txn_id)  # aborts the first's transaction, bumps the epoch
    assert describe(bootstrap, txn_id)["transaction_state"] == "Empty"
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(TIMEOUT_S)
    assert info.value.args[0].fatal(), info.value
    _in_transaction(second, topic, [b"winner"], commit=True)
    assert read_values(bootstrap, topic, COMMITTED) == [b"winner"]
    assert read_values(bootstrap, topic, UNCOMMITTED) == [b"zombie", b"winner"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["restart", "crash"])
def test_broker_restart_mid_transaction(broker_factory, sig) -> None:
    """The coordinator reloads the ongoing transaction from __transaction_state and the partition
    its open transaction (producer state snapshot, or the batches after a crash), the group its
    transactional offsets: the producer goes on and commits; nothing of it is seen before."""
    broker = broker_factory(local=True)
    bootstrap = broker.bootstrap
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    txn_id = f"t-{topic}"
    p = _producer(bootstrap, txn_id)
    _in_transaction(p, topic, [b"before"], commit=False)  # an abort in the index, too
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"})
    p.begin_transaction()
    p.produce(topic, b"one", partition=0)
    p.flush(TIMEOUT_S)
    offset = [TopicPartition(topic, 0, 1)]
    p.send_offsets_to_transaction(offset, group.consumer_group_metadata(), TIMEOUT_S)
    assert group.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset < 0
    broker.restart(sig)
    assert describe(bootstrap, txn_id)["transaction_state"] == "Ongoing"
    assert offsets(bootstrap, topic, 1) == 2  # still held at the open transaction
    assert read_values(bootstrap, topic, COMMITTED) == []
    p.produce(topic, b"two", partition=0)
    p.commit_transaction(TIMEOUT_S)
    assert group.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset == 1
    group.close()
    assert read_values(bootstrap, topic, COMMITTED) == [b"one", b"two"]
    assert read_values(bootstrap, topic, UNCOMMITTED) == [b"before", b"one", b"two"]
    broker.restart(sig)
    assert read_values(bootstrap, topic, COMMITTED) == [b"one", b"two"]
    assert describe(bootstrap, txn_id)["transaction_state"] == "CompleteCommit"


def test_transactional_id_expires(broker_factory) -> None:
    broker = broker_factory(
        {
            "transactional.id.expiration.ms": "1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
        }
    )
    bootstrap = broker.bootstrap
    topic = f"exp-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    txn_id = f"t-{topic}"
    p = _producer(bootstrap, txn_id)
    _in_transaction(p, topic, [b"v"], commit=True)
    deadline = Deadline(TIMEOUT_S)
    while deadline and txn_id in list_transactions(bootstrap):
        time.sleep(0.1)
    assert txn_id not in list_transactions(bootstrap)
    assert describe(bootstrap, txn_id)["error_code"] == 105  # TRANSACTIONAL_ID_NOT_FOUND

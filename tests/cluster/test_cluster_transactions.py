"""Exactly-once transactions on a three-broker cluster, as Kafka's ZooKeeper mode runs them: the
leader of an id's `__transaction_state` partition coordinates it, markers go to each partition's
leader over the inter-broker listener. confluent-kafka, the Java client and kafka-python commit and
abort across partitions led by different brokers; the coordinator's broker (and a partition
leader) is killed with kill -9 mid-transaction and during the commit; a consume-transform-produce
loop whose group and transaction coordinators are different brokers; produce-side verification
asking a remote coordinator; DescribeProducers at each partition's leader."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from compat_tests.cluster import BrokerCluster, wait_for
from gateway.groups.schema import partition_for
from tests.cluster.clients import create_topic
from tests.integration.rawkafka import RawClient
from tests.integration.txn_helpers import COMMITTED, UNCOMMITTED, read_values

TXN_PARTITIONS = 4
OVERRIDES = {
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
}
STATE = "__transaction_state"


def _find(cluster: BrokerCluster, key: str, key_type: int) -> int:
    """The broker FindCoordinator names for a group (0) or a transactional id (1), waiting while
    its topic is being created."""

    def ask() -> int | None:
        with RawClient(cluster.broker(1).bootstrap) as c:
            got = c.call(10, 3, {"key": key, "key_type": key_type})
        return got["node_id"] if got["error_code"] == 0 else None

    return wait_for(f"a coordinator of {key}", ask)


def _state_leaders(cluster: BrokerCluster) -> list[int]:
    """`__transaction_state` created (FindCoordinator) and every partition of it led."""
    _find(cluster, "probe", 1)
    return [
        wait_for("a state partition leader", lambda p=p: max(cluster.leader(STATE, p), 0))
        for p in range(TXN_PARTITIONS)
    ]


def _coordinator(cluster: BrokerCluster, txn_id: str) -> int:
    """The transaction coordinator of `txn_id`: the leader of its `__transaction_state` partition."""
    node = _find(cluster, txn_id, 1)
    assert node == cluster.leader(STATE, partition_for(txn_id, TXN_PARTITIONS))
    return node


def _spread_topic(cluster: BrokerCluster, name: str, partitions: int = 3) -> list[int]:
    """A topic whose partitions are led by different brokers; their leaders."""
    create_topic(cluster.bootstrap, name, partitions=partitions)
    leaders = [wait_for("a leader", lambda p=p: max(cluster.leader(name, p), 0)) for p in range(3)]
    assert len(set(leaders)) > 1, leaders
    return leaders


def _producer(cluster: BrokerCluster, txn_id: str, **conf: object) -> Producer:
    p = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, **conf}  # type: ignore[dict-item]
    )
    p.init_transactions(60)
    return p


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_confluent_commit_and_abort_across_brokers(cluster: BrokerCluster) -> None:
    topic = "eos-spread"
    _spread_topic(cluster, topic)
    txn_id = "spread-1"
    p = _producer(cluster, txn_id)
    coordinator = _coordinator(cluster, txn_id)
    committed = []
    for round_, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        for i in range(6):
            value = b"%s-%d-%d" % (b"c" if commit else b"a", round_, i)
            p.produce(topic, value, partition=i % 3)
            if commit:
                committed.append(value)
        if commit:
            p.commit_transaction(30)
        else:
            assert p.flush(30) == 0  # written, then aborted
            p.abort_transaction(30)
    assert sorted(read_values(cluster.bootstrap, topic, COMMITTED, 3)) == sorted(committed)
    everything = read_values(cluster.bootstrap, topic, UNCOMMITTED, 3)
    assert len(everything) == 30 and set(committed) <= set(everything)
    # the coordinator answers for the id; the others send the client there
    with RawClient(cluster.broker(coordinator).bootstrap) as c:
        state = c.call(65, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
    assert state["transaction_state"] == "CompleteCommit", state
    other = next(b for b in cluster.brokers if b != coordinator)
    with RawClient(cluster.broker(other).bootstrap) as c:
        state = c.call(65, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
    assert state["error_code"] == 16  # NOT_COORDINATOR


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_kill_coordinator_mid_transaction(cluster: BrokerCluster) -> None:
    """kill -9 the coordinator with a transaction open: its successor loads the id from the
    replicated `__transaction_state`, aborts the transaction after transaction.timeout.ms (no
    aborted record visible to read_committed, the last stable offset moves on), and a new producer
    of the same id commits through it; nothing committed before is lost."""
    topic = "eos-kill"
    _spread_topic(cluster, topic)
    txn_id = "killed-1"
    p = _producer(cluster, txn_id, **{"transaction.timeout.ms": 4000})
    coordinator = _coordinator(cluster, txn_id)
    p.begin_transaction()
    first = [b"before-%d" % i for i in range(6)]
    for i, v in enumerate(first):
        p.produce(topic, v, partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, b"open-%d" % i, partition=i % 3)
    assert p.flush(30) == 0  # written, the transaction left open
    cluster.broker(coordinator).stop(signal.SIGKILL)
    successor = wait_for(
        "a new coordinator",
        lambda: (
            (n := cluster.leader(STATE, partition_for(txn_id, TXN_PARTITIONS)))
            not in (-1, coordinator)
            and n
        ),
    )
    del p  # the producer is gone with the transaction it had open
    # the new coordinator times the transaction out and aborts it: read_committed sees no more
    assert sorted(read_values(cluster.bootstrap, topic, COMMITTED, 3)) == sorted(first)

    def aborted() -> bool:
        with RawClient(cluster.broker(successor).bootstrap) as c:
            s = c.call(65, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
        return s["transaction_state"] == "CompleteAbort"

    wait_for("the timed-out transaction aborted", aborted)
    again = _producer(cluster, txn_id)
    again.begin_transaction()
    after = [b"after-%d" % i for i in range(6)]
    for i, v in enumerate(after):
        again.produce(topic, v, partition=i % 3)
    again.commit_transaction(30)
    again.flush(10)
    assert sorted(read_values(cluster.bootstrap, topic, COMMITTED, 3)) == sorted(first + after)
    opened = [v for v in read_values(cluster.bootstrap, topic, UNCOMMITTED, 3) if b"open" in v]
    assert len(opened) == 6  # still in the log, never readable committed


def _pick(prefix: str, leader_of, avoid: int) -> str:
    """An id `prefix-N` whose leader (`leader_of(id)`) is not `avoid`."""
    for i in range(200):
        name = f"{prefix}-{i}"
        if leader_of(name) != avoid:
            return name
    raise AssertionError(f"no {prefix} id led away from broker {avoid}")


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_consume_transform_produce_two_coordinators(cluster: BrokerCluster) -> None:
    """A read-process-write loop with send_offsets_to_transaction: its group's coordinator and
    its transactional id's coordinator are different brokers; the output holds every input
    transformed exactly once and the group's committed offsets are the inputs' ends."""
    src, dst = "ctp-in", "ctp-out"
    _spread_topic(cluster, src)
    _spread_topic(cluster, dst)
    inputs = [b"%d" % i for i in range(60)]
    prod = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i, v in enumerate(inputs):
        prod.produce(src, v, partition=i % 3)
    prod.flush(30)
    # both internal topics exist (FindCoordinator of each kind creates them)
    _find(cluster, "probe", 0)
    _state_leaders(cluster)
    offsets_parts = int(cluster.overrides["offsets.topic.num.partitions"])
    group = "ctp-group"
    group_coordinator = wait_for(
        "a group coordinator",
        lambda: max(cluster.leader("__consumer_offsets", partition_for(group, offsets_parts)), 0),
    )
    txn_id = _pick(
        "ctp-txn",
        lambda t: cluster.leader(STATE, partition_for(t, TXN_PARTITIONS)),
        avoid=group_coordinator,
    )
    assert _coordinator(cluster, txn_id) != group_coordinator
    assert _find(cluster, group, 0) == group_coordinator
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([src])
    producer = _producer(cluster, txn_id)
    seen = 0
    deadline = time.monotonic() + 60
    rounds = 0
    while seen < len(inputs) and time.monotonic() < deadline:
        msgs = consumer.consume(20, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, b"x" + m.value(), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if rounds == 1:  # one round aborted: its input is processed again
            producer.abort_transaction(30)
            for tp in consumer.committed(consumer.assignment(), 30):
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
        else:
            producer.commit_transaction(30)
            seen += len(msgs)
        rounds += 1
    consumer.close()
    out = read_values(cluster.bootstrap, dst, COMMITTED, 3)
    assert sorted(out) == sorted(b"x" + v for v in inputs)
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    got = check.committed([TopicPartition(src, p) for p in range(3)], timeout=30)
    check.close()
    assert sum(tp.offset for tp in got) == len(inputs)


def _java():
    from compat_tests import java

    return java.or_skip()


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_java_transactions_on_a_cluster(cluster: BrokerCluster) -> None:
    """The Java client's single-broker scenario (offsets sent to the transaction, abort, fencing
    by a second producer) against the cluster, then commit and abort across partitions led by
    different brokers read by a Java read_committed consumer."""
    from tests.integration.test_transactions_clients import (
        test_java_transactions_offsets_and_fencing as single_broker_scenario,
    )

    java = _java()
    single_broker_scenario(cluster)
    jvm = java.jvm()
    topic = f"jspread-{uuid.uuid4().hex[:6]}"
    _spread_topic(cluster, topic)
    producer = java.producer(cluster.bootstrap, transactional_id=f"j-{topic}")
    producer.initTransactions()
    Record = jvm.org.apache.kafka.clients.producer.ProducerRecord
    committed = []
    for round_, commit in enumerate([True, False, True]):
        producer.beginTransaction()
        for i in range(6):
            value = b"j%d-%d" % (round_, i)
            producer.send(Record(topic, i % 3, None, value)).get()
            if commit:
                committed.append(value)
        if commit:
            producer.commitTransaction()
        else:
            producer.abortTransaction()
    producer.close()
    got = java.java_consume(cluster.bootstrap, topic, 3, len(committed), isolation_level=COMMITTED)
    assert sorted(r.value for r in got) == sorted(committed)
    assert sorted(read_values(cluster.bootstrap, topic, COMMITTED, 3)) == sorted(committed)
    # the AdminClient finds the id's coordinator (DescribeTransactions) and asks every broker
    # (ListTransactions)
    admin = java.admin(cluster.bootstrap)
    try:
        ids = jvm.java.util.ArrayList([f"j-{topic}"])
        described = java.wait(admin.describeTransactions(ids).all()).get(f"j-{topic}")
        assert str(described.state()) == "CompleteCommit"  # TransactionState.toString
        listed = {str(t.transactionalId()) for t in java.wait(admin.listTransactions().all())}
        assert f"j-{topic}" in listed, listed
    finally:
        admin.close()


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_transactional_api_errors_before_the_topic(cluster: BrokerCluster) -> None:
    """An id asked of a broker that does not coordinate it is refused NOT_COORDINATOR (before
    `__transaction_state` exists: COORDINATOR_NOT_AVAILABLE), as Kafka answers."""
    with RawClient(cluster.broker(1).bootstrap) as c:
        body = {"transactional_id": "nobody", "transaction_timeout": 1000}
        first = c.call(22, 4, {**body, "producer_id": -1, "producer_epoch": -1})
    assert first["error_code"] in (15, 16), first
    try:
        _producer(cluster, "somebody", **{"transaction.timeout.ms": 5000})
    except KafkaException as exc:  # pragma: no cover - reported with the error
        raise AssertionError(f"init_transactions failed: {exc}") from exc
    node = _coordinator(cluster, "somebody")
    other = next(b for b in cluster.brokers if b != node)
    with RawClient(cluster.broker(other).bootstrap) as c:
        got = c.call(22, 4, {**body, "transactional_id": "somebody", "producer_id": -1,
                             "producer_epoch": -1})  # fmt: skip
    assert got["error_code"] == 16, got


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_describe_producers_on_a_cluster(cluster: BrokerCluster) -> None:
    """The Java AdminClient's describeProducers asks each partition's leader (the partitions led
    by different brokers); a broker that does not lead one answers NOT_LEADER_OR_FOLLOWER."""
    from tests.integration.test_describe_producers import check_describe_producers

    topic = "dp-spread"
    leaders = _spread_topic(cluster, topic)
    check_describe_producers(cluster.bootstrap, topic, 3)
    other = next(b for b in cluster.brokers if b != leaders[0])
    with RawClient(cluster.broker(other).bootstrap) as c:
        got = c.call(61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    assert got["topics"][0]["partitions"][0]["error_code"] == 6


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_kill_coordinator_during_commit(cluster: BrokerCluster) -> None:
    """kill -9 the coordinator while commit_transaction is in flight: the commit is atomic across
    the partitions (all of the transaction readable, or none), and when the client reports
    success, through the new coordinator (which completes a prepared commit it loads), every
    record is readable committed."""
    import threading

    topic = "eos-commit-kill"
    _spread_topic(cluster, topic)
    txn_id = "commit-kill-1"
    p = _producer(cluster, txn_id, **{"transaction.timeout.ms": 4000})
    coordinator = _coordinator(cluster, txn_id)
    p.begin_transaction()
    values = [b"v-%d" % i for i in range(9)]
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 3)
    assert p.flush(30) == 0
    outcome: list = []

    def commit() -> None:
        try:
            p.commit_transaction(60)
            outcome.append("committed")
        except KafkaException as exc:
            outcome.append(exc)

    t = threading.Thread(target=commit)
    t.start()
    cluster.broker(coordinator).stop(signal.SIGKILL)
    t.join(90)
    assert outcome, "commit_transaction did not return"
    readable = read_values(cluster.bootstrap, topic, COMMITTED, 3)
    assert sorted(readable) in ([], sorted(values)), readable  # atomic
    if outcome[0] == "committed":
        assert sorted(readable) == sorted(values)


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_produce_verification_asks_a_remote_coordinator(cluster: BrokerCluster) -> None:
    """KIP-890 verification across brokers: a transactional batch to a partition led by a broker
    that is not the id's coordinator is appended only if the coordinator (asked over the
    inter-broker listener) has the partition in the producer's transaction; a stray one is
    refused INVALID_TXN_STATE and not written."""
    from rdmalog.store.records import Record, build_batch
    from tests.cluster.clients import raw_request

    topic = "eos-verify"
    leaders = _spread_topic(cluster, topic)
    _state_leaders(cluster)  # pick an id led by a broker that leads at most one of the
    # topic's partitions, so that two are led by others
    txn_id = next(
        t
        for t in (f"verify-{i}" for i in range(200))
        if leaders.count(cluster.leader(STATE, partition_for(t, TXN_PARTITIONS))) <= 1
    )
    coordinator = _coordinator(cluster, txn_id)
    remote = [p for p in range(3) if leaders[p] != coordinator]
    assert len(remote) >= 2, (leaders, coordinator)
    with RawClient(cluster.broker(coordinator).bootstrap) as c:
        init = {"transactional_id": txn_id, "transaction_timeout": 60000}
        got = c.call(22, 4, {**init, "producer_id": -1, "producer_epoch": -1})
        pid, epoch = got["producer_id"], got["producer_epoch"]
        added = c.call(24, 3, {
            "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [remote[0]]}],
        })  # fmt: skip
    assert (
        added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]
        == 0
    )

    def produce(partition: int, seq: int) -> int:
        batch = build_batch(
            [Record(None, b"v%d" % seq)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=True,
        )
        body = {
            "transactional_id": txn_id,
            "acks": -1,
            "timeout": 10000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}
            ],
        }
        resp = raw_request(cluster.broker(leaders[partition]).bootstrap, 0, 9, body)
        return resp["responses"][0]["partition_responses"][0]["error_code"]

    assert produce(remote[0], 0) == 0  # in the transaction: verified by the coordinator
    assert produce(remote[0], 1) == 0  # the transaction is open there now
    assert produce(remote[1], 0) == 48  # INVALID_TXN_STATE: never added
    assert read_values(cluster.bootstrap, topic, UNCOMMITTED, 3) == [b"v0", b"v1"]

    # a partition leader refuses markers from a deposed coordinator (an older coordinator epoch)
    def marker(coordinator_epoch: int) -> int:
        body = {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
            "topics": [{"name": topic, "partition_indexes": [remote[0]]}],
            "coordinator_epoch": coordinator_epoch,
        }]}  # fmt: skip
        resp = raw_request(cluster.broker(leaders[remote[0]]).bootstrap, 27, 1, body)
        return resp["markers"][0]["topics"][0]["partitions"][0]["error_code"]

    assert marker(9) == 0
    assert marker(3) == 52  # TRANSACTION_COORDINATOR_FENCED
    with RawClient(cluster.broker(leaders[remote[0]]).bootstrap) as c:
        body = {"topics": [{"name": topic, "partition_indexes": [remote[0]]}]}
        (state,) = c.call(61, 0, body)["topics"][0]["partitions"][0]["active_producers"]
    assert (state["producer_id"], state["coordinator_epoch"]) == (pid, 9)
    assert state["current_txn_start_offset"] == -1  # aborted by the marker


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_kill_partition_leader_before_commit(cluster: BrokerCluster) -> None:
    """kill -9 the leader of one of the transaction's partitions (not the coordinator) before the
    commit: the coordinator's markers to it fail until a new leader is elected, then go there
    (the leader looked up again); every record of the transaction becomes readable committed."""
    topic = "eos-leader-kill"
    leaders = _spread_topic(cluster, topic)
    _state_leaders(cluster)
    txn_id = next(
        t
        for t in (f"leader-kill-{i}" for i in range(200))
        if leaders.count(cluster.leader(STATE, partition_for(t, TXN_PARTITIONS))) <= 1
    )
    p = _producer(cluster, txn_id)
    coordinator = _coordinator(cluster, txn_id)
    victim_partition = next(i for i in range(3) if leaders[i] != coordinator)
    victim = leaders[victim_partition]
    p.begin_transaction()
    values = [b"lk-%d" % i for i in range(9)]
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 3)
    assert p.flush(30) == 0  # acks=all: on every replica in sync
    cluster.broker(victim).stop(signal.SIGKILL)
    p.commit_transaction(60)
    wait_for(
        "a new leader",
        lambda: cluster.leader(topic, victim_partition) not in (-1, victim),
    )
    assert sorted(read_values(cluster.bootstrap, topic, COMMITTED, 3)) == sorted(values)


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_kafka_python_transactions_on_a_cluster(cluster: BrokerCluster) -> None:
    """kafka-python's transactional producer: the single-broker scenario (commit, abort, offsets
    sent to the transaction) against the cluster."""
    pytest.importorskip("kafka")
    from tests.integration.test_transactions_clients import (
        test_kafka_python_commit_abort_and_offsets as single_broker_scenario,
    )

    single_broker_scenario(cluster)


@pytest.mark.parametrize("cluster", [OVERRIDES], indirect=True)
def test_transaction_survives_a_controlled_coordinator_move(cluster: BrokerCluster) -> None:
    """SIGTERM the coordinator mid-transaction: controlled shutdown moves its `__transaction_state`
    leaderships; the new leader loads the ongoing transaction from the replicated state and the
    same producer commits it there, every record readable committed."""
    topic = "eos-move"
    _spread_topic(cluster, topic)
    txn_id = "moved-1"
    p = _producer(cluster, txn_id)
    coordinator = _coordinator(cluster, txn_id)
    p.begin_transaction()
    values = [b"m-%d" % i for i in range(9)]
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 3)
    assert p.flush(30) == 0
    cluster.broker(coordinator).stop(signal.SIGTERM)
    successor = wait_for(
        "a new coordinator",
        lambda: (
            (n := cluster.leader(STATE, partition_for(txn_id, TXN_PARTITIONS)))
            not in (-1, coordinator)
            and n
        ),
    )
    p.commit_transaction(60)
    assert sorted(read_values(cluster.bootstrap, topic, COMMITTED, 3)) == sorted(values)
    with RawClient(cluster.broker(successor).bootstrap) as c:
        state = c.call(65, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
    assert state["transaction_state"] == "CompleteCommit", state

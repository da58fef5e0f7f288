"""The ISR under follower faults: min.insync.replicas with 2 and 1 of 3 in sync; a restarted
replica truncates what was never committed (KIP-101) and rejoins; a leader frozen past its session
is fenced and cannot acknowledge acks=all."""

from __future__ import annotations

import signal
import time

from kafka import KafkaProducer
from kafka.errors import KafkaConnectionError, NotEnoughReplicasError

from compat_tests.cluster import BrokerCluster, wait_for
from tests.cluster.clients import create_topic, produce_error, read_all, segment_batches

UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT = 3, 6, 7
NOT_ENOUGH_REPLICAS = 19


def _same_bytes(cluster: BrokerCluster, topic: str) -> None:
    leader = cluster.leader(topic)
    for b in cluster.brokers:
        wait_for(
            f"broker {b} to hold the leader's bytes of {topic}",
            lambda b=b: (
                segment_batches(cluster.broker(b).data_dir, topic)
                == segment_batches(cluster.broker(leader).data_dir, topic)
            ),
            timeout=30,
        )


def test_min_insync_replicas_with_followers_down(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, "mi", min_insync_replicas="2")
    cluster.wait_isr("mi", {1, 2, 3})
    leader = cluster.leader("mi")
    f1, f2 = sorted(set(cluster.brokers) - {leader})
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", retries=0, request_timeout_ms=15000
    )
    producer.send("mi", b"all-three").get(30)

    cluster.broker(f1).stop(signal.SIGKILL)
    cluster.wait_isr("mi", {leader, f2})
    producer.send("mi", b"two-of-three").get(30)  # 2 in sync: acks=all goes on

    cluster.broker(f2).stop(signal.SIGKILL)
    cluster.wait_isr("mi", {leader})
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.broker(leader).bootstrap)

    def partition_seen_by_leader() -> dict | None:
        """The partition in Metadata of the one live broker (the admin client may try a killed
        one first: that attempt is refused, the next goes to the leader)."""
        try:
            return admin.describe_topics(["mi"])[0]["partitions"][0]
        except KafkaConnectionError:
            return None

    # the leader's own Metadata: its watches have the one-member ISR, and both followers offline
    # once their registrations are gone (an ISR can shrink before a killed broker's session ends)
    part = wait_for(
        "the leader sees the ISR and the offline replicas",
        lambda: (
            (p := partition_seen_by_leader()) is not None
            and p["isr_nodes"] == [leader]
            and sorted(p["offline_replicas"]) == [f1, f2]
            and p
        ),
    )
    admin.close()
    assert part["leader_id"] == leader and sorted(part["replica_nodes"]) == [1, 2, 3]
    future = producer.send("mi", b"refused")
    try:
        future.get(30)
        raise AssertionError("acks=all with 1 of 3 in sync was acknowledged")
    except NotEnoughReplicasError:
        pass
    assert produce_error(cluster.broker(leader).bootstrap, "mi", [b"one-copy"], acks=1) == 0
    assert produce_error(cluster.broker(leader).bootstrap, "mi", [b"nope"]) == NOT_ENOUGH_REPLICAS

    cluster.broker(f1).start()
    cluster.broker(f2).start()
    cluster.wait_isr("mi", {1, 2, 3})
    producer.send("mi", b"all-three-again").get(30)
    producer.close()
    log = read_all(cluster.bootstrap, "mi")
    assert log == [b"all-three", b"two-of-three", b"one-copy", b"all-three-again"]
    _same_bytes(cluster, "mi")


def test_old_leader_truncates_what_was_not_committed(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, "kip101")
    cluster.wait_isr("kip101", {1, 2, 3})
    old = cluster.leader("kip101")
    followers = sorted(set(cluster.brokers) - {old})
    assert produce_error(cluster.broker(old).bootstrap, "kip101", [b"committed"]) == 0
    # followers stop fetching; the leader takes acks=1 writes that no follower ever sees ...
    for f in followers:
        cluster.broker(f).proc.send_signal(signal.SIGSTOP)
    try:
        # their pending long polls (replica.fetch.wait.max.ms=200) come back empty first; well
        # under replica.lag.time.max.ms (3 s), so they stay in the ISR
        time.sleep(1.5)
        assert (
            produce_error(cluster.broker(old).bootstrap, "kip101", [b"lost-1", b"lost-2"], acks=1)
            == 0
        )
        cluster.broker(old).stop(signal.SIGKILL)  # ... and dies with them
    finally:
        for f in followers:
            cluster.broker(f).proc.send_signal(signal.SIGCONT)
    new = wait_for(
        "a new leader", lambda: cluster.leader("kip101") in followers and cluster.leader("kip101")
    )
    assert produce_error(cluster.broker(new).bootstrap, "kip101", [b"after"]) == 0
    cluster.broker(old).start()  # a follower now: it truncates the two writes away
    cluster.wait_isr("kip101", {1, 2, 3})
    assert read_all(cluster.bootstrap, "kip101") == [b"committed", b"after"]
    _same_bytes(cluster, "kip101")
    assert "truncating" in cluster.broker(old).stderr_tail(400)


def test_leader_frozen_past_its_session_is_fenced(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, "frozen")
    cluster.wait_isr("frozen", {1, 2, 3})
    stale = cluster.leader("frozen")

    def first_write() -> bool:
        """True once the leader took it; until the leader has applied the state ZooKeeper shows,
        it does not know the partition (a client retries that, nothing was appended)."""
        code = produce_error(cluster.broker(stale).bootstrap, "frozen", [b"before"])
        assert code in (0, UNKNOWN_TOPIC_OR_PARTITION), code
        return code == 0

    wait_for("the leader takes its first write", first_write)
    proc = cluster.broker(stale).proc
    proc.send_signal(signal.SIGSTOP)
    try:
        wait_for("a new leader", lambda: cluster.leader("frozen") not in (-1, stale))
        # an acks=all write sent to the frozen leader waits in its socket until it thaws
        import threading

        codes = []
        t = threading.Thread(
            target=lambda: codes.append(
                produce_error(cluster.broker(stale).bootstrap, "frozen", [b"stale-write"])
            )
        )
        t.start()
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGCONT)
    t.join(30)
    assert codes and codes[0] in (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT), codes
    new = cluster.leader("frozen")
    assert produce_error(cluster.broker(new).bootstrap, "frozen", [b"after"]) == 0
    cluster.wait_isr("frozen", {1, 2, 3})  # the thawed broker follows and rejoins
    assert cluster.leader("frozen") == new
    assert read_all(cluster.bootstrap, "frozen") == [b"before", b"after"]
    _same_bytes(cluster, "frozen")


def test_not_enough_replicas_after_append(cluster: BrokerCluster) -> None:
    """An acks=all write waits for its followers; when both fall out of the ISR before they have it,
    the leader answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the record stays in its log)."""
    import threading

    create_topic(cluster.bootstrap, "after", min_insync_replicas="2")
    cluster.wait_isr("after", {1, 2, 3})
    leader = cluster.leader("after")
    followers = sorted(set(cluster.brokers) - {leader})
    for f in followers:
        cluster.broker(f).proc.send_signal(signal.SIGSTOP)
    codes: list[int] = []
    try:
        time.sleep(1.0)  # their pending long polls come back empty first
        t = threading.Thread(
            target=lambda: codes.append(
                produce_error(cluster.broker(leader).bootstrap, "after", [b"waits"])
            )
        )
        t.start()
        t.join(30)  # replica.lag.time.max.ms (3 s) later the ISR is the leader alone
    finally:
        for f in followers:
            cluster.broker(f).proc.send_signal(signal.SIGCONT)
    assert codes == [20]  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    cluster.wait_isr("after", {1, 2, 3})

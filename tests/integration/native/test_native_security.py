"""The native datapaths' security, on shm and tcp: authenticated control sessions, grants checked
against an authorizer (and withdrawn when it changes), internal topics never granted, region keys
that cannot be guessed or reused, and writes that cannot reach committed bytes.

Attacks go through a real native client's own queue pair and registered memory, as a client that
does not follow the protocol would send them."""

from __future__ import annotations

import secrets
import struct
import time
from pathlib import Path

import pytest

from rdmalog.config import BrokerConfig
from rdmalog.errors import (
    InvalidTopicError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.broker.service import RdmaService
from rdmalog.rdma.client.endpoint import SaslCredentials
from rdmalog.rdma.transport.interface import Status
from rdmalog.security.authorizer import Acl, AclAuthorizer, Operation, ResourceType
from rdmalog.security.sasl import UserStore
from rdmalog.store.log_manager import Store
from rdmalog.store.records import build_batch, validate_batches
from tests.integration.native.helpers import consume, store_records, wait_for

ALICE = SaslCredentials("SCRAM-SHA-256", "alice", "alice-secret")
BOB = SaslCredentials("PLAIN", "bob", "bob-secret")


@pytest.fixture
def secured(tmp_path, kind):
    """A service that requires SASL and authorizes with an ACL table: alice may write topic t,
    bob may read it."""
    st = Store(Path(tmp_path), BrokerConfig.from_sources(None, {"log.dirs": str(tmp_path)}))
    st.open(start_maintenance=False)
    st.create_topic("t", 1)
    acls = AclAuthorizer(
        [
            Acl("User:alice", Operation.WRITE, ResourceType.TOPIC, "t"),
            Acl("User:bob", Operation.READ, ResourceType.TOPIC, "t"),
        ]
    )
    users = UserStore({"alice": "alice-secret", "bob": "bob-secret"})
    svc = RdmaService(st, kind, order_timeout=0.3, credentials=users, authorizer=acls).start()
    yield st, svc, acls
    svc.stop()
    st.close()


def _one(cq, timeout: float = 5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        wcs = cq.wait(0.1)
        if wcs:
            return wcs[0]
    raise AssertionError("no completion")


def _session_ended(client) -> bool:
    """The broker closed the client's control connection (it ended the session)."""
    return wait_for(lambda: not client.ctl.alive(), 15.0)


# -- authentication and authorization ----------------------------------------------------------
def test_control_sessions_must_authenticate(secured, kind):
    st, svc, _ = secured
    with pytest.raises(SaslAuthenticationFailedError, match="requires SASL"):
        Producer(svc.control_address)
    for wrong in (
        SaslCredentials("SCRAM-SHA-256", "alice", "guess"),
        SaslCredentials("PLAIN", "alice", "guess"),
        SaslCredentials("SCRAM-SHA-512", "mallory", "x"),
        SaslCredentials("GSSAPI", "alice", "alice-secret"),
    ):
        with pytest.raises(SaslAuthenticationFailedError):
            Producer(svc.control_address, sasl=wrong)
    for good in (ALICE, SaslCredentials("SCRAM-SHA-512", "alice", "alice-secret")):
        with Producer(svc.control_address, sasl=good) as p:
            p.produce("t", 0, b"by " + good.mechanism.encode())
    assert [r.value for r in store_records(st, "t")] == [b"by SCRAM-SHA-256", b"by SCRAM-SHA-512"]


def test_grants_follow_the_acls_and_are_withdrawn_when_they_change(secured, kind):
    st, svc, acls = secured
    p = Producer(svc.control_address, sasl=ALICE)
    p.produce("t", 0, b"one")
    with pytest.raises(TopicAuthorizationFailedError):  # alice may write t, not read it
        Consumer(svc.control_address, sasl=ALICE).assign([("t", 0)])
    with Producer(svc.control_address, sasl=BOB) as q:  # bob may read t, not write it
        with pytest.raises(TopicAuthorizationFailedError):
            q.produce("t", 0, b"not bob's")
    c = Consumer(svc.control_address, sasl=BOB)
    c.assign([("t", 0)])
    assert [r.value for r in consume(c, 1)] == [b"one"]

    acls.remove(Acl("User:alice", Operation.WRITE, ResourceType.TOPIC, "t"))
    with pytest.raises(TopicAuthorizationFailedError):  # her window went with the ACL
        p.produce("t", 0, b"after the change")
    acls.remove(Acl("User:bob", Operation.READ, ResourceType.TOPIC, "t"))
    st.partition("t", 0).append(build_batch([(None, b"new")]))  # something for bob to READ
    with pytest.raises(TopicAuthorizationFailedError):
        for _ in range(100):  # his next READ fails, and asking again is refused
            c.poll(0.01)
    assert [r.value for r in store_records(st, "t")] == [b"one", b"new"]  # nothing of alice's
    assert all(not f.windows for f in svc.files.values())  # no window of either is left
    assert all(not rf.windows for ps in svc.parts.values() for rf in ps.readers.values())
    p.close()
    c.close()


def test_internal_topics_are_never_granted(broker):
    st, svc = broker
    st.create_topic("__consumer_offsets", 1)
    st.create_topic("__rdmalog_internal", 1)
    with Producer(svc.control_address) as p:
        for topic in ("__consumer_offsets", "__rdmalog_internal"):
            with pytest.raises(InvalidTopicError, match="internal topic"):
                p.produce(topic, 0, b"x")
    c = Consumer(svc.control_address)
    with pytest.raises(InvalidTopicError, match="internal topic"):
        c.assign([("__consumer_offsets", 0)])
    c.close()
    assert store_records(st, "__consumer_offsets") == []


# -- keys -----------------------------------------------------------------------------------------
def _victim(st, svc, topic: str) -> tuple[Producer, Consumer]:
    st.create_topic(topic, 1)
    p = Producer(svc.control_address)
    p.produce(topic, 0, b"secret " * 8)
    c = Consumer(svc.control_address)
    c.assign([(topic, 0)])
    assert consume(c, 1)
    return p, c


def test_a_guessed_key_is_refused_and_ends_the_guessers_session(broker):
    st, svc = broker
    p, c = _victim(st, svc, "victim")
    region = c.parts[("victim", 0)].region
    mallory = Producer(svc.control_address)  # connected, holds no grant
    guess = secrets.randbits(32) | 1
    mallory.qp.post_read(1, mallory.stage, 0, 8, region.addr, guess)
    wc = _one(mallory.cq)
    assert wc.status == Status.REM_ACCESS_ERR
    mallory.qp.post_read(2, mallory.stage, 0, 8, region.addr, guess)
    assert _one(mallory.cq).status == Status.WR_FLUSH_ERR  # its queue pair is in error
    assert _session_ended(mallory)
    assert bytes(mallory.stage.buf[:8]) == bytes(8)  # never the memory
    p.produce("victim", 0, b"still served")  # the victims go on
    assert [r.value for r in consume(c, 1)] == [b"still served"]
    p.close(), c.close(), mallory.close()


def test_another_sessions_key_is_refused_and_ends_the_thiefs_session(broker):
    """Even a key that leaked does not work from another queue pair: what a session is handed is
    a window bound to its own queue pair."""
    st, svc = broker
    p, c = _victim(st, svc, "victim")
    stolen = c.parts[("victim", 0)].region
    thief = Producer(svc.control_address)
    thief.qp.post_read(1, thief.stage, 0, 16, stolen.addr, stolen.rkey)
    assert _one(thief.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(thief)
    assert bytes(thief.stage.buf[:16]) == bytes(16)
    assert [r.value for r in store_records(st, "victim")] == [b"secret " * 8]
    p.close(), c.close(), thief.close()


def test_a_released_key_is_refused(broker):
    st, svc = broker
    p, c = _victim(st, svc, "victim")
    a = c.parts[("victim", 0)]
    old = a.region
    c.control("release", topic="victim", partition=0, base_offset=a.base)
    assert c.qp.read_now(a.mr, 0, 8, old.addr, old.rkey) == Status.REM_ACCESS_ERR
    assert c.ctl.alive()  # a key it held: refused, and nothing more (its access was withdrawn)
    p.close(), c.close()


# -- writes outside the writer's reservation ------------------------------------------------------
@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_a_write_over_committed_bytes_is_refused_and_ends_the_writers_session(broker, mode):
    st, svc = broker
    st.create_topic("w", 1)
    p = Producer(svc.control_address, mode=mode)
    p.produce("w", 0, b"committed " * 10)
    g = p.grants[("w", 0)]
    before = bytes(st.partition("w", 0).segments[-1].mmap[:200])
    p.stage.buf[:8] = b"\xff" * 8
    p.qp.post_write(1, p.stage, 0, 8, g.region.addr + 40, g.region.rkey)  # into batch 0
    assert _one(p.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(p)
    head = st.partition("w", 0).segments[-1]
    assert bytes(head.mmap[:200]) == before
    validate_batches(memoryview(head.mmap)[: head.size], 1 << 20)  # CRCs hold
    assert [r.value for r in store_records(st, "w")] == [b"committed " * 10]
    with Producer(svc.control_address, mode=mode) as q:  # the partition is served on
        q.produce("w", 0, b"next")
    p.close()


def test_a_write_past_the_end_of_the_window_is_refused(broker):
    st, svc = broker
    st.create_topic("w", 1)
    p = Producer(svc.control_address)
    p.produce("w", 0, b"x")
    g = p.grants[("w", 0)]
    p.qp.post_write(1, p.stage, 0, 16, g.region.addr + g.length - 8, g.region.rkey)
    assert _one(p.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(p)
    p.close()


def test_a_write_with_a_window_of_the_word_is_refused(broker):
    """The reservation word's window admits atomics only: a WRITE through it is refused."""
    st, svc = broker
    st.create_topic("w", 1)
    p = Producer(svc.control_address, mode="shared")
    p.produce("w", 0, b"x")
    word = p.grants[("w", 0)].word
    p.qp.post_write(1, p.stage, 0, 8, word.addr, word.rkey)
    assert _one(p.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(p)
    assert [r.value for r in store_records(st, "w")] == [b"x"]
    p.close()


def test_committed_position_moves_the_windows_start(broker):
    """An exclusive producer's window starts where the committed bytes end, also after its own
    later commits: it cannot rewrite what it wrote itself once committed."""
    st, svc = broker
    st.create_topic("w", 1)
    p = Producer(svc.control_address)
    p.produce("w", 0, b"first")
    g = p.grants[("w", 0)]
    end_of_first = g.position
    p.produce("w", 0, b"second")
    p.qp.post_write(1, p.stage, 0, 8, g.region.addr + end_of_first, g.region.rkey)
    assert _one(p.cq).status == Status.REM_ACCESS_ERR
    assert [r.value for r in store_records(st, "w")] == [b"first", b"second"]
    p.close()


def test_word_moved_back_does_not_let_a_kafka_append_overwrite_committed_bytes(broker):
    """A shared holder can FETCH_AND_ADD anything onto the reservation word, e.g. move it back
    to 0: the gateway's next append (which reserves through the word) must not copy its batch
    over committed bytes."""
    st, svc = broker
    st.create_topic("w", 1)
    p = Producer(svc.control_address, mode="shared")
    p.produce("w", 0, b"committed")
    g = p.grants[("w", 0)]
    p.qp.post_fetch_add(1, p.stage, 0, g.word.addr, g.word.rkey, 0)
    assert _one(p.cq).status == Status.SUCCESS
    word = struct.unpack_from("<Q", p.stage.buf, 0)[0]
    p.qp.post_fetch_add(2, p.stage, 0, g.word.addr, g.word.rkey, -(word & ((1 << 48) - 1)))
    assert _one(p.cq).status == Status.SUCCESS
    svc.append("w", 0, build_batch([(None, b"from kafka")]))
    assert [r.value for r in store_records(st, "w")] == [b"committed", b"from kafka"]
    p.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_kafka_consumers_read_what_an_attacker_failed_to_overwrite(broker_factory, transport):
    """On a real `rdmalog serve`: a native producer's committed batch, a write over it through
    its own window and a read with a guessed key (both refused, the session ended), then a Kafka
    consumer checking CRCs reads every batch intact."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    from compat_tests.brokers import free_port
    from tests.integration.native.test_native_with_kafka_clients import _create_topic

    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": transport, "rdma.control.port": str(control_port)}, local=True
    )
    _create_topic(broker.bootstrap, "attacked")
    control = f"127.0.0.1:{control_port}"
    p = Producer(control, transport, mode="shared")
    p.produce("attacked", 0, b"first " * 20)
    g = p.grants[("attacked", 0)]
    p.stage.buf[:8] = b"\x00\xff" * 4
    p.qp.post_write(1, p.stage, 0, 8, g.region.addr + 61, g.region.rkey)  # into its CRC'd bytes
    assert _one(p.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(p)
    p.close()
    mallory = Producer(control, transport)
    mallory.qp.post_write(1, mallory.stage, 0, 8, g.region.addr + 61, secrets.randbits(32) | 1)
    assert _one(mallory.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(mallory)
    mallory.close()
    with Producer(control, transport) as q:
        q.produce("attacked", 0, b"second")

    kc = KafkaConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "check.crcs": True,
        }
    )
    kc.assign([TopicPartition("attacked", 0, 0)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        msg = kc.poll(0.5)
        if msg is not None:
            assert not msg.error(), msg.error()
            got.append((msg.offset(), msg.value()))
    kc.close()
    assert got == [(0, b"first " * 20), (1, b"second")]


def test_a_shared_writer_cannot_write_into_another_writers_reservation(broker, kind):
    if kind == "shm":
        pytest.skip(
            "shm: the initiator executes the FETCH_AND_ADD itself, so the target never sees a "
            "reservation; a shared writer's window there is [committed position, end of file)"
        )
    st, svc = broker
    st.create_topic("w", 1)
    a, b = (
        Producer(svc.control_address, mode="shared"),
        Producer(svc.control_address, mode="shared"),
    )
    a.produce("w", 0, b"a0")
    b.produce("w", 0, b"b0")
    ga, gb = a.grants[("w", 0)], b.grants[("w", 0)]
    order, pos = a._reserve(ga, 64)  # a reserves and has not written yet
    b.stage.buf[:8] = b"intruder"
    b.qp.post_write(1, b.stage, 0, 8, gb.region.addr + pos, gb.region.rkey)
    assert _one(b.cq).status == Status.REM_ACCESS_ERR
    assert _session_ended(b)
    # b's own reservation is its to write
    with Producer(svc.control_address, mode="shared") as c:
        gc = c._grant("w", 0)
        order_c, pos_c = c._reserve(gc, 8)
        c.stage.buf[:8] = b"12345678"
        c.qp.post_write(1, c.stage, 0, 8, gc.region.addr + pos_c, gc.region.rkey)
        assert _one(c.cq).status == Status.SUCCESS
    a.close()
    b.close()

"""KafkaDirect's datapaths end to end over a real Store, on shm and tcp.

Native producers write Kafka v2 batches straight into the head segment file; native consumers read
the files one-sidedly. Every test checks the partition through the store's own read path too, so
what the RDMA side committed is what a Kafka client would fetch.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from rdmalog.config import BrokerConfig
from rdmalog.errors import CorruptRecordError, KafkaError, PolicyViolationError
from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.broker.service import RdmaService
from rdmalog.rdma.client.endpoint import Endpoint
from rdmalog.rdma.client.producer import ACK_BUF, ProduceError, RegisteredSlice
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport import tcp
from rdmalog.rdma.transport._atomic64 import fetch_add
from rdmalog.rdma.transport.interface import Access, Opcode, RemoteRegion, Status
from rdmalog.rdma.wire import (
    ACK,
    AckStatus,
    imm_encode,
    reservation_add,
    word_decode,
)
from rdmalog.store.log_manager import Store
from rdmalog.store.records import build_batch, decode_all
from tests.unit.conftest import crash

KINDS = ["shm", "tcp"]


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def broker(tmp_path, kind):
    st = Store(Path(tmp_path), BrokerConfig.from_sources(None, {"log.dirs": str(tmp_path)}))
    st.open(start_maintenance=False)
    svc = RdmaService(st, kind, order_timeout=0.3).start()
    yield st, svc
    svc.stop()
    st.close()


def store_records(st: Store, topic: str, partition: int = 0):
    """What the store serves over the Kafka path: every committed record."""
    plog = st.partition(topic, partition)
    out, off = [], plog.log_start_offset
    while off < plog.high_watermark:
        fs = plog.read(off, 1 << 20)
        recs = decode_all(fs.read())
        out += [r for r in recs if r.offset >= off]
        off = recs[-1].offset + 1
    return out


def consume(c: Consumer, n: int, rounds: int = 400):
    got = []
    for _ in range(rounds):
        got += c.poll(0.02)
        if len(got) >= n:
            break
    return got


def writer_and_reader(st: Store, svc, topic: str, value: bytes) -> tuple[Producer, Consumer]:
    """A new one-partition topic holding `value`: its producer, and a consumer that read it."""
    st.create_topic(topic, 1)
    p = Producer(svc.control_address)
    p.produce(topic, 0, value)
    c = Consumer(svc.control_address)
    c.assign([(topic, 0)])
    assert [r.value for r in consume(c, 1)] == [value]
    return p, c


def wait_for(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_exclusive_produce_and_consume(broker):
    st, svc = broker
    st.create_topic("t", 1)
    p = Producer(svc.control_address)
    assert p.produce("t", 0, b"v0", key=b"k0") == (0, 0)
    ds = [p.send("t", 0, b"v%d" % i, headers=[("h", b"x")]) for i in range(1, 50)]
    p.flush()
    assert [d.result for d in ds] == [(i, i) for i in range(1, 50)]
    recs = store_records(st, "t")
    assert [r.value for r in recs] == [b"v%d" % i for i in range(50)]
    assert recs[0].key == b"k0" and recs[1].headers == [("h", b"x")]
    c = Consumer(svc.control_address)
    c.assign([("t", 0)])
    got = consume(c, 50)
    assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(50)]
    assert got[0].key == b"k0" and got[1].headers == (("h", b"x"),)
    assert c.poll(0) == []
    p.produce("t", 0, b"late")  # the head file's slot shows the new last readable byte
    assert [r.value for r in consume(c, 1)] == [b"late"]
    c.seek("t", 0, 10)
    assert consume(c, 41)[0].offset == 10
    c.seek("t", 0, -1)  # LATEST: only what comes next
    assert c.poll(0.05) == [] and c.position("t", 0) == 51
    p.produce("t", 0, b"next")
    assert [r.offset for r in consume(c, 1)] == [51]
    c.close()
    p.close()


def test_rolls_follow_files(broker):
    st, svc = broker
    st.create_topic("r", 1, {"segment.bytes": "2048"})
    c = Consumer(svc.control_address, fetch_size=300)
    c.assign([("r", 0)])
    for mode in ("exclusive", "shared"):
        p = Producer(svc.control_address, mode=mode)
        for i in range(60):
            p.send("r", 0, b"%s-%03d" % (mode.encode(), i) + b"." * 40)
        p.flush()
        p.close()
    plog = st.partition("r", 0)
    assert len(plog.segments) > 4
    want = [
        b"%s-%03d" % (m.encode(), i) + b"." * 40 for m in ("exclusive", "shared") for i in range(60)
    ]
    assert [r.value for r in store_records(st, "r")] == want
    got = consume(c, 120)
    assert [r.value for r in got] == want
    assert [r.offset for r in got] == list(range(120))
    assert wait_for(lambda: svc.stats()["readers"] == 1)  # read files were released behind it
    c.close()


def test_partial_batches_and_big_batches(broker):
    st, svc = broker
    st.create_topic("b", 1)
    p = Producer(svc.control_address)
    big = os.urandom(50_000)
    p.send_records("b", 0, [(b"k", big), (None, b"small")]).wait()
    for i in range(20):
        p.send("b", 0, b"%d" % i * 100)
    p.flush()
    c = Consumer(svc.control_address, fetch_size=64)  # every batch spans several READs
    c.assign([("b", 0)])
    got = consume(c, 22)
    assert got[0].value == big and got[1].value == b"small"
    assert [r.value for r in got[2:]] == [b"%d" % i * 100 for i in range(20)]
    c.close()
    p.close()


def _shared_producer(addr: str, kind: str, tag: bytes, n: int, q) -> None:
    p = Producer(addr, kind, mode="shared")
    for i in range(n):
        p.send("s", 0, tag + b"-%04d" % i)
    p.flush(30)
    p.close()
    q.put("ok")


def test_shared_mode_two_processes_and_the_gateway(broker, kind):
    st, svc = broker
    st.create_topic("s", 1, {"segment.bytes": "8192"})
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    n = 150
    procs = [
        ctx.Process(target=_shared_producer, args=(svc.control_address, kind, t, n, q))
        for t in (b"A", b"B")
    ]
    for pr in procs:
        pr.start()
    gw = []
    for i in range(40):  # the gateway's TCP produce path reserves through the same word
        r = svc.append("s", 0, build_batch([(None, b"G-%04d" % i)]))
        gw.append(r.base_offset)
    assert [q.get(timeout=120) for _ in procs] == ["ok", "ok"]
    for pr in procs:
        pr.join(30)
    recs = store_records(st, "s")
    assert [r.offset for r in recs] == list(range(2 * n + 40))  # no hole, nothing twice
    vals = [r.value for r in recs]
    for tag, cnt in ((b"A", n), (b"B", n), (b"G", 40)):
        mine = [v for v in vals if v.startswith(tag)]
        assert mine == [tag + b"-%04d" % i for i in range(cnt)]  # each writer's order kept
    assert gw == sorted(gw)
    assert len(st.partition("s", 0).segments) > 1


def test_gateway_idempotent_appends_into_a_shared_grant(broker):
    """A Kafka idempotent producer's batches through the gateway into a partition a native shared
    producer holds: a retried batch is answered with the original's offsets and not stored twice,
    the native producer's next writes still commit, and a sequence gap is refused with its own
    Kafka error (OUT_OF_ORDER_SEQUENCE_NUMBER, what a Kafka client acts on), not a generic one."""
    from rdmalog.errors import OutOfOrderSequenceError

    st, svc = broker
    st.create_topic("gi", 1)
    p = Producer(svc.control_address, mode="shared")
    assert p.produce("gi", 0, b"native-0") == (0, 0)
    kafka = build_batch([(None, b"kafka-0")], producer_id=11, producer_epoch=0, base_sequence=0)
    assert svc.append("gi", 0, kafka).base_offset == 1
    assert svc.append("gi", 0, kafka).base_offset == 1  # a retry: the original's offset
    assert p.produce("gi", 0, b"native-1") == (2, 2)
    gap = build_batch([(None, b"kafka-9")], producer_id=11, producer_epoch=0, base_sequence=9)
    with pytest.raises(OutOfOrderSequenceError):
        svc.append("gi", 0, gap)
    assert p.produce("gi", 0, b"native-2") == (3, 3)
    p.close()
    assert [r.value for r in store_records(st, "gi")] == [
        b"native-0", b"kafka-0", b"native-1", b"native-2",
    ]  # fmt: skip


def test_gateway_append_into_a_shared_grant_reports_the_log_append_time(broker):
    """On a LogAppendTime topic the gateway's append answers with the time the log stamped on
    its batch (the produce response's log_append_time, which Kafka clients report as the
    record's timestamp), also when it is ordered with a shared producer's writes - it said -1
    there - and a retried idempotent batch gets its original's time, as with no grant."""
    st, svc = broker
    st.create_topic("lt", 1, {"message.timestamp.type": "LogAppendTime"})
    plain = svc.append("lt", 0, build_batch([(None, b"no-grant")]))
    assert plain.log_append_time > 0
    p = Producer(svc.control_address, mode="shared")
    p.produce("lt", 0, b"native")
    kafka = build_batch([(None, b"kafka")], producer_id=12, producer_epoch=0, base_sequence=0)
    res = svc.append("lt", 0, kafka)
    stamped = store_records(st, "lt")[res.base_offset].timestamp
    assert res.log_append_time == stamped >= plain.log_append_time
    assert svc.append("lt", 0, kafka) == res  # the retry: same offsets, same time
    p.close()


def test_a_write_into_a_revoked_file_is_answered_even_once_it_is_forgotten(broker):
    """The gateway's append holds the shared head file itself. If a roll revokes that file and
    the completion loop forgets it (nothing was pending) before the append's write arrives
    behind a predecessor that never comes (a producer killed after reserving), no timeout looks
    at the file again: the write waited forever and the Kafka client got POLICY_VIOLATION after
    7 s. A write into a revoked file is now answered REVOKED at once, and the gateway retries."""
    st, svc = broker
    st.create_topic("fg", 1)
    p = Producer(svc.control_address, mode="shared")
    p.produce("fg", 0, b"native")
    f = svc.parts[("fg", 0)].produce
    dead = word_decode(fetch_add(f.word_mr.buf, 0, reservation_add(100)))[0]  # never written
    order = word_decode(fetch_add(f.word_mr.buf, 0, reservation_add(100)))[0]
    svc.ordering.revoke(f)
    assert wait_for(lambda: f.file_id not in svc.files)  # forgotten: nothing was pending
    answers = []
    svc.ordering.arrive(f, order, 100, lambda *a: answers.append(a))
    assert order == dead + 1 and answers == [(order, AckStatus.REVOKED, -1, -1, 0)]
    p.close()


def test_writes_of_a_dead_session_are_given_up_without_stopping_the_service(broker):
    """A producer dies with a write waiting behind a reservation nobody fills: its session ends
    and its queue pair's buffers are given back, then the wait is given up and the write
    answered ABORTED - on its closed queue pair. That answer went into the released buffer and
    raised in the completion loop, which died: no RDMA write was committed from then on."""
    st, svc = broker
    st.create_topic("dq", 1)
    p = Producer(svc.control_address, mode="shared")
    p.produce("dq", 0, b"before")
    g = p.grants[("dq", 0)]
    f = svc.parts[("dq", 0)].produce
    fetch_add(f.word_mr.buf, 0, reservation_add(100))  # reserved, never written
    batch = build_batch([(None, b"stuck")])
    order, pos = word_decode(fetch_add(f.word_mr.buf, 0, reservation_add(len(batch))))
    p.stage.buf[: len(batch)] = batch
    imm = imm_encode(g.file_id, order)
    p.qp.post_write(7, p.stage, 0, len(batch), g.region.addr + pos, g.region.rkey, imm=imm)
    assert p.cq.wait(5)[0].status == Status.SUCCESS
    assert wait_for(lambda: order in f.pending)  # waits for the reservation before it
    p._teardown()  # killed: no bye, its control connection and queue pair just close
    assert wait_for(lambda: not f.pending)  # given up (ABORTED)
    p2 = Producer(svc.control_address, mode="shared")
    assert p2.send("dq", 0, b"after").wait(5) == (1, 1)
    assert all(t.is_alive() for t in svc._threads)
    p2.close()


def test_bad_control_requests_are_answered_and_the_service_stays_up(broker, caplog):
    """Malformed lines, requests that are not objects, missing or mistyped fields (a float
    partition is not partition 0) get invalid_request naming the problem, logged as the client's
    mistake rather than a failure; a line over the limit is answered and its connection closed."""
    import json
    import logging

    from rdmalog.rdma.control import MAX_LINE

    st, svc = broker
    st.create_topic("c", 1)
    caplog.set_level(logging.INFO, "rdmalog.rdma.control")
    host, _, port = svc.control_address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        f = raw.makefile("rb")
        for line in (b"not json", b"[1, 2]", b"\xff\xfe", b'{"op": 7}'):
            raw.sendall(line + b"\n")
            assert json.loads(f.readline())["error"] == "invalid_request"
        raw.sendall(b"x" * (MAX_LINE + 10) + b"\n")
        assert json.loads(f.readline())["message"] == "request too large"
        assert f.readline() == b""  # then closed
    p = Producer(svc.control_address)  # an attached session reaches the field checks
    for req, says in (
        ({"topic": "c"}, "'produce_access' needs 'partition'"),
        ({"topic": "c", "partition": 0.0}, "'partition' must be int, not float"),
        ({"topic": None, "partition": 0}, "'topic' must be str, not NoneType"),
        ({"topic": "c", "partition": 0, "mode": 1}, "'mode' must be str, not int"),
    ):
        with pytest.raises(ControlError) as e:
            p.control("produce_access", **req)
        assert (e.value.code, e.value.message) == ("invalid_request", says)
    with pytest.raises(ControlError, match="must be int"):
        p.control("read_access", topic="c", partition=0, offset="0")
    assert p.produce("c", 0, b"still served") == (0, 0)
    p.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_seek_outside_the_log_resets_as_kafka_consumers_do(broker):
    """An offset the log does not hold is reset by auto_offset_reset (Kafka's OFFSET_OUT_OF_RANGE
    handling); a negative offset or a partition not assigned is refused at once and changes
    nothing - a refused seek used to leave the partition unread, silently, from then on."""
    st, svc = broker
    st.create_topic("sk", 1)
    p = Producer(svc.control_address)
    for v in (b"a", b"b", b"c"):
        p.send("sk", 0, v)
    p.flush()
    with pytest.raises(ValueError, match="cannot hold a record batch"):
        p.send_batch("sk", 0, b"")
    early = Consumer(svc.control_address)
    early.assign([("sk", 0)], offset=1)
    early.seek("sk", 0, 100)
    assert early.position("sk", 0) == 0
    assert [r.value for r in consume(early, 3)] == [b"a", b"b", b"c"]
    late = Consumer(svc.control_address, auto_offset_reset="latest")
    late.assign([("sk", 0)], offset=0)
    late.seek("sk", 0, 100)
    assert late.position("sk", 0) == 3 and late.poll(0.05) == []
    with pytest.raises(ValueError, match="offsets are >= 0"):
        late.seek("sk", 0, -7)
    with pytest.raises(ValueError, match="not assigned"):
        late.seek("sk", 9, 0)
    assert late.position("sk", 0) == 3
    p.produce("sk", 0, b"d")
    assert [r.value for r in consume(late, 1)] == [b"d"]
    strict = Consumer(svc.control_address, auto_offset_reset="none")  # Kafka's "none"
    strict.assign([("sk", 0)], offset=2)
    with pytest.raises(ControlError, match="offset_out_of_range"):
        strict.seek("sk", 0, 100)
    with pytest.raises(ValueError, match="no reset policy"):
        strict.assign([("sk", 0), ("sk2", 0)])
    for c in (early, late, strict):
        c.close()
    p.close()


def test_paused_partitions_return_nothing_until_resumed(broker):
    """pause/resume as in Kafka clients: a paused partition's records stay where they are (its
    position too) while the others are read; producer and consumer close as context managers."""
    st, svc = broker
    st.create_topic("pz", 2)
    with Producer(svc.control_address) as p:
        for i in range(4):
            p.send("pz", i % 2, b"r%d" % i)
    with Consumer(svc.control_address) as c:
        c.assign([("pz", 0), ("pz", 1)])
        c.pause([("pz", 0)])
        assert c.paused() == [("pz", 0)] and c.assignment() == [("pz", 0), ("pz", 1)]
        got = consume(c, 2)
        assert [(r.partition, r.value) for r in got] == [(1, b"r1"), (1, b"r3")]
        assert c.poll(0.1) == [] and c.position("pz", 0) == 0
        c.resume([("pz", 0)])
        assert [(r.partition, r.value) for r in consume(c, 2)] == [(0, b"r0"), (0, b"r2")]
        with pytest.raises(ValueError, match="not assigned"):
            c.pause([("pz", 7)])
    assert not c.ctl.alive() and not p.ctl.alive()


def test_check_crcs_stops_at_a_corrupt_batch_until_the_application_seeks_past(broker):
    """check_crcs=True (Kafka's check.crcs): the records before a batch whose bytes changed on
    the broker (its CRC-32C no longer matches) are returned, then CorruptRecordError, again on
    every poll, the position at the batch, until a seek past it. Without it the bytes come as
    they are (librdkafka's default)."""
    st, svc = broker
    st.create_topic("crc", 1)
    p = Producer(svc.control_address)
    for v in (b"first-value", b"second-value", b"third-value"):
        p.produce("crc", 0, v)
    mm = st.partition("crc", 0).active_segment.mmap
    at = mm.find(b"second-value")
    mm[at] = ord("S")  # a bit flip on disk, say
    c = Consumer(svc.control_address, check_crcs=True)
    c.assign([("crc", 0)], offset=0)
    assert [r.value for r in c.poll(1.0)] == [b"first-value"]
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="offsets 1-1 fails its CRC-32C"):
            c.poll(0.1)
        assert c.position("crc", 0) == 1
    with pytest.raises(CorruptRecordError):
        c.poll_batches(0.1)
    c.seek("crc", 0, 2)
    assert [r.value for r in consume(c, 1)] == [b"third-value"]
    c.close()
    unchecked = Consumer(svc.control_address)
    unchecked.assign([("crc", 0)], offset=0)
    got = [r.value for r in consume(unchecked, 3)]
    assert got == [b"first-value", b"Second-value", b"third-value"]
    unchecked.close()
    p.close()


def test_a_deleted_topic_is_reported_and_a_new_one_of_its_name_read_on(broker):
    """A consumer of a deleted topic is told (UnknownTopicOrPartition from poll, as long as it
    stays so) instead of polling its old file forever; once a topic of that name exists again it
    keeps its position there, as a Kafka consumer does, and the old log's registrations and
    slots are given back (they used to stay until the session ended)."""
    st, svc = broker
    p, c = writer_and_reader(st, svc, "del", b"x")
    grant = svc.parts[("del", 0)].produce
    st.delete_topic("del")
    assert grant.revoked and not grant.mr.rkey  # the deleted head file is no longer registered
    for _ in range(2):
        with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
            c.poll(0.5)
    st.create_topic("del", 1)
    assert p.produce("del", 0, b"y") == (0, 0)
    assert c.poll(0.2) == [] and c.position("del", 0) == 1
    assert p.produce("del", 0, b"z") == (1, 1)
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(1, b"z")]
    assert svc.stats()["readers"] == 1 and svc.stats()["slots"] == 1
    c.close()
    p.close()


def test_a_corrupt_batch_length_is_reported_instead_of_skipped_or_spun_on(broker):
    """A batch length changed on the broker (the CRC does not cover it) is CorruptRecordError
    after the batches before it, as a CRC mismatch is. One running past the end of its sealed
    file used to make the consumer swap to the next file, silently skipping the rest of this
    one (check_crcs too); one too small for a batch made poll_batches() spin forever."""
    st, svc = broker
    st.create_topic("len", 1, {"segment.bytes": "400"})
    p = Producer(svc.control_address)
    for i in range(6):
        p.produce("len", 0, b"value-%02d" % i + b"." * 30)
    seg = st.partition("len", 0).segments[0]
    assert (seg.base_offset, seg.next_offset) == (0, 3)  # sealed: three batches of one size
    size = struct.unpack_from(">i", seg.mmap, 8)[0] + 12
    struct.pack_into(">i", seg.mmap, 2 * size + 8, size + 40)  # the last runs past the end
    c = Consumer(svc.control_address, check_crcs=True)
    c.assign([("len", 0)], offset=0)
    assert [r.offset for r in c.poll(1.0)] == [0, 1]
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="offsets 2-2 runs past the end of its"):
            c.poll(0.1)
        assert c.position("len", 0) == 2
    c.seek("len", 0, 3)
    assert [r.offset for r in consume(c, 3)] == [3, 4, 5]
    struct.pack_into(">i", seg.mmap, size + 8, -12)  # the second: 0 bytes, with its header
    raw = Consumer(svc.control_address)
    raw.assign([("len", 0)], offset=0)
    got: list = []
    t = threading.Thread(target=lambda: got.append(raw.poll_batches(1.0)), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive() and [b.base_offset for b in got[0]] == [0]
    with pytest.raises(CorruptRecordError, match="offsets 1-1 has an impossible length -12"):
        raw.poll_batches(0.1)
    for client in (c, raw, p):
        client.close()


def test_closing_twice_does_nothing_more(broker):
    """close() of a closed consumer or producer returns; on tcp it used to raise AttributeError
    from the transport device closed the first time (e.g. a `with` block after an explicit
    close)."""
    st, svc = broker
    st.create_topic("cc", 1)
    with Producer(svc.control_address) as p, Consumer(svc.control_address) as c:
        p.produce("cc", 0, b"v")
        c.assign([("cc", 0)])
        assert [r.value for r in consume(c, 1)] == [b"v"]
        c.close()
        p.close()
    c.close()
    p.close()
    assert wait_for(lambda: svc.stats()["qps"] == 0)


def _open_fds() -> int:
    gc.collect()  # what only the garbage holds is given back with it
    return len(os.listdir("/proc/self/fd"))


def test_closed_and_reconnected_clients_give_back_their_descriptors(broker):
    """A client's completion queue was never closed, by close() or by reconnect(): on tcp its
    eventfd (a bare descriptor, which no garbage collection closes) leaked with every client and
    every reconnect, so a process that makes clients (a Spark executor's tasks) or rides broker
    restarts ran out of descriptors."""
    st, svc = broker
    st.create_topic("fd", 1)

    def clients(reconnects: int) -> None:
        with Producer(svc.control_address) as p, Consumer(svc.control_address) as c:
            c.assign([("fd", 0)])
            for _ in range(reconnects):
                p.reconnect(5)
                c.reconnect(5)
            p.produce("fd", 0, b"v")
            assert consume(c, 1)[-1].value == b"v"

    clients(0)  # what stays for the process (imports, the service's own sessions) is there
    assert wait_for(lambda: svc.stats()["qps"] == 0)
    before = _open_fds()
    for _ in range(3):
        clients(3)
    assert wait_for(lambda: _open_fds() <= before)  # the broker's side closes a little later


def test_reassigning_partitions_gives_their_buffers_back(broker):
    """A partition taken out of the assignment gives back its receive buffer: it was kept, one
    registered region per change, and on shm (1024 regions per device) a consumer whose
    assignment changed ~1000 times failed with "region table full"."""
    st, svc = broker
    st.create_topic("ra", 2)
    p = Producer(svc.control_address)
    p.produce("ra", 1, b"one")
    c = Consumer(svc.control_address)
    c.assign([("ra", 0)])
    regions = len(c.device._mrs)
    for i in range(1, 1100):
        c.assign([("ra", i % 2)])
    assert len(c.device._mrs) == regions and c.assignment() == [("ra", 1)]
    assert [r.value for r in consume(c, 1)] == [b"one"]
    c.close()
    p.close()


def test_a_partition_whose_seek_was_refused_is_sought_again_by_poll(broker):
    """assign() of a topic that does not exist yet raises and the partition stays assigned: poll
    raises the same while it lasts, then reads once the topic exists; likewise after a refused
    seek. Such a partition used to stay without a file - never read again, silently, position
    -2 - and assigning it again skipped it. One refused for having no reset policy is not left
    assigned (poll would read it from 0)."""
    st, svc = broker
    c = Consumer(svc.control_address)
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.assign([("later", 0)])
    assert c.assignment() == [("later", 0)]
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.poll(0.05)
    st.create_topic("later", 1)
    p = Producer(svc.control_address)
    p.produce("later", 0, b"x")
    c.assign([("later", 0)])
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(0, b"x")]
    assert c.position("later", 0) == 1
    st.delete_topic("later")
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.seek("later", 0, 0)
    st.create_topic("later", 1)
    p.produce("later", 0, b"y")
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(0, b"y")]
    strict = Consumer(svc.control_address, auto_offset_reset="none")
    with pytest.raises(ValueError, match="no reset policy"):
        strict.assign([("later", 0)])
    assert strict.assignment() == [] and strict.poll(0.05) == []
    for client in (c, strict, p):
        client.close()


def test_records_polled_before_a_refused_seek_are_returned_first(broker):
    """A poll that has taken other partitions' records (their positions moved) when a refused
    seek raises returns those records, and the error with the next poll: raising at once lost
    them. Committing by default skips the partition that has no position yet."""
    st, svc = broker
    st.create_topic("ok", 1)
    p = Producer(svc.control_address)
    for v in (b"a", b"b", b"c"):
        p.produce("ok", 0, v)
    c = Consumer(svc.control_address)
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.assign([("ok", 0), ("later", 0)])
    assert [r.value for r in c.poll(1.0)] == [b"a", b"b", b"c"]
    assert c.position("ok", 0) == 3
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.poll(0.05)
    assert c._to_commit(None) == {("ok", 0): 3}  # "later" holds -2 (earliest), not a position
    with pytest.raises(ValueError, match="negative"):
        c._to_commit({("ok", 0): -1})
    with pytest.raises(ValueError, match="fetch_size"):
        Consumer(svc.control_address, fetch_size=0)
    c.close()
    p.close()


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_a_batch_that_cannot_be_decoded_comes_after_the_records_before_it(
    broker, monkeypatch, decoder
):
    """Without check_crcs, a batch whose records are malformed (bytes changed on the broker) is
    reported as check_crcs reports a CRC mismatch: CorruptRecordError once the records before it
    are returned, again on every poll, the position at it, until a seek past it. The decoder's
    error used to escape poll(), taking with it the records decoded before it (the position
    already past them), and later polls returned nothing, silently."""
    from rdmalog.rdma.client import consumer as consumer_module

    if decoder == "python":
        monkeypatch.setattr(consumer_module, "_c_decode_plain", None)
    st, svc = broker
    st.create_topic("bad", 1)
    p = Producer(svc.control_address)
    for v in (b"first-value", b"second-value", b"third-value", b"fourth-value"):
        p.produce("bad", 0, v)
    mm = st.partition("bad", 0).active_segment.mmap
    mm[mm.find(b"third-value") - 1] = 0x7E  # its length varint now runs past the record
    c = Consumer(svc.control_address)
    c.assign([("bad", 0)], offset=0)
    assert [r.value for r in c.poll(1.0)] == [b"first-value", b"second-value"]
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="offsets 2-2 cannot be decoded"):
            c.poll(0.1)
        assert c.position("bad", 0) == 2
    c.seek("bad", 0, 3)
    assert [r.value for r in consume(c, 1)] == [b"fourth-value"]
    c.close()
    p.close()


@pytest.mark.parametrize("codec", [None, "lz4"])
def test_poll_returns_at_most_max_records_and_keeps_the_rest(broker, codec):
    """poll(max_records=k) returns at most k records - a 256 KiB fetch used to return all it
    decoded - and the rest in order on later polls, the position always the next offset it
    returns (what commit() commits); a batch larger than k is returned across polls.
    poll_batches(max_batches=k) likewise. Compressed batches take the Python decoder."""
    from rdmalog.store.compression import Codec

    st, svc = broker
    st.create_topic("mx", 1)
    p = Producer(svc.control_address)
    kw = {"compression": Codec.LZ4} if codec else {}
    for i in range(0, 50, 10):  # five batches of ten records
        p.send_batch("mx", 0, build_batch([(None, b"v%d" % j) for j in range(i, i + 10)], **kw))
    p.flush()
    c = Consumer(svc.control_address, fetch_size=1 << 18)
    c.assign([("mx", 0)])
    got, sizes = [], []
    for _ in range(100):
        if len(got) == 50:
            break
        recs = c.poll(0.05, max_records=3)
        sizes.append(len(recs))
        got += recs
        assert c.position("mx", 0) == (recs[-1].offset + 1 if recs else len(got))
    assert [r.offset for r in got] == list(range(50)) and max(sizes) == 3
    c.seek("mx", 0, 0)
    batches = c.poll_batches(0.5, max_batches=2)
    assert [b.base_offset for b in batches] == [0, 10] and c.position("mx", 0) == 20
    assert [b.base_offset for b in c.poll_batches(0.5, max_batches=10)] == [20, 30, 40]
    c.close()
    p.close()


def test_records_deleted_under_a_consumer_are_not_served(broker):
    """DeleteRecords (or retention) deletes whole segments a consumer is reading: their read
    registrations are withdrawn before it returns (they were, up to ~20 ms later), its next READ
    fails, and it resets as a Kafka consumer does on OFFSET_OUT_OF_RANGE - it used to read the
    deleted file's records to its end. Only records it had already READ into its own buffer
    before the deletion still come."""
    st, svc = broker
    st.create_topic("dr", 1, {"segment.bytes": "4096"})
    p = Producer(svc.control_address)
    for i in range(100):
        p.send("dr", 0, b"v%03d" % i + b"x" * 100)
    p.flush()
    c = Consumer(svc.control_address)  # 2 KiB READs: about 11 of these batches each
    c.assign([("dr", 0)], offset=0)
    assert [r.offset for r in c.poll(1.0, max_records=3)] == [0, 1, 2]
    plog = st.partition("dr", 0)
    (cut,) = [g for g in plog.segments if g.base_offset < 60 < g.next_offset - 3]
    inside = Consumer(svc.control_address)  # in the segment the deletion cuts into, below 60
    inside.assign([("dr", 0)], offset=cut.base_offset)
    assert [r.offset for r in inside.poll(1.0, max_records=1)] == [cut.base_offset]
    ahead = Consumer(svc.control_address)  # in the same segment, past the new log start
    ahead.assign([("dr", 0)], offset=61)
    assert [r.offset for r in ahead.poll(1.0, max_records=1)] == [61]
    gone = {g.base_offset for g in plog.segments if g.base_offset < 60}
    assert gone & set(svc.parts[("dr", 0)].readers) == {0, cut.base_offset}
    assert plog.delete_records(60) == 60
    assert not gone & set(svc.parts[("dr", 0)].readers)  # withdrawn before DeleteRecords returns
    for consumer, first in ((c, 3), (inside, cut.base_offset + 1), (ahead, 62)):
        got = []
        for _ in range(200):
            got += [r.offset for r in consumer.poll(0.02)]
            if got and got[-1] == 99:
                break
        # only what its one 2 KiB READ before the deletion held (11 batches at most) may come
        # from below the log start; then 60 on, as a Kafka consumer resets
        below = [o for o in got if o < 60]
        assert below == list(range(first, first + len(below))) and len(below) <= 11, got
        assert [o for o in got if o >= 60] == list(range(max(60, first), 100)), got
        consumer.close()
    p.close()


def test_segments_deleted_by_retention_are_withdrawn_before_it_returns(broker):
    """Retention deletes the segments a consumer reads: their read registrations are withdrawn
    by the time the maintenance pass returns, and the consumer resets to the new log start."""
    st, svc = broker
    st.create_topic("rt", 1, {"segment.bytes": "4096", "retention.ms": "60000"})
    p = Producer(svc.control_address)
    for i in range(100):
        p.send("rt", 0, b"v%03d" % i + b"x" * 100)
    p.flush()
    c = Consumer(svc.control_address)
    c.assign([("rt", 0)], offset=0)
    assert [r.offset for r in c.poll(1.0, max_records=3)] == [0, 1, 2]
    assert 0 in svc.parts[("rt", 0)].readers
    plog = st.partition("rt", 0)
    assert plog.apply_retention(plog.clock() + 120_000) > 0  # every segment is past retention
    start = plog.log_start_offset
    assert start == 100 and not svc.parts[("rt", 0)].readers  # the head rolled and went too
    for i in range(100, 105):
        p.send("rt", 0, b"v%03d" % i)
    p.flush()
    got = []
    for _ in range(200):
        got += [r.offset for r in c.poll(0.02)]
        if got and got[-1] == 104:
            break
    below = [o for o in got if o < start]  # what its one READ before the deletion held
    assert below == list(range(3, 3 + len(below))) and len(below) <= 11
    assert [o for o in got if o >= start] == list(range(start, 105))
    c.close()
    p.close()


def test_a_caught_up_consumer_reads_on_after_its_head_file_is_withdrawn(broker):
    """A consumer that has read everything waits on its head file's metadata slot. DeleteRecords
    up to the high watermark, and time retention (which rolls the head and deletes it), withdraw
    that registration: the slot now says the file is sealed and gone, the consumer seeks again
    and reads what comes next. The slot used to be cleared, which the consumer took for
    'nothing new': it waited forever while records arrived."""
    st, svc = broker
    st.create_topic("cw", 2, {"retention.ms": "60000"})
    p = Producer(svc.control_address)
    c = Consumer(svc.control_address)
    c.assign([("cw", 0), ("cw", 1)], offset=0)
    for part in (0, 1):  # the other partition takes the freed slot first, its base is 0 too
        p.produce("cw", part, b"first")
    assert len(consume(c, 2)) == 2 and c.poll(0.05) == []
    plog = st.partition("cw", 0)
    assert plog.delete_records(-1) == 1  # cuts into the head: its registration is withdrawn
    p.produce("cw", 0, b"after-delete")
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(1, b"after-delete")]
    assert c.poll(0.05) == []
    assert plog.apply_retention(plog.clock() + 120_000) == 1  # the head rolled and went
    p.produce("cw", 0, b"after-retention")
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(2, b"after-retention")]
    p.produce("cw", 1, b"other")
    assert [(r.partition, r.value) for r in consume(c, 1)] == [(1, b"other")]
    assert svc.stats()["slots"] == 2
    c.close()
    p.close()


def test_a_consumer_reads_hundreds_of_partitions_at_their_heads(broker):
    """Every head file a consumer reads takes a metadata slot of its session: a session had 64,
    so a consumer of more partitions was refused (no_slot) - rdma.consumer.slots, 1024 now."""
    st, svc = broker
    st.create_topic("wide", 300)
    c = Consumer(svc.control_address)
    c.assign([("wide", i) for i in range(300)])
    assert svc.stats()["slots"] == 300
    p = Producer(svc.control_address)
    p.produce("wide", 299, b"last")
    assert [(r.partition, r.value) for r in consume(c, 1)] == [(299, b"last")]
    c.close()
    p.close()


def test_exclusive_grant_excludes_others(broker):
    st, svc = broker
    st.create_topic("x", 1)
    p = Producer(svc.control_address)
    p.produce("x", 0, b"mine")
    with pytest.raises(PolicyViolationError):
        svc.append("x", 0, build_batch([(None, b"gateway")]))
    p2 = Producer(svc.control_address, mode="shared")
    with pytest.raises(ProduceError, match="^busy: another producer holds this partition$"):
        p2.produce("x", 0, b"other")
    p2.close()
    p.close()
    assert wait_for(lambda: svc.stats()["grants"] == 0)  # released with the session
    assert svc.append("x", 0, build_batch([(None, b"gateway")])).base_offset == 1


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_flush_messages_1_fsyncs_before_the_acknowledgement(broker, mode, monkeypatch):
    """flush.messages=1: an RDMA write, and a gateway append ordered with a shared producer's
    writes, are acknowledged only once fsynced (the log's recovery point covers them), as Kafka
    produce responses are. The acknowledgement used to go out first, the fsync after it: a power
    cut in between lost an acknowledged record. (fsync is slowed down to widen that window.)"""
    st, svc = broker
    st.create_topic("fm", 1, {"flush.messages": "1"})
    plog = st.partition("fm", 0)
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        time.sleep(0.03)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    p = Producer(svc.control_address, mode=mode)
    for i in range(3):
        last = p.produce("fm", 0, b"v%d" % i)[1]
        assert plog.recovery_point > last
    if mode == "shared":  # the gateway's append through the reservation word
        res = svc.append("fm", 0, build_batch([(None, b"kafka")]))
        assert res.base_offset == 3 and plog.recovery_point > res.last_offset
    p.close()


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_corrupt_batch_is_refused(broker, mode):
    st, svc = broker
    st.create_topic("c", 1)
    p = Producer(svc.control_address, mode=mode)
    p.produce("c", 0, b"good0")
    bad = build_batch([(None, b"evil")])
    bad[-1] ^= 0xFF  # breaks the CRC
    d = p.send_batch("c", 0, bad)
    with pytest.raises(CorruptRecordError):
        d.wait(5)
    assert p.produce("c", 0, b"good1") == (1, 1)  # a new grant continues at the committed end
    assert [r.value for r in store_records(st, "c")] == [b"good0", b"good1"]
    p.close()


def test_refused_bytes_in_a_rolled_file_do_not_cost_later_segments_after_a_crash(broker):
    """A refused write leaves its bytes past the head's committed end; the head rolls while a
    consumer's read registration keeps its trim waiting. A crash then (flushed, checkpointed)
    must lose nothing: recovery cuts those bytes, and the file still ends where the next one
    begins. It used to take the cut as a torn log and delete every later segment."""
    st, svc = broker
    st.create_topic("k", 1)
    p = Producer(svc.control_address)
    p.produce("k", 0, b"a")
    c = Consumer(svc.control_address)  # reads the head: its registration holds the mapping
    c.assign([("k", 0)])
    assert [r.value for r in consume(c, 1)] == [b"a"]
    bad = build_batch([(None, b"x" * 500)])
    bad[-1] ^= 0xFF  # breaks the CRC: refused, its bytes stay where they were written
    with pytest.raises(CorruptRecordError):
        p.send_batch("k", 0, bad).wait(5)
    plog = st.partition("k", 0)
    plog.roll()  # segment.ms, say
    assert plog.segments[0].trim_pending
    assert p.produce("k", 0, b"b") == (1, 1) and p.produce("k", 0, b"c") == (2, 2)
    plog.flush()
    st.checkpoint()
    crash(plog)  # kill -9: no trim, no close
    st.opened = False
    st._unlock_dir()
    st2 = Store(st.dir, st.config).open(start_maintenance=False)
    try:
        assert [r.value for r in store_records(st2, "k")] == [b"a", b"b", b"c"]
        assert st2.partition("k", 0).append(build_batch([(None, b"d")])).base_offset == 3
    finally:
        st2.close()
        c.close()
        p.close()


def _reserve_and_die(addr: str, kind: str, q) -> None:
    ep = Endpoint(addr, kind)
    g = ep.ctl.request("produce_access", topic="h", partition=0, mode="shared")
    word = RemoteRegion.from_dict(g["word"])
    atom = ep.device.alloc_mr(8, Access.LOCAL_WRITE)
    ep.qp.post_fetch_add(1, atom, 0, word.addr, word.rkey, reservation_add(200))
    wc = ep.cq.wait(10)[0]
    q.put((wc.status == Status.SUCCESS, word_decode(struct.unpack_from("<Q", atom.buf, 0)[0])))
    q.close()
    q.join_thread()  # the queue's feeder thread would die with us
    os._exit(0)  # dies holding a reservation it never fills


def test_producer_that_reserves_and_dies_leaves_no_hole(broker, kind):
    """The writes behind a reservation whose producer died are aborted and resent under a new
    grant: no hole, nothing lost. Its session's end is the sign: they are given up within
    ORPHAN_GRACE of waiting, not after the order timeout (made 30 s here)."""
    st, svc = broker
    svc.order_timeout = 30.0
    st.create_topic("h", 1)
    p = Producer(svc.control_address, mode="shared")
    p.produce("h", 0, b"before")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    pr = ctx.Process(target=_reserve_and_die, args=(svc.control_address, kind, q))
    pr.start()
    ok, (order, pos) = q.get(timeout=60)
    pr.join(30)
    assert ok and order == 1
    t0 = time.monotonic()
    ds = [p.send("h", 0, b"after-%d" % i) for i in range(5)]
    p.flush(20)  # stuck behind the hole, aborted, resent under a new grant
    assert all(d.result for d in ds) and time.monotonic() - t0 < 10
    recs = store_records(st, "h")
    assert [r.value for r in recs] == [b"before"] + [b"after-%d" % i for i in range(5)]
    assert [r.offset for r in recs] == list(range(6))
    c = Consumer(svc.control_address)
    c.assign([("h", 0)])
    assert len(consume(c, 6)) == 6
    c.close()
    p.close()


def _silent_reservation(svc, kind: str, topic: str, partition: int) -> Endpoint:
    """A live session that reserves 100 bytes of the partition's shared head and writes
    nothing (close it to end the session)."""
    ep = Endpoint(svc.control_address, kind)
    g = ep.ctl.request("produce_access", topic=topic, partition=partition, mode="shared")
    word = RemoteRegion.from_dict(g["word"])
    atom = ep.device.alloc_mr(8, Access.LOCAL_WRITE)
    ep.qp.post_fetch_add(1, atom, 0, word.addr, word.rkey, reservation_add(100))
    assert ep.cq.wait(10)[0].status == Status.SUCCESS
    return ep


def _waited_the_order_timeout(svc, p: Producer, topic: str, partition: int) -> bool:
    """p's next record is committed (offset 1), and only after the whole order timeout: it
    waited behind a silent reservation until that was aborted."""
    t0 = time.monotonic()
    d = p.send(topic, partition, b"after")
    p.flush(20)
    return d.result == (1, 1) and time.monotonic() - t0 >= svc.order_timeout


def test_a_silent_reservation_of_a_live_session_is_waited_for_the_order_timeout(broker, kind):
    """A producer that reserved and has not written yet, its session alive, may still write:
    the writes behind it wait the whole rdma.order.timeout.ms (0.3 s here) before they are
    aborted and resent - the early abort is for reservations of sessions that ended."""
    st, svc = broker
    st.create_topic("s", 1)
    p = Producer(svc.control_address, mode="shared")
    p.produce("s", 0, b"before")
    ep = _silent_reservation(svc, kind, "s", 0)
    assert _waited_the_order_timeout(svc, p, "s", 0)
    ep.close()
    p.close()


def test_a_session_ending_leaves_alone_the_grant_that_reuses_one_of_its_file_ids(broker, kind):
    """A session remembers every file id it was granted; a revoked file is forgotten and its id
    (16 bits) handed out again. When the session ended, it treated the id's new grant, another
    session's, as its own: it marked its silent reservations as orphaned, so a live producer's
    write waiting behind one was given up after 50 ms instead of rdma.order.timeout.ms."""
    st, svc = broker
    st.create_topic("reuse", 2)
    gone = Producer(svc.control_address, mode="shared")
    gone.produce("reuse", 0, b"a")
    old = svc.parts[("reuse", 0)].produce
    svc.ordering.revoke(old)  # as a roll does; then nothing waits in it and it is forgotten
    assert wait_for(lambda: old.file_id not in svc.files)
    svc.grants._file_ids = itertools.count(old.file_id)  # the next grant gets the freed id
    p = Producer(svc.control_address, mode="shared")
    p.produce("reuse", 1, b"before")
    assert svc.parts[("reuse", 1)].produce.file_id == old.file_id
    ep = _silent_reservation(svc, kind, "reuse", 1)
    gone.close()
    assert _waited_the_order_timeout(svc, p, "reuse", 1)
    ep.close()
    p.close()


def _consume_and_die(addr: str, kind: str, q) -> None:
    c = Consumer(addr, kind)
    c.assign([("d", 0), ("d", 1)])
    q.put(len(consume(c, 2)))
    q.close()
    q.join_thread()
    os._exit(0)  # no release, no close: the broker sees the session drop


_FORKS_AND_READS_ON = """
import os, sys
from rdmalog.rdma import Consumer

c = Consumer(sys.argv[1])
c.assign([("fk", 0)])
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: the exit handlers the child inherited run
os.waitpid(pid, 0)
c.assign([("fk", 0), ("fk", 1)])  # a new region: a new file in the device's directory
got = []
for _ in range(100):
    got += [r.value for r in c.poll(0.05)]
    if len(got) == 2:
        break
print(sorted(got))
c.close()
"""


@pytest.mark.parametrize("kind", ["shm"])
def test_a_forked_child_exiting_leaves_its_parents_devices_alone(broker, tmp_path):
    """A process with a native client forks, and the child exits normally: the exit handler of
    each shm device the child inherited removed the parent's /dev/shm directory, so the parent's
    next region (a partition assigned, a buffer registered) failed with FileNotFoundError and the
    broker could not ring its doorbells. Only the process that made a device removes it now."""
    import subprocess
    import sys

    st, svc = broker
    st.create_topic("fk", 2)
    p = Producer(svc.control_address)
    p.produce("fk", 0, b"zero")
    p.produce("fk", 1, b"one")
    p.close()
    script = tmp_path / "forks.py"
    script.write_text(_FORKS_AND_READS_ON)
    run = subprocess.run(
        [sys.executable, str(script), svc.control_address],
        capture_output=True, text=True, timeout=60,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[b'one', b'zero']"


def test_consumer_that_dies_frees_its_slots(broker, kind):
    st, svc = broker
    st.create_topic("d", 2)
    p = Producer(svc.control_address)
    p.produce("d", 0, b"a")
    p.produce("d", 1, b"b")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    pr = ctx.Process(target=_consume_and_die, args=(svc.control_address, kind, q))
    pr.start()
    assert q.get(timeout=60) == 2
    pr.join(30)
    assert wait_for(lambda: svc.stats()["slots"] == 0 and svc.stats()["readers"] == 0)
    p.close()


def test_out_of_bounds_refused(broker):
    st, svc = broker
    st.create_topic("o", 1)
    p = Producer(svc.control_address)
    p.produce("o", 0, b"x")
    with pytest.raises(ControlError, match="offset_out_of_range"):
        p.ctl.request("read_access", topic="o", partition=0, offset=5)
    with pytest.raises(ControlError):
        p.ctl.request("produce_access", topic="nope", partition=0, mode="exclusive")
    g = p.grants[("o", 0)]
    p.stage.buf[:8] = b"garbage!"
    p.qp.post_write(
        99, p.stage, 0, 8, g.region.addr + g.length - 4, g.region.rkey, imm=imm_encode(g.file_id, 9)
    )
    wcs = p.cq.wait(5)
    assert wcs and wcs[0].status != Status.SUCCESS  # past the end of the file: refused
    c = Consumer(svc.control_address)
    c.assign([("o", 0)])
    a = c.parts[("o", 0)]
    assert (
        c.qp.read_now(a.mr, 0, 64, a.region.addr + a.region.length, a.region.rkey) != Status.SUCCESS
    )
    assert [r.value for r in consume(c, 1)] == [b"x"]
    c.close()
    p.close()
    assert st.partition("o", 0).log_end_offset == 1


def test_only_committed_data_is_served(broker):
    st, svc = broker
    p, c = writer_and_reader(st, svc, "u", b"one")
    g = p.grants[("u", 0)]
    batch = build_batch([(None, b"uncommitted")])
    p.stage.buf[: len(batch)] = batch
    p.qp.post_write(7, p.stage, 0, len(batch), g.region.addr + g.position, g.region.rkey)  # no imm
    assert p.cq.wait(5)[0].status == Status.SUCCESS
    assert c.poll(0.1) == []  # written but never committed: invisible
    assert store_records(st, "u")[-1].value == b"one"
    c.close()
    p.close()


def test_head_rolled_by_the_broker_under_a_producer(broker):
    """A roll the producer did not ask for (time roll, gateway append) revokes its grant; the
    next write fails one-sidedly or is answered REVOKED, and is resent to the new head."""
    st, svc = broker
    st.create_topic("g", 1)
    c = Consumer(svc.control_address)
    c.assign([("g", 0)])
    for mode in ("exclusive", "shared"):
        p = Producer(svc.control_address, mode=mode)
        p.produce("g", 0, b"%s-1" % mode.encode())
        st.partition("g", 0).roll()
        assert p.produce("g", 0, b"%s-2" % mode.encode())[0] > 0
        p.close()
    want = [b"exclusive-1", b"exclusive-2", b"shared-1", b"shared-2"]
    assert [r.value for r in store_records(st, "g")] == want
    assert [r.value for r in consume(c, 4)] == want
    c.close()


def test_staging_area_is_reused_as_a_ring_without_draining(broker, monkeypatch):
    """Batches of uneven sizes streamed through a staging area 30x smaller than the data: the
    area is reused as acknowledgements free its oldest bytes (never a flush), and every batch is
    committed intact and in order."""
    st, svc = broker
    st.create_topic("s", 1)
    p = Producer(svc.control_address, staging_bytes=40_000)
    monkeypatch.setattr(p, "flush", lambda *a: pytest.fail("the staging area was drained"))
    values = [bytes([65 + i % 26]) * (2000 + 997 * (i % 9)) for i in range(200)]
    ds = [p.send("s", 0, v) for v in values]
    for d in ds:
        d.wait(10)
    assert [d.result for d in ds] == [(i, i) for i in range(200)]
    assert [r.value for r in store_records(st, "s")] == values
    monkeypatch.undo()
    p.close()


def test_batches_built_in_a_registered_buffer_are_sent_without_staging(broker):
    """send_batch of a registered buffer's slice: the WRITE reads the batch where the application
    built it (the staging area stays untouched), in both modes, across a roll the producer did
    not ask for (the revoked write is resent from the same bytes); a Kafka-path read returns them."""
    st, svc = broker
    st.create_topic("z", 1)
    for mode in ("exclusive", "shared"):
        p = Producer(svc.control_address, mode=mode)
        buf = p.register(bytearray(1 << 16))
        spans, pos = [], 0
        for i in range(3):
            b = bytes(build_batch([(b"k", b"%s-%d" % (mode.encode(), i))]))
            buf.view[pos : pos + len(b)] = b
            spans.append((pos, pos + len(b)))
            pos += len(b)
        p.stage.buf[:pos] = b"\xee" * pos  # a WRITE from staging would now commit garbage
        ds = [p.send_batch("z", 0, buf[a:b]) for a, b in spans[:2]]
        p.flush()
        st.partition("z", 0).roll()  # revokes the grant under the producer
        ds.append(p.send_batch("z", 0, buf[slice(*spans[2])]))
        p.flush()
        assert all(d.error is None for d in ds)
        p.close()
    values = [r.value for r in store_records(st, "z")]
    assert values == [b"%s-%d" % (m, i) for m in (b"exclusive", b"shared") for i in range(3)]
    p = Producer(svc.control_address)
    with pytest.raises(ValueError):
        p.register(b"read-only bytes")
    other = Producer(svc.control_address)
    theirs = other.register(bytearray(64))
    with pytest.raises(ValueError):
        p.send_batch("z", 0, theirs[0:64])
    other.close()
    p.close()


def test_a_registered_buffer_is_unregistered_once_its_batches_are_answered(broker):
    """close() on a registered buffer waits for its batches in flight (a resend would read them
    again), then deregisters it: its slices are refused, the producer goes on with others."""
    st, svc = broker
    st.create_topic("u", 1)
    p = Producer(svc.control_address)
    batch = bytes(build_batch([(None, b"x" * 100)]))
    with p.register(bytearray(len(batch) * 8)) as buf:
        for i in range(8):
            buf.view[i * len(batch) : (i + 1) * len(batch)] = batch
        ds = [p.send_batch("u", 0, buf[i * len(batch) : (i + 1) * len(batch)]) for i in range(8)]
        rkey = buf.mr.rkey
    assert all(d.done and d.error is None for d in ds)  # answered before the deregistration
    assert buf.closed and buf not in p._buffers and rkey not in p.device._mrs
    with pytest.raises(ValueError, match="unregistered"):
        buf[0 : len(batch)]
    with pytest.raises(ValueError, match="unregistered"):
        p.send_batch("u", 0, RegisteredSlice(buf, 0, len(batch)))
    buf.close()  # idempotent
    assert p.produce("u", 0, b"after") == (8, 8)
    p.close()
    assert len(store_records(st, "u")) == 9


def test_a_registered_buffer_closed_after_its_producer_does_nothing_more(broker):
    """A registered buffer closed after its producer (clean-up in any order, `with` blocks): on
    shm it raised TypeError from the device the producer's close() had freed. The producer's
    close() gives its buffers' registrations back with its device; their close() does nothing."""
    st, svc = broker
    st.create_topic("rc", 1)
    with Producer(svc.control_address) as p:
        buf = p.register(bytearray(4096))
        batch = bytes(build_batch([(None, b"x")]))
        buf.view[: len(batch)] = batch
        p.send_batch("rc", 0, buf[0 : len(batch)]).wait(5)
    buf.close()
    assert buf.closed
    with pytest.raises(ValueError, match="unregistered"):
        buf[0 : len(batch)]
    assert [r.value for r in store_records(st, "rc")] == [b"x"]


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_a_duplicate_idempotent_batch_is_answered_and_what_follows_still_commits(broker, mode):
    """A batch of an idempotent producer that was already committed (a resend) is answered with
    the original's offsets and not committed again; the write after it, which sits behind its
    uncommitted bytes, is resent under a new grant and committed - not answered as the duplicate
    (it was, with the duplicate's offsets, and lost, when both had the same length)."""
    st, svc = broker
    st.create_topic("dup", 1)
    p = Producer(svc.control_address, mode=mode)
    idem = bytes(build_batch([(b"k", b"A" * 50)], producer_id=7, producer_epoch=0, base_sequence=0))
    plain = bytes(build_batch([(b"k", b"B" * 50)]))  # same length
    assert len(idem) == len(plain)
    assert p.send_batch("dup", 0, idem).wait(10) == (0, 0)
    again = p.send_batch("dup", 0, idem)
    after = p.send_batch("dup", 0, plain)
    p.flush()
    assert again.result == (0, 0) and again.error is None
    assert after.result == (1, 1) and after.error is None
    assert p.produce("dup", 0, b"C" * 50) == (2, 2)
    # A refusal names its reason with the Kafka error code: here a gap in the sequence.
    gap = build_batch([(b"k", b"D")], producer_id=7, producer_epoch=0, base_sequence=5)
    refused = p.send_batch("dup", 0, gap)
    with pytest.raises(KafkaError) as e:
        refused.wait(10)
    assert e.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER, not "corrupt"
    assert p.produce("dup", 0, b"E") == (3, 3)
    p.close()
    assert [r.value[:1] for r in store_records(st, "dup")] == [b"A", b"B", b"C", b"E"]


def test_a_resend_after_delete_records_is_still_answered_as_a_duplicate(broker):
    """DeleteRecords (or retention) removing the segments that held an idempotent producer's last
    batches made the log forget the producer, so the resend of a batch whose acknowledgement was
    lost was committed a second time. Kafka keeps producer state when the log start offset moves
    (producer.id.expiration.ms bounds it): the resend is answered with the original's offsets."""
    st, svc = broker
    st.create_topic("dr", 1)
    p = Producer(svc.control_address)
    first = bytes(build_batch([(b"k", b"A")], producer_id=11, producer_epoch=0, base_sequence=0))
    assert p.send_batch("dr", 0, first).wait(10) == (0, 0)
    assert st.partition("dr", 0).delete_records(-1) == 1
    assert p.send_batch("dr", 0, first).wait(10) == (0, 0)  # the resend: not stored again
    gap = build_batch([(b"k", b"B")], producer_id=11, producer_epoch=0, base_sequence=5)
    with pytest.raises(KafkaError) as e:
        p.send_batch("dr", 0, gap).wait(10)
    assert e.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: the sequence is still known
    nxt = build_batch([(b"k", b"C")], producer_id=11, producer_epoch=0, base_sequence=1)
    assert p.send_batch("dr", 0, nxt).wait(10) == (1, 1)
    p.close()
    assert [r.value for r in store_records(st, "dr")] == [b"C"]


def test_idempotent_producer_stamps_every_batch_with_its_id_and_sequences(broker):
    """idempotent=True: the broker hands out a producer id; every batch - built by send(), given
    as bytes (two batches in one write) or built in registered memory - carries it and its
    partition's next sequence numbers, as a Kafka idempotent producer's batches do."""
    from rdmalog.store.records import validate_batches

    st, svc = broker
    st.create_topic("ip", 2)
    p = Producer(svc.control_address, idempotent=True)
    other = Producer(svc.control_address, idempotent=True)
    assert p.producer_id >= 0 and other.producer_id not in (-1, p.producer_id)
    other.close()
    p.send("ip", 0, b"a")
    p.send_records("ip", 0, [(None, b"b"), (None, b"c")])
    p.send_batch("ip", 0, build_batch([(None, b"d")]) + build_batch([(None, b"e")]))
    b = build_batch([(None, b"f")])
    buf = p.register(bytearray(len(b)))
    buf.view[:] = b
    p.send_batch("ip", 0, buf[0 : len(b)])
    p.send_batch("ip", 0, buf[0 : len(b)])  # sent again: waits for the first, then restamps
    p.send("ip", 1, b"x")
    garbage = p.send_batch("ip", 1, b"\xff" * 100)  # not a batch: left alone, refused
    p.flush()
    assert isinstance(garbage.error, KafkaError)
    assert p.produce("ip", 1, b"y") == (1, 1)
    p.close()
    for partition, seqs in ((0, [0, 1, 3, 4, 5, 6]), (1, [0, 1])):
        seg = st.partition("ip", partition).active_segment
        infos = validate_batches(memoryview(bytes(seg.mmap[: seg.size])), 1 << 20)
        assert [(i.producer_id, i.producer_epoch) for i in infos] == [(p.producer_id, 0)] * len(
            seqs
        )
        assert [i.base_sequence for i in infos] == seqs
    assert [r.value for r in store_records(st, "ip")] == [b"a", b"b", b"c", b"d", b"e", b"f", b"f"]


def test_an_idempotent_producer_goes_on_after_a_refused_batch(broker):
    """A batch the broker refuses (here larger than max.message.bytes) took sequence numbers that
    were never appended: later batches of its partition followed a gap and were all refused with
    OUT_OF_ORDER_SEQUENCE_NUMBER, for good. The producer starts a new epoch instead, as Kafka's
    does, so what it sends next is stored - also behind a refusal in the middle of a pipeline."""
    st, svc = broker
    st.create_topic("gap", 2, {"max.message.bytes": "2000"})
    p = Producer(svc.control_address, idempotent=True)
    assert p.produce("gap", 0, b"a") == (0, 0)
    assert p.produce("gap", 1, b"q") == (0, 0)
    with pytest.raises(KafkaError):
        p.send("gap", 0, b"x" * 5000).wait(10)
    assert p.produce("gap", 0, b"b") == (1, 1)
    assert p.produce("gap", 1, b"r") == (1, 1)  # the new epoch starts every partition over
    pipelined = [p.send("gap", 0, b"y" * 5000 if i == 1 else b"c%d" % i) for i in range(4)]
    p.flush()
    with pytest.raises(KafkaError):
        pipelined[1].wait(10)
    assert p.produce("gap", 0, b"d") is not None
    p.close()
    stored = [r.value for r in store_records(st, "gap")]
    assert stored[:2] == [b"a", b"b"] and stored[-1] == b"d"
    assert b"c0" in stored and not any(v.startswith(b"y") for v in stored)
    assert [r.value for r in store_records(st, "gap", 1)] == [b"q", b"r"]


def test_close_releases_the_grant_at_once(broker):
    """close() says bye: the next producer (either mode) never finds the partition still held."""
    st, svc = broker
    st.create_topic("t", 1)
    for i in range(20):
        p = Producer(svc.control_address, mode="exclusive" if i % 2 else "shared")
        assert p.produce("t", 0, b"%d" % i) == (i, i)
        p.close()
    assert [r.value for r in store_records(st, "t")] == [b"%d" % i for i in range(20)]
    assert wait_for(lambda: svc.stats()["grants"] == 0 and svc.stats()["qps"] == 0)


def test_poll_batches_returns_the_stored_bytes(broker):
    st, svc = broker
    st.create_topic("t", 1)
    p = Producer(svc.control_address)
    for i in range(5):
        p.send_records("t", 0, [(None, b"%d-%d" % (i, j)) for j in range(3)])
    p.flush()
    p.close()
    c = Consumer(svc.control_address, fetch_size=100)  # batches span reads: kept and completed
    c.assign([("t", 0)])
    got = []
    for _ in range(200):
        got += c.poll_batches(0.02)
        if len(got) >= 5:
            break
    assert [(b.base_offset, b.last_offset) for b in got] == [(3 * i, 3 * i + 2) for i in range(5)]
    assert b"".join(b.data for b in got) == st.partition("t", 0).read(0, 1 << 20).read()
    assert c.position("t", 0) == 15
    c.close()


@pytest.mark.parametrize("request_bytes", [b"not json\n", b'{"qp": 1}'])
def test_bad_connection_requests_do_not_stop_later_clients(broker, kind, request_bytes):
    """A garbage or abandoned connection request is dropped; the next client still connects."""
    st, svc = broker
    st.create_topic("after-bad", 1, {})
    address = svc.rdma_address
    if kind == "shm":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
    else:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
    sock.sendall(request_bytes)
    sock.close()  # gone before (or while) the service sets the queue pair up
    producer = Producer(svc.control_address, kind)
    base, _ = producer.produce("after-bad", 0, b"still served")
    producer.close()
    assert base == 0
    assert [r.value for r in store_records(st, "after-bad")] == [b"still served"]


def _raw_tcp_peer(svc) -> socket.socket:
    """A queue pair to the broker's tcp engine whose frames the test writes by hand."""
    host, port = svc.rdma_address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(b'{"qp": 1}\n')
    while not sock.recv(1).endswith(b"\n"):  # the broker's setup line
        pass
    return sock


def _bad_status_to_an_ack(sock: socket.socket) -> None:
    """A WRITE_WITH_IMM into no grant gets a REVOKED acknowledgement (a SEND); its response
    frame carries a status no RNIC has."""
    sock.sendall(tcp.FRAME.pack(tcp.OP_WRITE_IMM, 0, 0, 0, 1, 0, 0, 5 << 16, 0, 0))
    got = b""
    while len(got) < 2 * tcp.HDR:  # the WRITE's response, then the acknowledgement
        got += sock.recv(tcp.HDR)
    sock.sendall(tcp.FRAME.pack(tcp.OP_SEND | tcp.RESP, 200, 0, 0, 0, 0, 0, 0, 0, 0))


@pytest.mark.parametrize("kind", ["tcp"])
@pytest.mark.parametrize(
    "hostile",
    [
        "status", "unknown op", "huge send", "write without payload", "half a header",
    ],
)  # fmt: skip
def test_a_hostile_tcp_peer_does_not_stop_the_engine(broker, hostile, caplog):
    """One engine thread executes every tcp queue pair's frames. A frame it could not take
    (a response status no RNIC has) used to end that thread, and every tcp client with it; a
    peer that stopped mid-frame (a WRITE whose payload never came) held it for 10 s; a SEND
    claiming 4 GiB was allocated. Now a bad frame closes its connection with a log line, a
    stalled one waits alone, and the next client is served at once."""
    import logging

    st, svc = broker
    st.create_topic("hostile", 1)
    caplog.set_level(logging.INFO, "rdmalog.rdma.transport.tcp")
    sock = _raw_tcp_peer(svc)
    pack = tcp.FRAME.pack
    if hostile == "status":
        _bad_status_to_an_ack(sock)
    elif hostile == "unknown op":
        sock.sendall(pack(42, 0, 0, 0, 1, 0, 0, 0, 0, 0))
    elif hostile == "huge send":
        sock.sendall(pack(tcp.OP_SEND, 0, 0, 0, 1, 0, 0xFFFFFFF0, 0, 0, 0))
    elif hostile == "write without payload":
        sock.sendall(pack(tcp.OP_WRITE, 0, 0, 7, 1, 7 << 32, 100, 0, 0, 0) + b"only a part")
    else:
        sock.sendall(pack(tcp.OP_WRITE, 0, 0, 0, 1, 0, 0, 0, 0, 0)[:20])
    time.sleep(0.1)  # the engine takes the frame before the next client arrives
    t0 = time.monotonic()
    p = Producer(svc.control_address, timeout=5)
    assert p.produce("hostile", 0, b"still served") == (0, 0)
    assert time.monotonic() - t0 < 2
    p.close()
    if hostile in ("status", "unknown op", "huge send"):  # closed, and the broker says why
        sock.settimeout(5)
        while sock.recv(4096):
            pass
        assert any("closed" in r.getMessage() for r in caplog.records if r.name.endswith("tcp"))
    sock.close()


@pytest.mark.parametrize("kind", ["tcp"])
def test_a_tcp_peer_that_does_not_read_its_answers_holds_up_only_itself(broker):
    """The engine sent READ responses (and the service its acknowledgements) with blocking
    sends: a client that posted READs and did not poll for a while (busy, stopped in a debugger)
    filled its socket, and the engine waited in a send for as long, serving no other queue pair.
    Now what the peer has no room for waits in its queue pair's outbox, the engine takes no
    more of its frames meanwhile, and serves the others."""
    st, svc = broker
    st.create_topic("slow", 1)
    reader = Endpoint(svc.control_address, "tcp")
    g = reader.ctl.request("read_access", topic="slow", partition=0, offset=-2)
    region = RemoteRegion.from_dict(g["region"])
    local = reader.device.alloc_mr(1 << 20, Access.LOCAL_WRITE)
    n = 64  # 64 MiB of answers: far more than the sockets hold
    for i in range(n):
        reader.qp.post_read(i, local, 0, 1 << 20, region.addr, region.rkey)
    time.sleep(0.2)  # the engine has sent what fits, and the rest waits for the reader
    t0 = time.monotonic()
    p = Producer(svc.control_address, timeout=3)
    assert p.produce("slow", 0, b"still served") == (0, 0)
    assert time.monotonic() - t0 < 2
    got = []
    for _ in range(200):  # the reader polls at last: every answer, in order
        got += reader.cq.wait(1.0, 64)
        if len(got) == n:
            break
    assert [(w.wr_id, w.status) for w in got] == [(i, Status.SUCCESS) for i in range(n)]
    p.close()
    reader.close()


def test_consumer_without_the_c_decoder_reads_the_same(broker, kind, monkeypatch):
    """Where the C helper is not built, the consumer decodes with the store's own decoder."""
    from rdmalog.rdma.client import consumer as consumer_module

    st, svc = broker
    st.create_topic("no-c", 1, {})
    producer = Producer(svc.control_address, kind)
    for i in range(5):
        producer.send("no-c", 0, b"v%d" % i, key=b"k", headers=[("h", b"x")])
    producer.flush()
    producer.close()
    monkeypatch.setattr(consumer_module, "_c_decode_plain", None)
    c = Consumer(svc.control_address, kind)
    c.assign([("no-c", 0)])
    got = consume(c, 5)
    c.close()
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (i, b"k", b"v%d" % i, (("h", b"x"),)) for i in range(5)
    ]


def resident_fraction(path: Path, length: int | None = None) -> float:
    """The share of a file's pages (its first `length` bytes) in the page cache (mincore on a
    fresh mapping; reads nothing)."""
    import ctypes
    import mmap

    from rdmalog.rdma.broker.prefault import address_of

    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    if length is not None:
        size = min(size, length)
    if size == 0:  # created, not sized yet (a standby file being made)
        return 0.0
    vec = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), size) as mm:
        rc = libc.mincore(ctypes.c_void_p(address_of(mm)), ctypes.c_size_t(size), vec)
    assert rc == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec) / len(vec)


def test_preallocated_head_is_resident_when_granted(broker):
    """With `preallocate` (KafkaDirect's setup) a produce grant makes the whole head file resident,
    as registering it with an RNIC pins it: the first megabytes before the grant is answered, the
    rest in the background, so the datapath never allocates a page and no producer waits for a
    whole file. Without it the head stays sparse and only a lead ahead of the writes is populated."""
    from rdmalog.rdma.broker.prefault import MADV_POPULATE_READ, MADV_POPULATE_WRITE

    st, svc = broker
    seg_bytes = 32 << 20
    svc.prefault.grant_resident = 4 << 20
    st.create_topic("pre", 1, {"segment.bytes": str(seg_bytes), "preallocate": "true"})
    st.create_topic("sparse", 1, {"segment.bytes": str(seg_bytes)})
    p = Producer(svc.control_address)
    for topic in ("pre", "sparse"):
        assert p.produce(topic, 0, b"v") == (0, 0)
    pre, sparse = (st.partition(t, 0).active_segment.path for t in ("pre", "sparse"))
    assert os.stat(pre).st_blocks * 512 >= seg_bytes
    assert resident_fraction(pre, 4 << 20) > 0.99  # before the grant was answered
    assert wait_for(lambda: resident_fraction(pre) > 0.99)
    assert resident_fraction(sparse) < 0.5
    # The resident head is populated for reading (clean pages, nothing written back); only the
    # sparse one gets the prefaulter's writable lead.
    grants = {t: svc.parts[(t, 0)].produce for t in ("pre", "sparse")}
    assert grants["pre"].resident and not grants["sparse"].resident
    advice = {key: f[4] for key, f in svc.prefault._files.items()}
    assert advice.get(grants["pre"].file_id, MADV_POPULATE_READ) == MADV_POPULATE_READ
    assert advice[grants["sparse"].file_id] == MADV_POPULATE_WRITE
    assert p.produce("pre", 0, b"w") == (1, 1)
    p.close()


def _post_out_of_order(
    p: Producer, topic: str, writes: list[bytes], waves: list[list[int]] | None = None
) -> dict[int, tuple]:
    """Post `writes` (each one or more batches) at consecutive orders and positions of p's grant,
    in `waves` of write indexes (default: one wave, the last write first, so the broker holds
    them until the first arrives and commits them as one run); each wave but the last waits for
    the acknowledgement of its last write. Returns {index: (status, base offset, last offset)}:
    the broker's AckStatus, or the transport's Status of a WRITE that failed one-sidedly."""
    g = p.grants[(topic, 0)]
    posts, soff, fpos = [], 0, g.position
    for i, w in enumerate(writes):
        p.stage.buf[soff : soff + len(w)] = w
        posts.append(((g.order + i) & 0xFFFF, soff, len(w), fpos))
        soff, fpos = soff + len(w), fpos + len(w)
    acks: dict[int, tuple] = {}

    def collect(until) -> None:
        deadline = time.monotonic() + 10
        while not until() and time.monotonic() < deadline:
            for wc in p.cq.wait(0.5):
                if wc.opcode == Opcode.RECV and wc.status == Status.SUCCESS:
                    off = wc.wr_id * ACK_BUF  # one SEND: the acknowledgements of a run
                    for _, order, status, base, last, _ in ACK.iter_unpack(
                        bytes(p.acks.buf[off : off + wc.byte_len])
                    ):
                        acks[(order - posts[0][0]) & 0xFFFF] = (status, base, last)
                    p.qp.post_recv(wc.wr_id, p.acks, off, ACK_BUF)
                elif wc.opcode == Opcode.WRITE and wc.status != Status.SUCCESS:
                    acks[(wc.wr_id - 900 - posts[0][0]) & 0xFFFF] = (wc.status, -1, -1)

    waves = waves or [list(reversed(range(len(writes))))]
    for k, wave in enumerate(waves):
        for i in wave:
            order, so, n, fp = posts[i]
            p.qp.post_write(
                900 + order, p.stage, so, n, g.region.addr + fp, g.region.rkey,
                imm=imm_encode(g.file_id, order), signaled=False,
            )  # fmt: skip
        if k < len(waves) - 1:
            collect(lambda w=wave: w[-1] in acks)
    collect(lambda: len(acks) == len(writes))
    return acks


def test_a_run_of_writes_commits_together_and_acks_each(broker, monkeypatch):
    """Writes waiting behind their predecessor commit with one validation pass; each still gets
    its own offsets (a write may hold several batches). A bad batch in a run falls back to one by
    one: the writes before it commit, it is refused, the rest are revoked."""
    st, svc = broker
    runs = []
    real = svc.ordering._process_run
    monkeypatch.setattr(
        svc.ordering, "_process_run", lambda f, run: runs.append(len(run)) or real(f, run)
    )
    st.create_topic("run", 1)
    p = Producer(svc.control_address)
    assert p.produce("run", 0, b"first") == (0, 0)

    def one(*values: bytes) -> bytes:
        return bytes(build_batch([(None, v) for v in values]))

    acks = _post_out_of_order(p, "run", [one(b"a"), one(b"b", b"c") + one(b"d"), one(b"e")])
    assert acks == {0: (0, 1, 1), 1: (0, 2, 4), 2: (0, 5, 5)}
    assert runs == [3]
    assert [r.value for r in store_records(st, "run")] == [b"first", b"a", b"b", b"c", b"d", b"e"]

    bad = bytearray(one(b"evil"))
    bad[-1] ^= 0xFF
    p.grants[("run", 0)].position = st.partition("run", 0).active_segment.size
    p.grants[("run", 0)].order = (p.grants[("run", 0)].order + 3) & 0xFFFF
    acks = _post_out_of_order(p, "run", [one(b"f"), bytes(bad), one(b"g")])
    assert acks == {
        0: (AckStatus.OK, 6, 6),
        1: (AckStatus.CORRUPT, CorruptRecordError.error_code, -1),  # the reason's Kafka code
        2: (AckStatus.REVOKED, -1, -1),
    }
    assert runs == [3, 3]
    assert [r.value for r in store_records(st, "run")][-2:] == [b"e", b"f"]
    p.close()


def test_an_idempotent_producers_run_commits_together(broker, monkeypatch):
    """An idempotent producer's writes waiting behind their predecessor commit with one
    validation pass and one commit too (sequences checked across the run, as for a produce
    request of several batches); a run holding a retry of a batch the log already has, or a
    sequence gap, is answered one by one: the retry with its original offsets."""
    st, svc = broker
    runs, commits = [], []
    real = svc.ordering._process_run
    monkeypatch.setattr(
        svc.ordering, "_process_run", lambda f, run: runs.append(len(run)) or real(f, run)
    )
    st.create_topic("irun", 1)
    plog = st.partition("irun", 0)
    real_commit = plog.commit_written
    monkeypatch.setattr(
        plog, "commit_written", lambda *a, **kw: commits.append(a) or real_commit(*a, **kw)
    )
    p = Producer(svc.control_address)
    assert p.produce("irun", 0, b"first") == (0, 0)

    def idem(seq: int, *values: bytes) -> bytes:
        records = [(None, v) for v in values]
        return bytes(build_batch(records, producer_id=9, producer_epoch=0, base_sequence=seq))

    writes = [idem(0, b"a"), idem(1, b"b", b"c") + idem(3, b"d"), idem(4, b"e")]
    acks = _post_out_of_order(p, "irun", writes)
    assert acks == {0: (0, 1, 1), 1: (0, 2, 4), 2: (0, 5, 5)}
    assert runs == [3] and len(commits) == 2  # "first", then the run in one commit
    # The same three again (a producer resending after a lost answer) with a new one behind
    # them: answered one by one with the offsets they already have; the new one is revoked
    # (it sits behind bytes that were not committed) and would be resent under a new grant.
    g = p.grants[("irun", 0)]
    g.position = plog.active_segment.size
    g.order = (g.order + 3) & 0xFFFF
    acks = _post_out_of_order(p, "irun", [*writes, idem(5, b"f")])
    assert acks[0] == (AckStatus.OK, 1, 1) and acks[3] == (AckStatus.REVOKED, -1, -1)
    assert runs == [3, 4] and len(commits) == 3  # one by one: the retry answered, not appended
    assert [r.value for r in store_records(st, "irun")] == [b"first", b"a", b"b", b"c", b"d", b"e"]
    p.close()


def _spark_native_topic(svc: RdmaService, kind: str, topic: str, values: list[bytes]):
    """A one-partition topic holding `values`, and the Spark source's connection options for
    reading it natively (an empty consumer pool)."""
    from rdmalog.spark import native_client
    from rdmalog.spark.options import parse_read

    svc.store.create_topic(topic, 1)
    p = Producer(svc.control_address)
    for v in values:
        p.send(topic, 0, v)
    p.flush()
    p.close()
    opts = {"rdmalog.bootstrap": "127.0.0.1:9", "subscribe": topic}
    native_client._POOL.clear()
    return parse_read(
        opts | {"rdmalog.transport": kind, "rdmalog.control": svc.control_address}, False
    ).conn


def test_spark_native_reads_reuse_a_pooled_consumer(broker, kind):
    """The Spark source's executor reads (no Spark needed): the next range of a partition
    continues on the consumer the previous task left assigned; another start seeks it; a read
    abandoned half-way closes its consumer instead of pooling it."""
    pytest.importorskip("pyspark")
    from rdmalog.spark import native_client
    from rdmalog.spark.offsets import DataLossError

    st, svc = broker
    conn = _spark_native_topic(svc, kind, "sp", [b"v%d" % i for i in range(30)])

    def read(start: int, end: int) -> list[int]:
        return [r[2] for r in native_client.read_range(conn, ("sp", 0), start, end, True, 5000)]

    assert read(0, 10) == list(range(10))
    (first,) = native_client._POOL.values()
    assert read(10, 20) == list(range(10, 20))
    assert list(native_client._POOL.values()) == [first]  # the same consumer, continued
    assert read(5, 8) == [5, 6, 7]  # seeks the pooled consumer
    assert list(native_client._POOL.values()) == [first]
    rows = native_client.read_range(conn, ("sp", 0), 20, 30, True, 5000)
    assert next(rows)[2] == 20
    rows.close()  # abandoned: closed, not pooled
    assert native_client._POOL == {} and not first.ctl.alive()
    assert read(25, 30) == list(range(25, 30))
    # Records deleted under a planned range are data loss, reported: the executors' consumers
    # do not reset (auto.offset.reset=none, as spark-sql-kafka's executors use).
    st.partition("sp", 0).delete_records(12)
    with pytest.raises(DataLossError, match="offset 10"):
        read(10, 15)
    for c in native_client._POOL.values():
        c.close()
    native_client._POOL.clear()


def test_spark_native_reads_skip_lost_records_without_fail_on_data_loss(broker, kind, caplog):
    """failOnDataLoss=false: an executor read whose records are gone warns and goes on from the
    log start, as spark-sql-kafka's executors do (the native read used to fail regardless): a
    range whose start was deleted reads the rest, a range deleted entirely reads nothing, records
    deleted while a read runs are skipped, a deleted topic ends the read. With
    failOnDataLoss=true each of them is a DataLossError."""
    pytest.importorskip("pyspark")
    from rdmalog.spark import native_client
    from rdmalog.spark.offsets import DataLossError

    st, svc = broker
    # ~1 KiB records: a 2 KiB READ holds one or two, so a read takes many polls
    conn = _spark_native_topic(svc, kind, "lost", [b"%04d" % i + b"." * 1000 for i in range(40)])

    def rows(start: int, end: int, fail: bool):
        return native_client.read_range(conn, ("lost", 0), start, end, fail, 5000)

    def read(start: int, end: int, fail: bool = False) -> list[int]:
        return [r[2] for r in rows(start, end, fail)]

    st.partition("lost", 0).delete_records(10)
    with pytest.raises(DataLossError, match="offset 4"):
        read(4, 15, fail=True)
    caplog.clear()
    assert read(4, 15) == list(range(10, 15))
    assert "cannot read from offset 4" in caplog.text and "failOnDataLoss is false" in caplog.text
    assert read(2, 8) == []  # all of it deleted
    assert read(12, 14) == [12, 13]

    # Deleted while the read runs: the records already read come, the deleted ones are skipped.
    it = rows(15, 40, False)
    assert next(it)[2] == 15
    st.partition("lost", 0).delete_records(30)
    rest = [r[2] for r in it]
    kept = [o for o in rest if o < 30]
    assert kept == list(range(16, 16 + len(kept))) and len(kept) < 14
    assert [o for o in rest if o >= 30] == list(range(30, 40))
    it = rows(15, 40, True)
    with pytest.raises(DataLossError, match="offset 15"):
        next(it)

    st.delete_topic("lost")
    assert read(35, 40) == []
    with pytest.raises(DataLossError, match="UnknownTopicOrPartition"):
        read(35, 40, fail=True)
    for c in native_client._POOL.values():
        c.close()
    native_client._POOL.clear()


def _restart(svc: RdmaService) -> RdmaService:
    """The service stopped and started again at its control address (a broker restart)."""
    port = int(svc.control_address.rpartition(":")[2])
    svc.stop()
    return RdmaService(svc.store, svc.kind, order_timeout=0.3, control_port=port).start()


def test_spark_native_reads_ride_a_broker_restart(broker, kind):
    """An executor's read across a broker restart: the next task's pooled consumer, and a read
    the restart interrupted, failed with BrokerDisconnected (on local Spark, which does not
    retry tasks, the query failed); they continue on a new session now, nothing lost or
    repeated, as the Kafka transport's consumers ride a restart."""
    pytest.importorskip("pyspark")
    from rdmalog.spark import native_client

    st, svc = broker
    # ~1 KiB records: a poll returns one or two, so the restart comes between two polls
    conn = _spark_native_topic(svc, kind, "rs", [b"%04d" % i + b"." * 1000 for i in range(30)])

    def rows(start: int, end: int):
        return native_client.read_range(conn, ("rs", 0), start, end, True, 5000)

    assert [r[2] for r in rows(0, 10)] == list(range(10))
    svc = _restart(svc)
    try:
        assert [r[2] for r in rows(10, 20)] == list(range(10, 20))  # its consumer was pooled
        it = rows(20, 30)
        assert next(it)[2] == 20
        svc = _restart(svc)
        assert [r[2] for r in it] == list(range(21, 30))
    finally:
        for c in native_client._POOL.values():
            c.close()
        native_client._POOL.clear()
        svc.stop()


def test_preallocated_next_head_is_ready_before_the_roll(broker):
    """While a preallocated head file fills, the service has the next one allocated and made
    resident in the background; the roll renames it into place, so the new grant finds it
    resident and nothing is allocated on the datapath; the new head gets its own successor."""
    st, svc = broker
    seg_bytes = 4 << 20
    st.create_topic("nx", 1, {"segment.bytes": str(seg_bytes), "preallocate": "true"})
    plog = st.partition("nx", 0)
    p = Producer(svc.control_address)
    big = build_batch([(None, b"x" * 1000) for _ in range(500)])  # ~0.5 MiB
    for _ in range(5):  # more than a quarter of the file
        p.send_batch("nx", 0, big)
    p.flush()
    standby = plog.dir / "standby.log.tmp"
    assert wait_for(lambda: standby.exists() and resident_fraction(standby) > 0.99)
    inode = os.stat(standby).st_ino
    for _ in range(5):  # fills the file: the producer asks for the next one, the log rolls
        p.send_batch("nx", 0, big)
    p.flush()
    assert len(plog.segments) == 2
    head = plog.active_segment.path
    assert os.stat(head).st_ino == inode and resident_fraction(head) > 0.99
    for _ in range(3):  # a quarter into the new head: its own successor is made
        p.send_batch("nx", 0, big)
    p.flush()
    assert wait_for(lambda: standby.exists() and os.stat(standby).st_ino != inode)
    assert len(store_records(st, "nx")) == 13 * 500
    p.close()


def test_writes_waiting_behind_a_revoking_write_are_answered(broker):
    """A write that arrived before its predecessor waits; when the file is revoked meanwhile (here
    by an overflow: a zero-length write), the waiting write is answered REVOKED, not stranded,
    and the predecessor, posted after the revocation, fails one-sidedly (the region is gone)."""
    st, svc = broker
    st.create_topic("rv", 1)
    p = Producer(svc.control_address)
    p.produce("rv", 0, b"first")
    late = bytes(build_batch([(None, b"late")]))
    # order 2 waits for 1; 0 (an overflow) revokes the file; 1 arrives only after that
    acks = _post_out_of_order(p, "rv", [b"", late, late], waves=[[2, 0], [1]])
    assert acks[0] == (AckStatus.FULL, -1, -1) and acks[2] == (AckStatus.REVOKED, -1, -1)
    assert acks[1] == (Status.REM_ACCESS_ERR, -1, -1), acks
    assert p.produce("rv", 0, b"again")[0] == 1  # a fresh grant continues at the committed end
    assert [r.value for r in store_records(st, "rv")] == [b"first", b"again"]
    p.close()


def test_commit_slots_need_a_group_coordinator(broker):
    """A service started without a coordinator to fold into (the store alone) refuses commit
    slots with a reason instead of taking commits it could never make durable."""
    st, svc = broker
    st.create_topic("cs", 1)
    c = Consumer(svc.control_address)
    with pytest.raises(ControlError, match="coordinator"):
        c.control("commit_slot", group="g", topic="cs", partition=0)
    c.close()


def test_client_sessions_give_back_their_regions(broker):
    """Each client queue pair's receive and acknowledgement buffers were registered and never
    deregistered: on shm (1024 regions per device) a broker refused new clients after ~500
    sessions over its life ("region table full"). A session's end now gives its region back."""
    st, svc = broker
    st.create_topic("rg", 1)
    base = len(svc.device._mrs)
    for _ in range(5):
        with Producer(svc.control_address) as p:
            p.produce("rg", 0, b"x")
        with Consumer(svc.control_address) as c:
            c.assign([("rg", 0)])
            c.poll(0.01)
    assert wait_for(lambda: svc.stats()["qps"] == 0)
    assert wait_for(lambda: len(svc.device._mrs) == base)


@pytest.mark.parametrize("kind", ["tcp"])
def test_a_queue_pair_that_never_said_hello_is_dropped_when_it_closes(broker):
    """A connection that never binds to a control session (a client that died in between, a
    stray peer) has no session end to clean up after it: its flushed receives now do."""
    st, svc = broker
    sock = _raw_tcp_peer(svc)
    assert wait_for(lambda: svc.stats()["qps"] == 1)
    sock.close()
    assert wait_for(lambda: svc.stats()["qps"] == 0 and len(svc.device._mrs) == 0)


def test_a_closed_client_says_so(broker):
    """Every operation of a closed producer or consumer raises ClientClosedError, as Kafka
    clients refuse everything after close: assign() raised an unrelated TypeError on shm and
    BrokerDisconnected ("the broker went away") on tcp, and reconnect() opened a session that
    nothing released."""
    from rdmalog.rdma import ClientClosedError

    st, svc = broker
    st.create_topic("closed", 1)
    p, c = Producer(svc.control_address), Consumer(svc.control_address)
    p.close()
    c.close()
    for op in (
        lambda: p.send("closed", 0, b"x"),
        lambda: p.produce("closed", 0, b"x"),
        lambda: c.assign([("closed", 0)]),
        lambda: c.poll(0.01),
        lambda: c.reconnect(timeout=1),
        lambda: p.reconnect(timeout=1),
    ):
        with pytest.raises(ClientClosedError, match="is closed"):
            op()
    assert wait_for(lambda: svc.stats()["qps"] == 0)

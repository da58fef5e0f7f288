"""Ordered commits of shared head files: runs of waiting writes, holes, order timeouts,
revocation."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import struct
import time

from rdmalog.errors import CorruptRecordError
from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.client.endpoint import Endpoint
from rdmalog.rdma.client.producer import ACK_BUF
from rdmalog.rdma.transport._atomic64 import fetch_add
from rdmalog.rdma.transport.interface import Access, Opcode, RemoteRegion, Status
from rdmalog.rdma.wire import (
    ACK,
    AckStatus,
    imm_encode,
    reservation_add,
    word_decode,
)
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import consume, store_records, wait_for


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
    order, pos = p._reserve(g, len(batch))  # its own reservation (tcp admits only those)
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
    # the run's commit answers the retry as a duplicate (nothing appended), then one by one: the
    # retry answered with its offsets, not appended
    assert runs == [3, 4] and len(commits) == 4
    assert plog.log_end_offset == 6
    assert [r.value for r in store_records(st, "irun")] == [b"first", b"a", b"b", b"c", b"d", b"e"]
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

"""The native consumer's two isolation levels: read_uncommitted reads every data batch; read_committed
stops at the last stable offset (its metadata slot's last readable byte) and skips the batches of
aborted transactions, as a Kafka consumer does from a fetch's aborted transactions."""

from __future__ import annotations

import pytest

from rdmalog.rdma import Consumer
from rdmalog.store.records import Record, build_batch
from rdmalog.store.transactions import marker_batch
from tests.integration.native.helpers import consume, wait_for

P1, P2, P3 = 501, 502, 503


def _txn(plog, pid: int, seq: int, *values: bytes) -> None:
    plog.append(
        build_batch(
            [Record(None, v) for v in values],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )  # fmt: skip
    )


def _end(plog, pid: int, commit: bool) -> None:
    plog.append(marker_batch(pid, 0, commit, 0), allow_control=True)


def _values(c: Consumer, n: int) -> list[bytes]:
    return [r.value for r in consume(c, n)]


def test_read_committed_skips_aborted_and_stops_at_the_open_transaction(broker):
    st, svc = broker
    st.create_topic("tx", 1)
    plog = st.partition("tx", 0)
    plog.append(build_batch([(None, b"plain-0")]))  # 0
    _txn(plog, P1, 0, b"p1-a", b"p1-b")  # 1-2: aborted
    _txn(plog, P2, 0, b"p2-a")  # 3: committed
    _end(plog, P1, commit=False)  # 4
    _end(plog, P2, commit=True)  # 5
    _txn(plog, P3, 0, b"p3-open")  # 6: open
    plog.roll()  # the open transaction's file is sealed: its slot still moves
    plog.append(build_batch([(None, b"plain-7")]))  # 7
    _txn(plog, P1, 2, b"p1-c")  # 8: P1 again, committed later
    assert plog.last_stable_offset == 6

    committed = Consumer(svc.control_address, isolation_level="read_committed")
    committed.assign([("tx", 0)], offset=0)
    everything = Consumer(svc.control_address)
    everything.assign([("tx", 0)], offset=0)
    assert _values(committed, 2) == [b"plain-0", b"p2-a"]
    assert committed.poll(0.1) == []  # held at the open transaction
    assert _values(everything, 7) == [
        b"plain-0", b"p1-a", b"p1-b", b"p2-a", b"p3-open", b"plain-7", b"p1-c"
    ]  # fmt: skip

    _end(plog, P3, commit=True)  # 9: the LSO moves to P1's transaction at 8
    assert _values(committed, 2) == [b"p3-open", b"plain-7"]
    _end(plog, P1, commit=False)  # 10
    plog.append(build_batch([(None, b"plain-11")]))
    assert _values(committed, 1) == [b"plain-11"]
    assert wait_for(lambda: committed.position("tx", 0) == 12)
    for c in (committed, everything):
        c.close()


def test_isolation_level_is_checked():
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer("127.0.0.1:1", isolation_level="read_everything")

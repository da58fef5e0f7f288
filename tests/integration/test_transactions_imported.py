"""An imported Kafka log holding aborted transactions is served as Kafka serves it (issue 17: kcat
printed the aborted records at read_committed).

The partition is built byte for byte in Kafka's format: two segments with plain batches, transactional
batches of four producers, their COMMIT and ABORT control batches, one transaction still open, and
each segment's `.txnindex` (34-byte entries: version, producer id, first offset, last offset, last
stable offset) as Kafka's ProducerStateManager writes them. Read by kcat and confluent-kafka at both
isolation levels, after a clean start (the index files are read) and after an unclean one (recovery
rebuilds them: they must come out as Kafka wrote them).
"""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest

from compat_tests.brokers import BrokerProcess
from rdmalog.store import checkpoints as ck
from rdmalog.store.records import Record, build_batch
from rdmalog.store.transactions import marker_batch
from tests.integration.txn_helpers import (
    COMMITTED,
    UNCOMMITTED,
    kcat_values,
    offsets,
    read_values,
)
from tests.unit.store.kraft_records import topic_record, write_metadata_log

TOPIC = "imported"
T = 1_760_000_000_000
INDEX = struct.Struct(">hqqqq")


def _batch(base: int, values: list[bytes], pid: int = -1, txn: bool = False) -> bytearray:
    return build_batch(
        [Record(None, v, timestamp=T + base) for v in values],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        transactional=txn,
        partition_leader_epoch=0,
        now_ms=T,
    )


def _marker(base: int, pid: int, commit: bool) -> bytearray:
    buf = marker_batch(pid, 0, commit, coordinator_epoch=0, timestamp_ms=T + base)
    struct.pack_into(">q", buf, 0, base)  # baseOffset
    struct.pack_into(">i", buf, 12, 0)  # partitionLeaderEpoch (outside the CRC)
    return buf


SEGMENTS = {
    0: [
        _batch(0, [b"p0", b"p1"]),
        _batch(2, [b"abort7-a", b"abort7-b"], pid=7, txn=True),
        _batch(4, [b"commit8-a", b"commit8-b"], pid=8, txn=True),
        _marker(6, 7, commit=False),
        _marker(7, 8, commit=True),
    ],
    8: [
        _batch(8, [b"abort9-a", b"abort9-b"], pid=9, txn=True),
        _batch(10, [b"p10"]),
        _marker(11, 9, commit=False),
        _batch(12, [b"open10-a", b"open10-b"], pid=10, txn=True),  # no marker yet
    ],
}
# (producer id, first offset, marker offset, last stable offset when the marker was written)
TXN_INDEX = {0: [(7, 2, 6, 4)], 8: [(9, 8, 11, 12)]}
COMMITTED_VALUES = [b"p0", b"p1", b"commit8-a", b"commit8-b", b"p10"]
ALL_VALUES = [
    b"p0", b"p1", b"abort7-a", b"abort7-b", b"commit8-a", b"commit8-b", b"abort9-a", b"abort9-b",
    b"p10", b"open10-a", b"open10-b",
]  # fmt: skip


def _index_bytes(base: int) -> bytes:
    return b"".join(INDEX.pack(0, *e) for e in TXN_INDEX[base])


def write_kafka_log(data: Path, clean: bool) -> Path:
    part = data / f"{TOPIC}-0"
    part.mkdir(parents=True)
    topic_id = uuid.uuid4()
    for base, batches in SEGMENTS.items():
        stem = f"{base:020d}"
        (part / f"{stem}.log").write_bytes(b"".join(batches))
        (part / f"{stem}.index").write_bytes(b"")
        (part / f"{stem}.timeindex").write_bytes(b"")
        (part / f"{stem}.txnindex").write_bytes(_index_bytes(base) if clean else b"")
        if not clean:
            (part / f"{stem}.txnindex").unlink()
    ck.write_partition_metadata(part, topic_id)
    write_metadata_log(data, [topic_record(TOPIC, topic_id)])
    if clean:
        ck.write_offset_checkpoint(data / ck.RECOVERY_POINT_CHECKPOINT, {(TOPIC, 0): 14})
        (data / ck.CLEAN_SHUTDOWN_FILE).write_text("")
    return part


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "recovered"])
def test_imported_log_with_aborted_transactions(tmp_path: Path, clean: bool) -> None:
    data = tmp_path / "kafka-log-dir"
    part = write_kafka_log(data, clean)
    broker = BrokerProcess(data)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        assert offsets(bootstrap, TOPIC, 0) == 14
        assert offsets(bootstrap, TOPIC, 1) == 12  # the open transaction of producer 10
        assert kcat_values(bootstrap, TOPIC, COMMITTED) == COMMITTED_VALUES
        assert read_values(bootstrap, TOPIC, COMMITTED) == COMMITTED_VALUES
        assert kcat_values(bootstrap, TOPIC, UNCOMMITTED) == ALL_VALUES
        assert read_values(bootstrap, TOPIC, UNCOMMITTED) == ALL_VALUES
    finally:
        broker.stop()
    for base in SEGMENTS:  # read, or rebuilt by recovery, as Kafka wrote them
        assert (part / f"{base:020d}.txnindex").read_bytes() == _index_bytes(base)

"""What the native consumer returns (ConsumerRecord, ConsumerBatch) and what it keeps per assigned
partition (_Assignment): its file, position, read buffer and, on shm, the plan of its one-call READ."""

from __future__ import annotations

from typing import NamedTuple

from rdmalog.rdma.client.committed_reads import AbortedTransactions
from rdmalog.rdma.transport.interface import RemoteRegion


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]  # read-only, as Kafka's are
    timestamp_type: int = (
        0  # Kafka's TimestampType: 0 CreateTime, 1 LogAppendTime (the batch's bit)
    )


class ConsumerBatch(NamedTuple):
    """A whole record batch as stored (Kafka v2 bytes, offsets assigned): `poll_batches()`."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    data: bytes


class _Assignment:
    __slots__ = (
        "topic", "partition", "offset", "region", "base", "pos", "lrb", "mutable", "slot",
        "mr", "head", "have", "active", "more", "paused", "txns", "plan", "chunk",
    )  # fmt: skip

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self.offset = 0
        self.region: RemoteRegion | None = None
        self.base = -1
        self.pos = self.lrb = 0
        self.mutable = False
        self.slot = -1
        self.mr = None  # local buffer: kept bytes (a partial batch, batches not yet returned)
        self.head = self.have = 0  # the kept bytes are mr.buf[head : head + have]
        self.active = False
        self.more = False  # whole batches kept: a poll stopped at max_records in front of them
        self.paused = False
        self.txns: AbortedTransactions | None = None  # read_committed: what is aborted
        # shm: the file's READ in one C call (qp.read_plan, made after its first READ; None:
        # the general path)
        self.plan: tuple | None = None
        # the last read_take's records' bytes in mr (_batch.Chunk): detached (copied out if its
        # records are alive) before mr is read into again
        self.chunk = None

"""What a partition holds, read over the Kafka protocol as raw batches: its offsets, batch and record
counts, and a digest of every batch's (base offset, CRC-32C) in order. Two clusters whose digests
agree hold the same batches at the same offsets, byte for byte (the CRC covers everything in a batch
after it but its offset and leader epoch); `rdmalog mirror verify` compares them."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

from gateway.mirror.source import SourceCluster
from rdmalog.store.records import iter_batches

_ENTRY = struct.Struct(">qI")


@dataclass
class PartitionDigest:
    start: int = -1  # the first batch's base offset read (-1: none)
    end: int = 0  # the offset after the last batch read (the high watermark)
    batches: int = 0
    records: int = 0
    invalid: int = 0  # batches failing their CRC
    sha: hashlib._Hash = field(default_factory=hashlib.sha256)

    @property
    def digest(self) -> str:
        return self.sha.hexdigest()[:16]

    def key(self) -> tuple:
        return (self.start, self.end, self.batches, self.records, self.digest)


async def digest_partition(
    cluster: SourceCluster, topic: str, partition: int, from_offset: int = 0
) -> PartitionDigest:
    """Read a partition from `from_offset` (or its log start) to its high watermark."""
    node = cluster.leaders[(topic, partition)]
    d = PartitionDigest()
    starts = await cluster.earliest(node, [(topic, partition)])
    code, start = starts[(topic, partition)]
    if code:
        raise RuntimeError(f"{topic}-{partition}: ListOffsets error {code}")
    offset = max(from_offset, start)
    while True:
        answer = await cluster.fetch(node, [(topic, partition, offset)], 100)
        parts = [p for t in answer["responses"] for p in t["partitions"]]
        if not parts:  # nothing readable within the wait (some brokers answer so)
            d.end = offset
            return d
        p = parts[0]
        if p["error_code"]:
            raise RuntimeError(f"{topic}-{partition}: Fetch error {p['error_code']}")
        hw = p["high_watermark"]
        moved = False
        for batch in iter_batches(memoryview(p["records"] or b"")):
            if batch.last_offset < offset:
                continue
            if d.start < 0:
                d.start = batch.base_offset
            d.batches += 1
            d.records += batch.count
            if batch.compute_crc() != batch.crc:
                d.invalid += 1
            d.sha.update(_ENTRY.pack(batch.base_offset, batch.crc))
            offset = batch.next_offset
            moved = True
        if offset >= hw or not moved:  # read to the high watermark (or nothing more comes)
            d.end = offset
            return d


async def high_watermarks(
    cluster: SourceCluster, at: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """The high watermark of each partition, from Fetch answers at the given offsets (what a
    consumer is told it can read up to; some brokers' ListOffsets disagree with it)."""
    by_leader: dict[int, list[tuple[str, int, int]]] = {}
    for (topic, partition), offset in at.items():
        node = cluster.leaders.get((topic, partition))
        if node is not None:
            by_leader.setdefault(node, []).append((topic, partition, offset))
    found: dict[tuple[str, int], int] = {}
    for node, wants in by_leader.items():
        answer = await cluster.fetch(node, wants, 100)
        for t in answer["responses"]:
            for p in t["partitions"]:
                if not p["error_code"]:
                    found[(t["topic"], p["partition_index"])] = p["high_watermark"]
    return found

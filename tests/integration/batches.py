"""Record-batch (magic v2) framing helpers for the integration tests: split a buffer into batches,
read the batches of a (preallocated, zero-padded) segment file, check a batch's CRC-32C."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

HEADER = 61  # baseOffset..recordsCount
LENGTH_OFFSET = 8  # batchLength int32 at bytes 8-11: the bytes that follow it
CRC_OFFSET = 17
CRC_FROM = 21  # the CRC covers attributes..end


def split_batches(buf: bytes) -> list[bytes]:
    """Whole batches of `buf`, stopping at a zero length (preallocated tail) or a partial batch."""
    out, pos = [], 0
    while pos + 12 <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + LENGTH_OFFSET)
        if length <= 0 or pos + 12 + length > len(buf):
            break
        out.append(bytes(buf[pos : pos + 12 + length]))
        pos += 12 + length
    return out


def segment_batches(path: Path) -> list[bytes]:
    return split_batches(path.read_bytes())


def base_offset(batch: bytes) -> int:
    return struct.unpack_from(">q", batch, 0)[0]


def leader_epoch(batch: bytes) -> int:
    return struct.unpack_from(">i", batch, 12)[0]


def magic(batch: bytes) -> int:
    return batch[16]


def record_count(batch: bytes) -> int:
    return struct.unpack_from(">i", batch, 57)[0]


def crc_valid(batch: bytes) -> bool:
    (stored,) = struct.unpack_from(">I", batch, CRC_OFFSET)
    return crc32c.crc32c(batch[CRC_FROM:]) == stored


def log_file(data_dir: Path, topic: str, partition: int = 0, base: int = 0) -> Path:
    return data_dir / f"{topic}-{partition}" / f"{base:020d}.log"

"""The C extensions' CRC-32C (rdmalog/store/crc32c.h, reached through `_records.crc32c`) against the
`crc32c` package: every length around the header's block boundaries, large buffers, odd lengths
and unaligned starts."""

from __future__ import annotations

import random

import crc32c as crc32c_package
import pytest

_records = pytest.importorskip(
    "rdmalog.store._records", reason="the optional C extension _records was not built"
)

SHORT_CHUNK, LONG_CHUNK = 3 * 256, 3 * 2048  # what the header's three streams take per step
DATA = random.Random(7).randbytes(600 << 10)


def _lengths() -> list[int]:
    rng = random.Random(11)
    near_chunks = {
        k * chunk + d
        for chunk in (SHORT_CHUNK, LONG_CHUNK)
        for k in range(1, 6)
        for d in (-9, -1, 0, 1, 7)
    }
    mixed = {3 * LONG_CHUNK + 2 * SHORT_CHUNK + tail for tail in range(0, 17)}
    large = {555 << 10, (555 << 10) + 3, (600 << 10) - 8, 300_001}
    return sorted(
        set(range(0, 2 * SHORT_CHUNK + 64))
        | near_chunks
        | mixed
        | large
        | {rng.randrange(1, 600 << 10) for _ in range(200)}
    )


@pytest.mark.parametrize("start", [0, 1, 3, 5, 7])
def test_c_crc32c_matches_the_package(start: int) -> None:
    view = memoryview(DATA)
    for n in _lengths():
        n = min(n, len(DATA) - start)
        buf = view[start : start + n]
        assert _records.crc32c(buf) == crc32c_package.crc32c(buf), (start, n)


def test_c_crc32c_known_values() -> None:
    assert _records.crc32c(b"") == 0
    assert _records.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert _records.crc32c(bytes(4096)) == crc32c_package.crc32c(bytes(4096))

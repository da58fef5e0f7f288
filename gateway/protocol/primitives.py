"""Wire primitives the generated codecs share: unsigned varints, the decode errors, pre-encoded
arrays."""

from __future__ import annotations

from typing import NamedTuple

NO_BUDGET = 1 << 62  # the decode budget when none is given (responses, tools)


class DecodeError(ValueError):
    """A request or response body that does not parse at its declared API version."""


class DecodeBudgetExceeded(DecodeError):
    """Decoding a body would exceed its memory budget, or its work budget (`work` is True)."""

    def __init__(self, message: str, work: bool) -> None:
        super().__init__(message)
        self.work = work


class EncodedArray(NamedTuple):
    """An array whose elements are already encoded: `count` elements in `data`; `parts` are the
    `(position in data, file slice)` records of those elements (see compiler.py)."""

    count: int
    data: bytes | bytearray
    parts: list


def read_uvarint_tail(buf, pos: int, first: int) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte (`first`, >= 0x80) was read; `pos` is past it."""
    value = first & 0x7F
    shift = 7
    while True:
        c = buf[pos]
        pos += 1
        value |= (c & 0x7F) << shift
        if c < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Read an unsigned varint at `pos`; return (value, new position)."""
    c = buf[pos]
    if c < 0x80:
        return c, pos + 1
    return read_uvarint_tail(buf, pos + 1, c)


_SMALL = [bytes([i]) for i in range(128)]


def encode_uvarint(value: int) -> bytes:
    """The unsigned varint encoding of a non-negative int."""
    if value < 128:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)

"""Produce's fast path: the request librdkafka sends at many partitions (one topic, one partition,
one v2 batch, no transactional id), decoded and answered with fixed struct layouts instead of the
generic codec, the request context and the handler's loop.

`try_produce(conn, hdr, frame)` runs before the generic decode. It takes the request only when the
generic handler (k00_produce.py) would append it with nothing else to do: Produce v3-v11, acks 0 or
1 (or -1 without a cluster, where it means the same), no authorizer, no quotas, no transactional
id, a partition this broker has, not internal, records Kafka's produce checks accept, no tagged
fields; anything else returns None before any side effect, and the generic path answers exactly as
it always has. The append itself and its failures are the generic handler's (`Broker.append_now`,
`failed_append`, the generic encoder for an error answer), so the two paths answer alike
(tests/integration/test_produce_fast_path.py compares their answers byte for byte).
`RDMALOG_PRODUCE_FAST_PATH=0` in the broker's environment turns it off (for A/B runs and tests).
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Coroutine
from typing import Any

from gateway.handlers.k00_produce import ADMIN_CLIENT_ID, failed_append, refusal_of
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.protocol import RequestHeader, encode_response
from gateway.protocol.primitives import encode_uvarint, read_uvarint_tail

ENABLED = os.environ.get("RDMALOG_PRODUCE_FAST_PATH", "1") != "0"
PRODUCE = 0
FIRST_VERSION, FLEXIBLE_VERSION, LAST_VERSION = 3, 9, 11
# The decode budget a one-partition request stays far below (its dicts, strings, one memoryview)
MIN_DECODE_BUDGET = 1 << 16

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_ONE = struct.Struct(">i")  # an array count
_SIZE_CORR = struct.Struct(">ii")
# The partition's answer after its index, by version: error_code, base_offset, log_append_time,
# [log_start_offset v5+], [record_errors (empty), error_message (null) v8+], then the rest.
_OK_V3 = struct.Struct(">ihqqi")  # index ... throttle_time
_OK_V5 = struct.Struct(">ihqqqi")
_OK_V8 = struct.Struct(">ihqqqihi")  # ... record_errors count 0, error_message -1, throttle
# flexible: index, code, base, append time, start, [record_errors 1, message 0, tags 0, tags 0],
# throttle, tags 0
_OK_FLEX = struct.Struct(">ihqqqBBBBiB")

Result = bool | Coroutine[Any, Any, None] | None


def parse_one_partition(
    frame: memoryview, pos: int, flexible: bool
) -> tuple[int, int, bytes, int, int, int] | None:
    """(acks, timeout, topic name, partition, records position, records length) of a request of
    the fast path's shape, else None."""
    end = len(frame)
    if flexible:
        if frame[pos] != 0:  # transactional_id: compact nullable string, null
            return None
        acks, timeout = _ACKS_TIMEOUT.unpack_from(frame, pos + 1)
        pos += 7
        if frame[pos] != 2:  # one topic
            return None
        n = frame[pos + 1]  # the name's length + 1: one byte below 128 (varint calls are costly)
        pos += 2
        if n >= 0x80:
            n, pos = read_uvarint_tail(frame, pos, n)
        n -= 1
        if n < 0 or pos + n > end:
            return None
        name = bytes(frame[pos : pos + n])
        pos += n
        if frame[pos] != 2:  # one partition
            return None
        (index,) = _I32.unpack_from(frame, pos + 1)
        size = frame[pos + 5]
        pos += 6
        if size >= 0x80:
            size, pos = read_uvarint_tail(frame, pos, size)
        size -= 1
        # the records, then no tagged fields (partition, topic, request) and the frame's end
        if size < 0 or pos + size + 3 != end or frame[end - 3 : end] != b"\0\0\0":
            return None
        return acks, timeout, name, index, pos, size
    if _I16.unpack_from(frame, pos)[0] != -1:  # transactional_id: null
        return None
    acks, timeout = _ACKS_TIMEOUT.unpack_from(frame, pos + 2)
    pos += 8
    if _I32.unpack_from(frame, pos)[0] != 1:
        return None
    (n,) = _I16.unpack_from(frame, pos + 4)
    pos += 6
    if n < 0 or pos + n > end:
        return None
    name = bytes(frame[pos : pos + n])
    pos += n
    if _I32.unpack_from(frame, pos)[0] != 1:
        return None
    index, size = struct.unpack_from(">ii", frame, pos + 4)
    pos += 12
    if size < 0 or pos + size != end:
        return None
    return acks, timeout, name, index, pos, size


def try_produce(conn: Any, hdr: RequestHeader, frame: memoryview) -> Result:
    """Handle a Produce request on the fast path: None when it is not one for it (nothing done),
    True when it was answered, or a coroutine that finishes it (a flush, an RDMA-ordered append)."""
    version = hdr.api_version
    if not (ENABLED and FIRST_VERSION <= version <= LAST_VERSION) or hdr.body_offset < 0:
        return None
    gateway = conn.gateway
    broker = conn.broker
    quotas = gateway.quotas
    if (
        broker.authorizer is not None
        or (quotas is not None and quotas.enabled)
        or conn.session.close_after_response
        or gateway.requests.max_decoded_bytes < MIN_DECODE_BUDGET
    ):
        return None
    try:
        parsed = parse_one_partition(frame, hdr.body_offset, version >= FLEXIBLE_VERSION)
        if parsed is None:
            return None
        acks, _timeout, raw_name, index, at, size = parsed
        name = raw_name.decode()
    except (struct.error, IndexError, UnicodeDecodeError, ValueError):
        return None  # the generic decoder says what is wrong with it
    if acks not in (0, 1) and (acks != -1 or broker.cluster is not None):
        return None
    plog = broker.partition(name, index)
    if isinstance(plog, int) or (name in INTERNAL_TOPICS and hdr.client_id != ADMIN_CLIENT_ID):
        return None
    records = frame[at : at + size]
    if not size or refusal_of(version, records) is not None:
        return None
    started = time.monotonic()
    try:
        res = broker.append_now(plog, records)
    except Exception as exc:
        return _answer_failure(conn, hdr, acks, name, plog, index, exc, started)
    if res is None or res.flush_needed:
        return _finish(conn, hdr, acks, raw_name, plog, index, records, res, started)
    _answer(conn, hdr, acks, raw_name, index, res, started)
    return True


async def _finish(conn, hdr, acks, raw_name, plog, index, records, res, started) -> None:
    """The rest of a fast request that waits: an append ordered after RDMA writes, a flush."""
    if res is None:
        try:
            res = await conn.broker.append_ordered(plog, records)
        except Exception as exc:
            _answer_failure(conn, hdr, acks, raw_name.decode(), plog, index, exc, started)
            return
    if res.flush_needed:
        await asyncio.get_running_loop().run_in_executor(None, plog.flush)
    _answer(conn, hdr, acks, raw_name, index, res, started)


def _answer(conn, hdr: RequestHeader, acks: int, raw_name: bytes, index: int, res, started) -> None:
    """Send the answer to an append that succeeded, built straight from the fixed layouts."""
    if acks != 0 and not conn.closed:
        version = hdr.api_version
        t = res.log_append_time
        lat = -1 if t is None else t
        base = res.base_offset
        n = len(raw_name)
        if version >= FLEXIBLE_VERSION:
            body = (
                b"\0\x02"  # header tags, one topic
                + encode_uvarint(n + 1)
                + raw_name
                + b"\x02"  # one partition
                + _OK_FLEX.pack(index, 0, base, lat, res.log_start_offset, 1, 0, 0, 0, 0, 0)
            )
        else:
            if version >= 8:
                tail = _OK_V8.pack(index, 0, base, lat, res.log_start_offset, 0, -1, 0)
            elif version >= 5:
                tail = _OK_V5.pack(index, 0, base, lat, res.log_start_offset, 0)
            else:
                tail = _OK_V3.pack(index, 0, base, lat, 0)
            body = b"\0\0\0\x01" + _I16.pack(n) + raw_name + b"\0\0\0\x01" + tail
        buf = bytearray(_SIZE_CORR.pack(len(body) + 4, hdr.correlation_id))
        buf += body
        conn.send_now(buf)
    conn.broker.metrics.request_done(PRODUCE, (time.monotonic() - started) * 1000)


def _answer_failure(conn, hdr, acks, name, plog, index, exc, started) -> bool:
    """Answer an append the store refused, with the generic handler's answer and encoder."""
    if acks != 0 and not conn.closed:
        response = {
            "responses": [{"name": name, "partition_responses": [failed_append(plog, index, exc)]}],
            "throttle_time": 0,
        }
        buf, _ = encode_response(PRODUCE, hdr.api_version, hdr.correlation_id, response)
        conn.send_now(buf)
    conn.broker.metrics.request_done(PRODUCE, (time.monotonic() - started) * 1000)
    return True

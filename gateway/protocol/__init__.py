"""The Kafka wire codec: request/response headers and bodies by API key and version.

Bodies are plain dicts keyed by kio's snake_case field names (see `compiler.py` for the value
conventions). Codecs are compiled on first use per (api key, version, direction) and cached.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

from .compiler import compile_decoder, compile_encoder
from .legacy import legacy_spec, legacy_versions
from .primitives import (
    NO_BUDGET,
    DecodeBudgetExceeded,
    DecodeError,
    EncodedArray,
    encode_uvarint,
    read_uvarint,
)
from .schema import EntitySpec, api_name, entity_spec, message_class, schema_versions

__all__ = [
    "NO_BUDGET",
    "DecodeBudgetExceeded",
    "DecodeError",
    "EncodedArray",
    "RequestHeader",
    "api_name",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "has_schema",
    "legacy_versions",
    "message_spec",
    "response_element_encoder",
    "parse_request_header",
    "part_length",
    "request_decoder",
    "request_encoder",
    "request_header_version",
    "response_decoder",
    "response_encoder",
    "response_fields",
    "response_header_version",
    "schema_versions",
]

_HEAD = struct.Struct(">hhi")
# RequestHeader(...) without the NamedTuple's Python-level __new__ (every request makes one)
_new_tuple = tuple.__new__
_I16 = struct.Struct(">h")
_SIZE_CORR = struct.Struct(">ii")


class RequestHeader(NamedTuple):
    """A parsed request header; `body_offset` is where the body starts (-1 when unknown)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


@functools.cache
def message_spec(api_key: int, version: int, is_request: bool) -> EntitySpec:
    """The field specs of a request or response body: kio's, or an old version derived from them
    (`legacy.py`). Raises KeyError when the protocol has no such version."""
    spec = legacy_spec(api_key, version, is_request)
    return spec if spec is not None else entity_spec(message_class(api_key, version, is_request))


@functools.cache
def response_fields(api_key: int, version: int) -> frozenset[str]:
    """The top-level field names of a response."""
    return frozenset(f.name for f in message_spec(api_key, version, False).fields)


def error_response(api_key: int, version: int, code: int) -> dict | None:
    """A response carrying `code` in its top-level error_code, or None if it has none."""
    try:
        spec = message_spec(api_key, version, False)
    except KeyError:
        return None
    if any(f.name == "error_code" and f.tag is None for f in spec.fields):
        return {"error_code": code}
    return None


def has_schema(api_key: int, version: int) -> bool:
    """True when the protocol defines (api_key, version)."""
    try:
        message_spec(api_key, version, True)
        return True
    except KeyError:
        return False


def request_header_version(api_key: int, version: int) -> int:
    """Request header v2 for flexible versions, v1 otherwise (v0 only for ControlledShutdown v0)."""
    if api_key == 7 and version == 0:
        return 0
    return 2 if message_spec(api_key, version, True).flexible else 1


def response_header_version(api_key: int, version: int) -> int:
    """Response header v1 for flexible versions; ApiVersions always answers with header v0."""
    if api_key == 18:
        return 0
    return 1 if message_spec(api_key, version, False).flexible else 0


@functools.cache
def request_decoder(api_key: int, version: int):
    """`decode(buf, pos) -> (dict, pos)` for a request body."""
    return compile_decoder(message_spec(api_key, version, True))


@functools.cache
def request_encoder(api_key: int, version: int):
    """`encode(out, dict, parts)` for a request body (used by tests and tools acting as clients)."""
    return compile_encoder(message_spec(api_key, version, True))


@functools.cache
def response_decoder(api_key: int, version: int):
    """`decode(buf, pos) -> (dict, pos)` for a response body."""
    return compile_decoder(message_spec(api_key, version, False))


@functools.cache
def response_encoder(api_key: int, version: int):
    """`encode(out, dict, parts)` for a response body."""
    return compile_encoder(message_spec(api_key, version, False))


@functools.cache
def response_element_encoder(api_key: int, version: int, path: tuple[str, ...]):
    """`encode(out, dict, parts)` for one element of the response array at `path` (field names
    from the top: ("topics",), ("topics", "partitions")); for building an EncodedArray."""
    entity = message_spec(api_key, version, False)
    for name in path:
        field = next((f for f in entity.fields if f.name == name), None)
        if field is None or field.kind != "struct_array":
            raise KeyError(f"api {api_key} v{version} response has no struct array {path}")
        entity = field.entity
    return compile_encoder(entity)


@functools.cache
def _response_plan(api_key: int, version: int) -> tuple[bool, object]:
    return bool(response_header_version(api_key, version)), response_encoder(api_key, version)


# Produce v3-v11's header versions (flexible from v9, KIP-482), known without its schema: looking
# them up loads Produce's spec (~5 ms of CPU) on the first Produce request, which the fast path
# (gateway/handlers/produce_fast.py) never needs otherwise: a fresh topic's first round paid it.
_PRODUCE_HEADER_VERSIONS = {v: 2 if v >= 9 else 1 for v in range(3, 12)}


@functools.cache
def _request_header_version(api_key: int, version: int) -> int:
    if api_key == 0 and version in _PRODUCE_HEADER_VERSIONS:
        return _PRODUCE_HEADER_VERSIONS[version]
    try:
        return request_header_version(api_key, version)
    except KeyError:
        return -1


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse the request header (v0, v1 or v2 by the API version) at the start of a frame.

    client_id is always a legacy nullable string (also in the flexible header v2). For an API key
    or version without a schema the body offset is -1: only key, version and correlation id are
    reliable then. Raises DecodeError when the header itself is truncated.
    """
    try:
        api_key, version, corr = _HEAD.unpack_from(frame, 0)
        hv = _request_header_version(api_key, version)
        if hv == 0:
            return RequestHeader(api_key, version, corr, None, 8)
        n = _I16.unpack_from(frame, 8)[0]
        pos = 10
        client_id = None
        if n >= 0:
            if pos + n > len(frame):
                raise DecodeError("truncated client id")
            client_id = str(frame[pos : pos + n], "utf-8", "replace")
            pos += n
        if hv == 2:
            if frame[pos] == 0:  # no tagged fields: the common case, without the varint call
                return _new_tuple(RequestHeader, (api_key, version, corr, client_id, pos + 1))
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
            if pos > len(frame):
                raise DecodeError("truncated header tagged fields")
        return RequestHeader(api_key, version, corr, client_id, pos if hv > 0 else -1)
    except (struct.error, IndexError) as exc:
        raise DecodeError(f"bad request header: {exc}") from None


def decode_request(
    header: RequestHeader, frame: memoryview, memory: int = NO_BUDGET, work: int = NO_BUDGET
) -> dict:
    """Decode a request body taking at most `memory` bytes (an estimate) and `work` array elements
    (see compiler.py); raises DecodeError (also for an unknown key/version), DecodeBudgetExceeded
    past either budget."""
    try:
        decode = request_decoder(header.api_key, header.api_version)
        body, _ = decode(frame, header.body_offset, memory, work)
    except DecodeError:
        raise
    except KeyError:
        raise DecodeError(f"no schema for api {header.api_key} v{header.api_version}") from None
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}") from None
    return body


def encode_response(
    api_key: int, version: int, correlation_id: int, body: dict
) -> tuple[bytearray, list]:
    """Frame a response: the 4-byte size prefix, header, body.

    Returns (buffer, parts): `parts` lists `(position in buffer, part)` for records sent from
    files (a part with a `length`) and large pre-encoded arrays sent from their own buffers (a
    bytearray); the size prefix already counts their lengths.
    """
    flexible_header, encoder = _response_plan(api_key, version)
    out = bytearray(8)
    if flexible_header:
        out.append(0)
    parts: list = []
    encoder(out, body, parts)
    size = len(out) - 4
    for _, part in parts:
        size += part_length(part)
    _SIZE_CORR.pack_into(out, 0, size, correlation_id)
    return out, parts


def part_length(part) -> int:
    """The bytes a response part adds to the frame (a file slice, or bytes sent from memory)."""
    return len(part) if isinstance(part, bytes | bytearray) else part.length


def encode_request(
    api_key: int, version: int, correlation_id: int, body: dict, client_id: str | None = "rdmalog"
) -> bytes:
    """Frame a request (size prefix, header by version, body); for tests and tools."""
    out = bytearray(4)
    out += _HEAD.pack(api_key, version, correlation_id)
    hv = request_header_version(api_key, version)
    if hv >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            raw = client_id.encode()
            out += _I16.pack(len(raw)) + raw
    if hv == 2:
        out.append(0)
    parts: list = []
    request_encoder(api_key, version)(out, body, parts)
    if parts:
        raise ValueError("requests cannot reference file slices")
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, dict]:
    """Decode a response frame (without its size prefix) -> (correlation id, body)."""
    frame = memoryview(frame)
    corr = struct.unpack_from(">i", frame, 0)[0]
    pos = 4
    if response_header_version(api_key, version):
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    body, _ = response_decoder(api_key, version)(frame, pos)
    return corr, body


_ = encode_uvarint  # re-exported helper for handlers that build raw tagged data

"""The old versions derived in gateway/protocol/legacy.py (Kafka 3.9's, gone from kio) have the wire
layout kafka-python's own structs for those versions have, and requests it encodes decode here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import kafka.protocol.old as kp_old
import pytest
from kafka.protocol.old import types as kt
from kafka.protocol.old.api import Request, Response

from gateway.protocol import message_spec, request_decoder, response_encoder
from gateway.protocol.legacy import LEGACY

_KP_TYPES = {kt.Int8: "i8", kt.Int16: "i16", kt.Int32: "i32", kt.Int64: "i64", kt.String: "str"}
_KP_TYPES.update({kt.Bytes: "bytes", kt.Boolean: "bool"})
_OUR_TYPES = {"int8": "i8", "int16": "i16", "error_code": "i16", "int32": "i32"}
_OUR_TYPES.update({"timedelta_i32": "i32", "int64": "i64", "timedelta_i64": "i64"})
_OUR_TYPES.update({"datetime_i64": "i64", "string": "str", "bytes": "bytes", "records": "bytes"})
_OUR_TYPES.update({"bool": "bool"})


def _kafka_python_structs() -> dict[tuple[int, int, bool], type]:
    found = {}
    for m in pkgutil.iter_modules(kp_old.__path__):
        mod = importlib.import_module(f"kafka.protocol.old.{m.name}")
        for _, c in inspect.getmembers(mod, inspect.isclass):
            version = getattr(c, "API_VERSION", None)
            if issubclass(c, (Request, Response)) and isinstance(version, int):
                if hasattr(c, "SCHEMA"):
                    found[(c.API_KEY, version, issubclass(c, Request))] = c
    return found


STRUCTS = _kafka_python_structs()
CASES = [(k, v, req) for (k, req), versions in LEGACY.items() for v in versions]


def kp_layout(t) -> list:
    if isinstance(t, kt.Schema):
        return [kp_layout(f) for f in t.fields]
    if isinstance(t, kt.Array):
        return ["[", kp_layout(t.array_of), "]"]
    return _KP_TYPES[t if isinstance(t, type) else type(t)]


def our_layout(spec) -> list:
    out = []
    for f in spec.fields:
        if f.kind == "struct_array":
            out.append(["[", our_layout(f.entity), "]"])
        elif f.kind == "prim_array":
            out.append(["[", _OUR_TYPES[f.ktype], "]"])
        else:
            out.append(_OUR_TYPES[f.ktype])
    return out


@pytest.mark.parametrize("api_key,version,is_request", CASES)
def test_wire_layout_matches_kafka_python(api_key: int, version: int, is_request: bool) -> None:
    theirs = STRUCTS[(api_key, version, is_request)]
    spec = message_spec(api_key, version, is_request)
    assert not spec.flexible
    if (api_key, version, is_request) == (35, 0, True):
        # kafka-python's struct has `partitions` as one int32; Kafka 3.9's JSON says []int32
        assert our_layout(spec) == [["[", ["str", ["[", "i32", "]"]], "]"]]
        return
    assert our_layout(spec) == kp_layout(theirs.SCHEMA)


def test_kafka_python_requests_decode() -> None:
    produce = STRUCTS[(0, 2, True)](
        required_acks=1, timeout=500, topics=[("t", [(0, b"\x00" * 26)])]
    ).encode()
    body, end = request_decoder(0, 2)(memoryview(produce), 0)
    assert end == len(produce)
    assert body["acks"] == 1 and body["topic_data"][0]["partition_data"][0]["index"] == 0
    assert bytes(body["topic_data"][0]["partition_data"][0]["records"]) == b"\x00" * 26
    lo = STRUCTS[(2, 0, True)](replica_id=-1, topics=[("t", [(0, -1, 5)])]).encode()
    body, _ = request_decoder(2, 0)(memoryview(lo), 0)
    assert body["topics"][0]["partitions"][0] == {
        "partition_index": 0,
        "timestamp": -1,
        "max_num_offsets": 5,
    }
    oc = STRUCTS[(8, 1, True)](
        group_id="g",
        generation_id_or_member_epoch=3,
        member_id="m",
        topics=[("t", [(0, 42, 1234, "md")])],
    ).encode()
    body, _ = request_decoder(8, 1)(memoryview(oc), 0)
    assert body["topics"][0]["partitions"][0]["commit_timestamp"] == 1234
    assert body["generation_id_or_member_epoch"] == 3


def test_responses_encode_as_kafka_python_reads_them() -> None:
    out = bytearray()
    response_encoder(2, 0)(
        out,
        {
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "old_style_offsets": [7, 0]}]}
            ]
        },
        [],
    )
    decoded = STRUCTS[(2, 0, False)].decode(bytes(out))
    assert decoded.topics[0][1][0][2] == [7, 0]
    out = bytearray()
    response_encoder(32, 0)(
        out,
        {
            "results": [
                {"resource_type": 2, "resource_name": "t", "configs": [
                    {"name": "a", "value": "1", "read_only": False, "is_default": True}
                ]}
            ]
        },
        [],
    )  # fmt: skip
    cfg = STRUCTS[(32, 0, False)].decode(bytes(out)).resources[0][4][0]
    assert cfg[0] == "a" and cfg[3] is True  # is_default

"""The gateway's Kafka wire codec against kafka-python's independent protocol implementation."""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin.topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from gateway.protocol import (
    DecodeError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    request_decoder,
    response_encoder,
)
from gateway.protocol.primitives import encode_uvarint, read_uvarint


def _records(n: int = 3, codec: int = 0) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20)
    for i in range(n):
        b.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * 50, headers=[])
    b.close()
    return bytes(b.buffer())


def _kp_frame(msg, corr: int = 11, client_id: str = "tester") -> bytes:
    msg.with_header(correlation_id=corr, client_id=client_id)
    return bytes(msg.encode(header=True))


def _roundtrip(api_key: int, version: int, raw: bytes, client_id: str | None = "tester") -> dict:
    """Decode kafka-python's request bytes, re-encode with ours, require identical bytes."""
    mv = memoryview(bytearray(raw))
    hdr = parse_request_header(mv)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id) == (api_key, version, 11)
    assert hdr.client_id == client_id
    body = decode_request(hdr, mv)
    again = encode_request(api_key, version, 11, body, client_id=client_id)
    assert again[4:] == raw
    return body


@pytest.mark.parametrize("version", [0, 1, 4, 9, 10, 12])
def test_metadata_request_roundtrip(version):
    T = MetadataRequest.MetadataRequestTopic
    kw = {"topics": [T(name="orders"), T(name="a" * 200)]}
    if version >= 4:
        kw["allow_auto_topic_creation"] = False
    if version >= 10:
        kw["topics"] = [
            T(name="orders", topic_id=uuid.UUID(int=7)),
            T(name=None, topic_id=uuid.uuid4()),
        ]
    body = _roundtrip(3, version, _kp_frame(MetadataRequest[version](**kw)))
    assert body["topics"][0]["name"] == "orders"
    if version >= 10:
        assert body["topics"][1]["name"] is None
        assert body["topics"][0]["topic_id"] == uuid.UUID(int=7)
    else:
        assert body["topics"][1]["name"] == "a" * 200  # compact length needs a 2-byte varint
    if version >= 4:
        assert body["allow_auto_topic_creation"] is False


def test_metadata_request_null_topics_means_all():
    body = _roundtrip(3, 12, _kp_frame(MetadataRequest[12](topics=None)))
    assert body["topics"] is None


@pytest.mark.parametrize("version", [3, 7, 9, 11])
def test_produce_request_records_are_views_of_the_frame(version):
    recs = _records(5)
    P = ProduceRequest
    req = P[version](
        transactional_id=None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            P.TopicProduceData(
                name="t",
                partition_data=[
                    P.TopicProduceData.PartitionProduceData(index=2, records=recs),
                    P.TopicProduceData.PartitionProduceData(index=3, records=None),
                ],
            )
        ],
    )
    raw = _kp_frame(req)
    frame = bytearray(raw)
    mv = memoryview(frame)
    body = decode_request(parse_request_header(mv), mv)
    assert body["acks"] == -1 and body["timeout"] == 1500
    part = body["topic_data"][0]["partition_data"][0]
    assert part["index"] == 2
    records = part["records"]
    assert isinstance(records, memoryview) and bytes(records) == recs
    assert body["topic_data"][0]["partition_data"][1]["records"] is None
    # zero copy: patching the view patches the frame itself
    records[0:8] = struct.pack(">q", 42)
    assert frame.find(struct.pack(">q", 42)) >= 0
    assert encode_request(0, version, 11, body, "tester")[4:] != raw  # the patch is visible


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15])
def test_fetch_request_roundtrip(version):
    F = FetchRequest
    tid = uuid.uuid4()
    part = F.FetchTopic.FetchPartition(
        partition=1, fetch_offset=123456789012, partition_max_bytes=1 << 20
    )
    topic = F.FetchTopic(topic="events", topic_id=tid, partitions=[part])
    kw = dict(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=1,
        topics=[topic],
    )
    if version >= 7:
        kw.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
    if version >= 11:
        kw["rack_id"] = "r1"
    if version >= 15:
        kw.pop("replica_id")
    body = _roundtrip(1, version, _kp_frame(F[version](**kw)))
    assert body["max_wait"] == 500 and body["max_bytes"] == 50 << 20
    t = body["topics"][0]
    if version >= 13:
        assert t["topic_id"] == tid
    else:
        assert t["topic"] == "events"
    assert t["partitions"][0]["fetch_offset"] == 123456789012


@pytest.mark.parametrize("version", [0, 2, 3, 4])
def test_api_versions_request_roundtrip(version):
    kw = {}
    if version >= 3:
        kw = {"client_software_name": "kafka-python", "client_software_version": "3.0"}
    body = _roundtrip(18, version, _kp_frame(ApiVersionsRequest[version](**kw)))
    if version >= 3:
        assert body["client_software_name"] == "kafka-python"


@pytest.mark.parametrize("version", [2, 5, 7])
def test_create_topics_request_roundtrip(version):
    C = CreateTopicsRequest.CreatableTopic
    topic = C(
        name="new",
        num_partitions=-1,
        replication_factor=-1,
        assignments=[],
        configs=[
            C.CreatableTopicConfig(name="retention.ms", value="1000"),
            C.CreatableTopicConfig(name="x", value=None),
        ],
    )
    body = _roundtrip(
        19,
        version,
        _kp_frame(
            CreateTopicsRequest[version](topics=[topic], timeout_ms=1000, validate_only=True)
        ),
    )
    assert body["topics"][0]["configs"][1]["value"] is None
    assert body["validate_only"] is True


def test_delete_topics_request_versions():
    body = _roundtrip(
        20, 1, _kp_frame(DeleteTopicsRequest[1](topic_names=["a", "b"], timeout_ms=5))
    )
    assert body["topic_names"] == ["a", "b"]
    tid = uuid.uuid4()
    S = DeleteTopicsRequest.DeleteTopicState
    body = _roundtrip(
        20, 6, _kp_frame(DeleteTopicsRequest[6](topics=[S(name=None, topic_id=tid)], timeout_ms=5))
    )
    assert body["topics"][0] == {"name": None, "topic_id": tid}


def test_list_offsets_request_roundtrip():
    L = ListOffsetsRequest
    p = L.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=-3
    )
    req = L[8](
        replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="t", partitions=[p])]
    )
    body = _roundtrip(2, 8, _kp_frame(req))
    assert body["topics"][0]["partitions"][0]["timestamp"] == -3


def test_request_header_v1_null_client_id_and_v2_tagged_fields():
    raw = _kp_frame(MetadataRequest[1](topics=[]), client_id=None)
    _roundtrip(3, 1, raw, client_id=None)
    # header v2 with an unknown tagged field: skipped, the body still parses
    body = encode_request(3, 12, 11, {"topics": None}, client_id="c")[4:]
    hdr_end = 8 + 2 + 1  # key, version, corr, len(client_id), "c"
    assert body[hdr_end] == 0
    tagged = (
        body[:hdr_end]
        + b"\x01"
        + encode_uvarint(5)
        + encode_uvarint(3)
        + b"xyz"
        + body[hdr_end + 1 :]
    )
    mv = memoryview(bytearray(tagged))
    hdr = parse_request_header(mv)
    assert hdr.body_offset == hdr_end + 6
    assert decode_request(hdr, mv)["topics"] is None


def _kp_decode(cls, version: int, buf: bytearray, parts: list):
    assert not parts
    size = struct.unpack_from(">i", buf, 0)[0]
    assert size == len(buf) - 4
    return cls.decode(bytes(buf[4:]), version=version, header=True)


@pytest.mark.parametrize("version", [0, 1, 7, 9, 12])
def test_metadata_response_decodes_with_kafka_python(version):
    tid = uuid.uuid4()
    body = {
        "brokers": [{"node_id": 1, "host": "broker-host", "port": 9092}],
        "cluster_id": "cid",
        "controller_id": 1,
        "topics": [
            {
                "name": "t",
                "topic_id": tid,
                "partitions": [
                    {
                        "partition_index": i,
                        "leader_id": 1,
                        "leader_epoch": 0,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                    }
                    for i in range(200)
                ],
            },
            {"error_code": 3, "name": "missing"},
        ],
    }
    buf, parts = encode_response(3, version, 99, body)
    r = _kp_decode(MetadataResponse, version, buf, parts)
    assert r.header.correlation_id == 99
    assert r.brokers[0].host == "broker-host" and r.brokers[0].rack is None
    assert len(r.topics[0].partitions) == 200 and r.topics[0].partitions[199].partition_index == 199
    assert r.topics[0].partitions[5].isr_nodes == [1]
    assert r.topics[1].error_code == 3 and r.topics[1].partitions == []
    if version >= 10:
        assert r.topics[0].topic_id == tid
    _, ours = decode_response(3, version, bytes(buf[4:]))
    assert ours["topics"][0]["partitions"][3]["partition_index"] == 3


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_fetch_response_with_records_and_tagged_fields(version):
    recs = _records(4)
    tid = uuid.uuid4()
    part = {
        "partition_index": 0,
        "high_watermark": 4,
        "last_stable_offset": 4,
        "log_start_offset": 0,
        "records": recs,
        "current_leader": {"leader_id": 1, "leader_epoch": 0},  # a tagged struct from v12
    }
    body = {
        "responses": [
            {
                "topic": "t",
                "topic_id": tid,
                "partitions": [part, {"partition_index": 1, "error_code": 1}],
            }
        ]
    }
    buf, parts = encode_response(1, version, 5, body)
    r = _kp_decode(FetchResponse, version, buf, parts)
    p0 = r.responses[0].partitions[0]
    assert p0.high_watermark == 4 and p0.records == recs
    assert r.responses[0].partitions[1].error_code == 1
    assert r.responses[0].partitions[1].log_start_offset == -1  # schema default, not 0
    if version >= 12:
        assert p0.current_leader.leader_id == 1
    if version >= 13:
        assert r.responses[0].topic_id == tid
    _, ours = decode_response(1, version, bytes(buf[4:]))
    got = ours["responses"][0]["partitions"][0]
    assert bytes(got["records"]) == recs
    if version >= 12:
        assert got["current_leader"] == {"leader_id": 1, "leader_epoch": 0}
        assert got["diverging_epoch"] == {"epoch": -1, "end_offset": -1}


class _Slice:
    """Stands for a store FileSlice: only the length is encoded, the bytes go by sendfile."""

    def __init__(self, length: int) -> None:
        self.length = length


def test_fetch_response_file_slices_are_left_as_parts():
    big = _Slice(300)
    body = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "records": big},
                    {"partition_index": 1, "records": b"abc"},
                    {"partition_index": 2, "records": _Slice(5)},
                ],
            }
        ]
    }
    buf, parts = encode_response(1, 12, 1, body)
    assert [p[1].length for p in parts] == [300, 5]
    assert struct.unpack_from(">i", buf, 0)[0] == len(buf) - 4 + 305
    # splice in the bytes the server would sendfile and decode the whole frame
    chunks, pos = [], 0
    for at, sl in parts:
        chunks += [bytes(buf[pos:at]), bytes([sl.length % 251]) * sl.length]
        pos = at
    chunks.append(bytes(buf[pos:]))
    frame = b"".join(chunks)
    _, ours = decode_response(1, 12, frame[4:])
    got = ours["responses"][0]["partitions"]
    assert bytes(got[0]["records"]) == bytes([300 % 251]) * 300
    assert bytes(got[1]["records"]) == b"abc"
    assert len(got[2]["records"]) == 5


def test_api_versions_response_always_header_v0_and_tags():
    body = {
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "supported_features": [{"name": "f", "min_version": 1, "max_version": 2}],
        "finalized_features_epoch": 3,
    }
    buf, parts = encode_response(18, 3, 77, body)
    r = _kp_decode(ApiVersionsResponse, 3, buf, parts)
    assert r.api_keys[0].max_version == 4
    assert r.finalized_features_epoch == 3 and r.supported_features[0].name == "f"
    # header v0: the body's error code follows the correlation id directly
    assert struct.unpack_from(">ih", buf, 4) == (77, 0)


def test_produce_response_defaults_and_nullable_timestamp():
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [{"index": 0, "base_offset": 10, "log_append_time": None}],
            }
        ]
    }
    buf, parts = encode_response(0, 9, 3, body)
    r = _kp_decode(ProduceResponse, 9, buf, parts)
    p = r.responses[0].partition_responses[0]
    assert (p.base_offset, p.log_append_time_ms, p.log_start_offset, p.error_message) == (
        10,
        -1,
        -1,
        None,
    )


def test_create_topics_response_tagged_field_written_only_when_set():
    base = {
        "topics": [{"name": "t", "error_code": 0, "num_partitions": 1, "replication_factor": 1}]
    }
    plain, _ = encode_response(19, 7, 1, base)
    base["topics"][0]["topic_config_error_code"] = 40
    tagged, _ = encode_response(19, 7, 1, base)
    assert len(tagged) == len(plain) + 4  # tag, size, int16
    r = CreateTopicsResponse.decode(bytes(tagged[4:]), version=7, header=True)
    assert r.topics[0].topic_config_error_code == 40


def test_produce_header_versions_known_without_the_schema_are_the_schemas():
    """The header versions parse_request_header knows for Produce v3-v11 without loading its spec
    (the fast path's first request) are those the schema gives."""
    from gateway.protocol import _PRODUCE_HEADER_VERSIONS, request_header_version

    assert sorted(_PRODUCE_HEADER_VERSIONS) == list(range(3, 12))
    for version, hv in _PRODUCE_HEADER_VERSIONS.items():
        assert hv == request_header_version(0, version), version


def test_a_fresh_process_parses_a_produce_header_without_building_a_schema():
    """A broker's first Produce request on the fast path builds no message spec (building
    Produce's cost a fresh topic's first round ~5 ms): checked in a fresh interpreter."""
    script = """
import struct
from gateway.protocol import message_spec, parse_request_header
frame = struct.pack(">hhih", 0, 9, 7, 1) + b"c" + b"\\0" + b"body"
hdr = parse_request_header(memoryview(frame))
assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (0, 9, 7, "c"), hdr
assert hdr.body_offset == 12, hdr
assert message_spec.cache_info().currsize == 0, message_spec.cache_info()
"""
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", script], check=True, cwd=root)


def test_truncated_and_malformed_bodies_raise_decode_error():
    raw = _kp_frame(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="abc")]))
    for cut in range(len(raw) - 1, 0, -1):
        mv = memoryview(bytearray(raw[:cut]))
        with pytest.raises(DecodeError):
            decode_request(parse_request_header(mv), mv)
    # a non-nullable legacy string sent as null
    bad = encode_request(3, 1, 11, {"topics": [{"name": "x"}]})[4:]
    bad = bad[:-3] + b"\xff\xff"
    mv = memoryview(bytearray(bad))
    with pytest.raises(DecodeError):
        decode_request(parse_request_header(mv), mv)
    # an array count far beyond the frame
    huge = bytearray(encode_request(3, 1, 11, {"topics": []})[4:])
    struct.pack_into(">i", huge, len(huge) - 4, 1 << 30)
    with pytest.raises(DecodeError):
        decode_request(parse_request_header(memoryview(huge)), memoryview(huge))
    with pytest.raises(DecodeError):
        parse_request_header(memoryview(b"\x00\x03\x00"))


def test_unknown_tagged_fields_are_skipped():
    dec = request_decoder(18, 3)
    body = b"\x04abc\x021" + b"\x02" + b"\x07\x02hi" + b"\x09\x00"
    got, end = dec(memoryview(body), 0)
    assert got == {"client_software_name": "abc", "client_software_version": "1"}
    assert end == len(body)


def test_uvarint_edges():
    for v in (0, 1, 127, 128, 16383, 16384, 2**31, 2**35 - 1):
        enc = encode_uvarint(v)
        assert read_uvarint(enc, 0) == (v, len(enc))
    with pytest.raises(DecodeError):
        read_uvarint(b"\xff" * 11, 0)


def test_missing_response_keys_get_schema_defaults():
    out = bytearray()
    response_encoder(1, 4)(out, {"responses": [{"topic": "t", "partitions": [{}]}]}, [])
    _, ours = decode_response(1, 4, b"\0\0\0\0" + bytes(out))
    p = ours["responses"][0]["partitions"][0]
    assert (
        p["last_stable_offset"] == -1 and p["records"] is None and p["aborted_transactions"] is None
    )

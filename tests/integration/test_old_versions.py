"""Every version Kafka 3.9 accepts, with raw requests built from Kafka's message schemas (the old
versions' derived in gateway/protocol/legacy.py): Produce v0-v2 with message sets of formats v0/v1
(up-converted), Fetch v0-v3 (down-converted), ListOffsets v0, OffsetCommit v0-v1, OffsetFetch v0,
CreateTopics v0-v1, DeleteTopics v0, OffsetForLeaderEpoch v0-v1, DescribeConfigs v0,
DescribeLogDirs v0. Message sets are kafka-python's own legacy builder's and are read back by its
legacy reader, CRCs checked."""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from rawkafka import RawClient

from rdmalog.store.compression import Codec
from rdmalog.store.records import Record, build_batch, decode_all

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
T0 = 1_700_000_000_000


@pytest.fixture
def client(bootstrap: str):
    with RawClient(bootstrap, client_id="old-versions") as c:
        yield c


def new_topic(c: RawClient, configs: dict[str, str] | None = None, partitions: int = 1) -> str:
    """A fresh topic, created with CreateTopics v0."""
    name = f"old-{uuid.uuid4().hex[:8]}"
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout": 10000,
    }
    (result,) = c.call(19, 0, body)["topics"]
    assert (result["name"], result["error_code"]) == (name, 0)
    return name


def message_set(magic: int, codec: Codec, n: int, start: int = 0) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for i in range(start, start + n):
        b.append(i - start, T0 + i if magic else None, b"k%d" % i, b"value-%d" % i)
    return bytes(b.build())


def produce(c: RawClient, version: int, topic: str, records: bytes, acks: int = -1) -> dict:
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    resp = c.call(0, version, body)
    assert ("throttle_time" in resp) == (version >= 1)
    return resp["responses"][0]["partition_responses"][0]


def fetch(c: RawClient, version: int, topic: str, offset: int, limit: int = 1 << 20) -> dict:
    part = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": limit}
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 24,
        "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [part]}],
    }
    return c.call(1, version, body)["responses"][0]["partitions"][0]


def read_message_set(data: bytes, magic: int) -> list[tuple]:
    """(offset, timestamp, key, value) of every whole message, as an old kafka-python reads it."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if pos + 12 + size > len(data):
            break  # a partial message at the end: clients skip it
        batch = LegacyRecordBatch(memoryview(data[pos : pos + 12 + size]), magic)
        assert batch.magic == magic and batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
        pos += 12 + size
    return out


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_produce_v0_v2_message_sets_and_fetch_them_at_every_version(
    client: RawClient, codec: Codec
) -> None:
    topic = new_topic(client)
    answers = [
        produce(client, 0, topic, message_set(0, codec, 3, 0)),
        produce(client, 1, topic, message_set(0, codec, 3, 3)),
        produce(client, 2, topic, message_set(1, codec, 3, 6)),
    ]
    assert [(a["error_code"], a["base_offset"]) for a in answers] == [(0, 0), (0, 3), (0, 6)]
    assert answers[2]["log_append_time"] == -1  # CreateTime topic
    stamps = [-1] * 6 + [T0 + i for i in range(6, 9)]
    want = [(i, stamps[i], b"k%d" % i, b"value-%d" % i) for i in range(9)]
    # v4+: the v2 batches the log holds
    got = decode_all(bytes(fetch(client, 4, topic, 0)["records"]))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == want
    # v0-v1 read format v0 (no timestamps), v2-v3 format v1
    for version in range(4):
        magic = 0 if version <= 1 else 1
        p = fetch(client, version, topic, 0)
        assert (p["error_code"], p["high_watermark"]) == (0, 9)
        rows = read_message_set(bytes(p["records"]), magic)
        assert [(o, k, v) for o, _, k, v in rows] == [(o, k, v) for o, _, k, v in want]
        if magic == 1:
            assert [ts for _, ts, _, _ in rows] == stamps


def test_fetch_v0_v3_of_v2_batches_from_the_middle_and_within_limits(client: RawClient) -> None:
    topic = new_topic(client)
    batch = build_batch([Record(b"k%d" % i, b"x" * 100, [("h", b"v")], T0 + i) for i in range(10)])
    assert produce(client, 9, topic, batch)["error_code"] == 0
    gz = build_batch([Record(b"z%d" % i, b"y" * 100, [], T0) for i in range(5)], compression=1)
    assert produce(client, 9, topic, gz)["base_offset"] == 10
    for version in range(4):
        magic = 0 if version <= 1 else 1
        rows = read_message_set(bytes(fetch(client, version, topic, 4)["records"]), magic)
        # the uncompressed batch from offset 4, the compressed one whole (as Kafka converts them)
        assert [o for o, _, _, _ in rows] == list(range(4, 15))
        # starting inside the compressed batch: all of it comes (clients skip what they passed)
        rows = read_message_set(bytes(fetch(client, version, topic, 12)["records"]), magic)
        assert [o for o, _, _, _ in rows] == list(range(10, 15))
    # v3 (KIP-74): the first batch comes whole even over the partition limit; v0-v2 get nothing
    assert len(read_message_set(bytes(fetch(client, 3, topic, 0, limit=200)["records"]), 1)) == 10
    for version in range(3):
        p = fetch(client, version, topic, 0, limit=200)
        assert (p["error_code"], bytes(p["records"] or b"")) == (0, b"")


def test_down_conversion_can_be_disabled_per_topic(client: RawClient) -> None:
    topic = new_topic(client, {"message.downconversion.enable": "false"})
    assert produce(client, 2, topic, message_set(1, Codec.NONE, 2))["error_code"] == 0
    for version in range(4):
        assert fetch(client, version, topic, 0)["error_code"] == 35  # UNSUPPORTED_VERSION
    assert len(decode_all(bytes(fetch(client, 4, topic, 0)["records"]))) == 2


def test_zstd_batches_cannot_go_to_old_consumers(client: RawClient) -> None:
    topic = new_topic(client)
    zstd = build_batch([Record(b"k", b"v")], compression=Codec.ZSTD)
    assert produce(client, 6, topic, zstd)["error_code"] == 76  # zstd needs Produce v7
    assert produce(client, 7, topic, zstd)["error_code"] == 0
    assert fetch(client, 3, topic, 0)["error_code"] == 76  # UNSUPPORTED_COMPRESSION_TYPE


def test_produce_v3_on_takes_one_v2_batch_from_offset_zero(client: RawClient) -> None:
    topic = new_topic(client)
    one = build_batch([Record(b"k", b"v")])
    assert produce(client, 3, topic, bytes(one) * 2)["error_code"] == 87  # INVALID_RECORD
    assert produce(client, 3, topic, message_set(1, Codec.NONE, 1))["error_code"] == 87
    moved = build_batch([Record(b"k", b"v")], base_offset=5)
    assert produce(client, 9, topic, moved)["error_code"] == 87
    assert produce(client, 2, topic, bytes(one))["error_code"] == 0  # v0-v2 may send v2 batches
    assert produce(client, 3, topic, one)["error_code"] == 0


def test_produce_refuses_record_errors_listing_each_record(client: RawClient) -> None:
    topic = new_topic(client, {"cleanup.policy": "compact", "message.timestamp.before.max.ms": "60000"})  # fmt: skip
    keys = build_batch([Record(b"a", b"1"), Record(None, b"2"), Record(b"c", b"3")])
    answer = produce(client, 8, topic, keys)
    assert answer["error_code"] == 87  # INVALID_RECORD
    assert [e["batch_index"] for e in answer["record_errors"]] == [1]
    assert (
        "Compacted topic cannot accept message without key"
        in (answer["record_errors"][0]["batch_index_error_message"])
    )
    old = build_batch([Record(b"a", b"1"), Record(b"b", b"2", timestamp=T0)])
    answer = produce(client, 11, topic, old)
    assert answer["error_code"] == 32  # INVALID_TIMESTAMP
    assert [e["batch_index"] for e in answer["record_errors"]] == [1]
    assert (
        answer["error_message"] == "One or more records have been rejected due to invalid timestamp"
    )
    assert produce(client, 7, topic, old)["error_code"] == 32  # no record_errors before v8
    v0 = produce(client, 0, topic, message_set(0, Codec.NONE, 1))
    assert v0["error_code"] == 0  # v0 messages have no timestamp: nothing to check, a key each


def test_list_offsets_v0_old_style_offsets(client: RawClient) -> None:
    topic = new_topic(client, {"segment.bytes": "1500"})
    for i in range(4):
        batch = build_batch([Record(b"k", b"x" * 600)] * 2)
        assert produce(client, 9, topic, batch)["base_offset"] == 2 * i

    def offsets(timestamp: int, n: int) -> list[int]:
        part = {"partition_index": 0, "timestamp": timestamp, "max_num_offsets": n}
        body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [part]}]}
        p = client.call(2, 0, body)["topics"][0]["partitions"][0]
        assert p["error_code"] == 0
        return p["old_style_offsets"]

    assert offsets(-1, 1) == [8]  # latest: the log end
    assert offsets(-2, 1) == [0]  # earliest
    assert offsets(-1, 10) == [8, 6, 4, 2, 0]  # segment starts, newest first
    assert offsets(-1, 2) == [8, 6]
    assert offsets(1, 5) == []  # nothing was written before 1970
    assert offsets(2**62, 3) == [8, 6, 4]
    part = {"partition_index": 0, "timestamp": -3, "max_num_offsets": 1}
    body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [part]}]}
    assert client.call(2, 0, body)["topics"][0]["partitions"][0]["error_code"] == 35
    part = {"partition_index": 0, "timestamp": -5}  # v9: latest tiered: none without tiers
    body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [part]}]}
    p = client.call(2, 9, body)["topics"][0]["partitions"][0]
    assert (p["error_code"], p["offset"], p["leader_epoch"]) == (0, -1, -1)


def test_offset_commit_v0_v1_and_offset_fetch_v0(client: RawClient) -> None:
    topic = new_topic(client, partitions=2)
    group = f"old-group-{uuid.uuid4().hex[:6]}"
    v0 = {"group_id": group, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_metadata": "zero"}
    ]}]}  # fmt: skip
    assert client.call(8, 0, v0)["topics"][0]["partitions"][0]["error_code"] == 0
    v1 = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": topic, "partitions": [
            {"partition_index": 1, "committed_offset": 9, "commit_timestamp": -1,
             "committed_metadata": "one"}
        ]}
    ]}  # fmt: skip
    assert client.call(8, 1, v1)["topics"][0]["partitions"][0]["error_code"] == 0
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}
    got = client.call(9, 0, body)["topics"][0]["partitions"]
    assert [(p["committed_offset"], p["metadata"], p["error_code"]) for p in got] == [
        (5, "zero", 0),
        (9, "one", 0),
    ]


def test_admin_apis_at_their_first_versions(client: RawClient) -> None:
    name = f"old-{uuid.uuid4().hex[:8]}"
    spec = {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}  # fmt: skip
    checked = client.call(19, 1, {"topics": [spec], "timeout": 5000, "validate_only": True})
    assert checked["topics"][0]["error_code"] == 0 and "throttle_time" not in checked
    assert client.call(19, 0, {"topics": [spec], "timeout": 5000})["topics"][0]["error_code"] == 0
    again = client.call(19, 0, {"topics": [spec], "timeout": 5000})["topics"][0]
    assert again["error_code"] == 36 and "error_message" not in again  # v0: code only

    body = {"resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}]}
    (res,) = client.call(32, 0, body)["results"]
    rows = {c["name"]: c for c in res["configs"]}
    assert rows["cleanup.policy"]["is_default"] and rows["cleanup.policy"]["value"] == "delete"

    dirs = client.call(35, 0, {"topics": [{"topic": name, "partitions": [0, 1]}]})
    parts = dirs["results"][0]["topics"][0]["partitions"]
    assert sorted(p["partition_index"] for p in parts) == [0, 1]

    for version in (0, 1):
        ask = {"topics": [{"topic": name, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}
        p = client.call(23, version, ask)["topics"][0]["partitions"][0]
        assert (p["error_code"], p["end_offset"]) == (0, 0)

    gone = client.call(20, 0, {"topic_names": [name], "timeout": 5000})
    assert gone["responses"] == [{"name": name, "error_code": 0}]


def test_acl_apis_v0_are_literal_only(broker_factory) -> None:
    """DescribeAcls / CreateAcls / DeleteAcls v0 have no pattern types: Kafka reads them as
    LITERAL, so a v0 client sees and removes literal bindings only."""
    broker = broker_factory(
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        }
    )
    binding = {"resource_type": 2, "resource_name": "t-acl", "principal": "User:alice",
               "host": "*", "operation": 3, "permission_type": 3}  # fmt: skip
    with RawClient(broker.bootstrap) as c:
        created = c.call(30, 0, {"creations": [binding]})["results"]
        assert created == [{"error_code": 0, "error_message": None}]
        prefixed = {**binding, "resource_name": "t-", "resource_pattern_type": 4}
        assert c.call(30, 1, {"creations": [prefixed]})["results"][0]["error_code"] == 0
        any_filter = {"resource_type_filter": 1, "resource_name_filter": None,
                      "principal_filter": None, "host_filter": None, "operation": 1,
                      "permission_type": 1}  # fmt: skip
        described = c.call(29, 0, any_filter)
        assert described["error_code"] == 0
        assert [r["resource_name"] for r in described["resources"]] == ["t-acl"]
        assert "pattern_type" not in described["resources"][0]
        deleted = c.call(31, 0, {"filters": [any_filter]})["filter_results"][0]
        assert [a["resource_name"] for a in deleted["matching_acls"]] == ["t-acl"]
        left = c.call(29, 1, {**any_filter, "pattern_type_filter": 1})["resources"]
        assert [(r["resource_name"], r["pattern_type"]) for r in left] == [("t-", 4)]


def test_conversions_inflate_within_request_max_decoded_bytes(broker_factory) -> None:
    """A compressed message set inflating past request.max.decoded.bytes is refused with
    MESSAGE_TOO_LARGE before it takes the memory (a 2 KiB gzip of 2 MiB); one within it is
    up-converted, and both conversions leave the broker serving."""
    broker = broker_factory({"request.max.decoded.bytes": str(1 << 20)})
    with RawClient(broker.bootstrap) as c:
        topic = new_topic(c)
        b = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=4 << 20)
        for i in range(32):
            b.append(i, T0, b"k%d" % i, bytes(64 << 10))
        bomb = bytes(b.build())
        assert len(bomb) < 16 << 10
        refused = produce(c, 2, topic, bomb)
        assert refused["error_code"] == 10  # MESSAGE_TOO_LARGE
        assert produce(c, 2, topic, message_set(1, Codec.GZIP, 3))["error_code"] == 0
        rows = read_message_set(bytes(fetch(c, 3, topic, 0)["records"]), 1)
        assert [k for _, _, k, _ in rows] == [b"k0", b"k1", b"k2"]

"""Codec micro-benchmarks: kio (schema library) vs gateway.protocol (compiled from kio's schemas)."""

import datetime
import io
import time
import uuid

from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as kf
from kio.schema.metadata.v12 import response as km
from kio.schema.produce.v9.request import ProduceRequest as KProduce
from kio.schema.request_header.v2.header import RequestHeader as KHeader
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i32Timedelta, i64

from gateway.protocol import decode_request, encode_request, encode_response, parse_request_header


def recs(total, vsize=100):
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 24)
    for i in range(total // (vsize + 10)):
        b.append(timestamp=1000 + i, key=None, value=b"x" * vsize, headers=[])
    b.close()
    return bytes(b.buffer())


def bench(fn, n):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


R = recs(1 << 20)
frame = encode_request(
    0,
    9,
    1,
    {
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": R}]}],
    },
)[4:]
mv = memoryview(bytearray(frame))


def ours_dec():
    decode_request(parse_request_header(mv), mv)


hr, br = entity_reader(KHeader), entity_reader(KProduce)


def kio_dec():
    _, n = hr(frame, 0)
    br(frame, n)


res = {}
res["decode Produce v9 (1 MiB records)"] = (bench(kio_dec, 300), bench(ours_dec, 20000))

# Fetch v12 response: 1 topic x 8 partitions x 64 KiB records
R64 = recs(64 << 10)


class Slice:
    def __init__(self, n):
        self.length = n


def kio_fetch_obj():
    parts = tuple(
        kf.PartitionData(
            partition_index=i32(i),
            error_code=ErrorCode.none,
            high_watermark=i64(1000),
            last_stable_offset=i64(1000),
            log_start_offset=i64(0),
            aborted_transactions=None,
            records=R64,
        )
        for i in range(8)
    )
    return kf.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(kf.FetchableTopicResponse(topic=TopicName("t"), partitions=parts),),
    )


fw = entity_writer(kf.FetchResponse)
obj = kio_fetch_obj()


def kio_fetch_enc():
    b = io.BytesIO()
    fw(b, obj)
    b.getvalue()


def ours_fetch(records):
    def run():
        body = {
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": i,
                            "high_watermark": 1000,
                            "last_stable_offset": 1000,
                            "log_start_offset": 0,
                            "records": records,
                        }
                        for i in range(8)
                    ],
                }
            ]
        }
        encode_response(1, 12, 1, body)

    return run


res["build Fetch v12 response objects (8 x 64 KiB)"] = (bench(kio_fetch_obj, 2000), None)
res["encode Fetch v12 response (8 x 64 KiB)"] = (
    bench(kio_fetch_enc, 2000),
    bench(ours_fetch(R64), 20000),
)
res["encode Fetch v12 response, records as file slices"] = (
    None,
    bench(ours_fetch(Slice(len(R64))), 20000),
)

# Metadata v12 response, 18 partitions
tid = uuid.uuid4()


def kio_meta_obj():
    parts = tuple(
        km.MetadataResponsePartition(
            error_code=ErrorCode.none,
            partition_index=i32(i),
            leader_id=BrokerId(0),
            leader_epoch=i32(0),
            replica_nodes=(BrokerId(0),),
            isr_nodes=(BrokerId(0),),
            offline_replicas=(),
        )
        for i in range(18)
    )
    return km.MetadataResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        brokers=(
            km.MetadataResponseBroker(
                node_id=BrokerId(0), host="127.0.0.1", port=i32(9092), rack=None
            ),
        ),
        cluster_id="abc",
        controller_id=BrokerId(0),
        topics=(
            km.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=TopicName("t"),
                topic_id=tid,
                is_internal=False,
                partitions=parts,
                topic_authorized_operations=i32(-2147483648),
            ),
        ),
    )


mw = entity_writer(km.MetadataResponse)
mobj = kio_meta_obj()


def kio_meta_enc():
    b = io.BytesIO()
    mw(b, mobj)
    b.getvalue()


def meta_body() -> dict:
    return {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "abc",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "topic_id": tid,
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": i,
                        "leader_id": 0,
                        "leader_epoch": 0,
                        "replica_nodes": [0],
                        "isr_nodes": [0],
                        "offline_replicas": [],
                    }
                    for i in range(18)
                ],
            }
        ],
    }


def ours_meta():  # building the plain dicts included, as a handler does
    encode_response(3, 12, 1, meta_body())


res["build Metadata v12 response objects (18 partitions)"] = (bench(kio_meta_obj, 2000), None)
res["encode Metadata v12 response (18 partitions)"] = (
    bench(kio_meta_enc, 2000),
    bench(ours_meta, 20000),
)
print("| operation | kio 0.6.5 (us) | gateway.protocol (us) |")
print("| --- | ---: | ---: |")
for k, (a, b) in res.items():
    print(f"| {k} | {'-' if a is None else f'{a:.1f}'} | {'-' if b is None else f'{b:.1f}'} |")
META_BODY = meta_body()
print("metadata encode only", bench(lambda: encode_response(3, 12, 1, META_BODY), 20000))
fb = {
    "responses": [
        {
            "topic": "t",
            "partitions": [
                {
                    "partition_index": i,
                    "high_watermark": 1000,
                    "last_stable_offset": 1000,
                    "log_start_offset": 0,
                    "records": Slice(100),
                }
                for i in range(8)
            ],
        }
    ]
}
print("fetch encode only", bench(lambda: encode_response(1, 12, 1, fb), 20000))

"""Broker CPU per compressed record, with the client taken out: librdkafka's own compressed batches
(captured once per codec: confluent-kafka's producer with defaults but `compression.type`, 100-byte
records of the Kafka-protocol benchmark's fixed value, read back from the segment files of a
scratch rdmalog broker) replayed as prebuilt Produce v9 requests (acks=1, one batch each, 64 in
flight over one connection), so every broker sees the same bytes whatever its speed.

For each codec, repeat and broker (interleaved: A B A B), a fresh broker gets a one-partition topic
and `--requests` requests; prints broker CPU-s per million records (the figure) and rec/s (the
replay's, not a client's), median [min-max] over the repeats. `--perf DIR` records `perf record
-g` of each rdmalog broker's send into DIR (the broker's profile without the client).

    RDMALOG_BASELINE_BIN=/path/to/other/.venv/bin/rdmalog \\
    python bench/compressed_requests.py [--codecs lz4,zstd,gzip] [--brokers rdmalog,tansu]
                                        [--requests 400] [--repeat 5] [--perf DIR]
                                        [--producer batch.size=150000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brokers import Broker  # noqa: E402
from kafka_protocol import Meter, payload, settle  # noqa: E402
from produce_requests import PRODUCE, VERSION, create_topic, send_all, uptime_now  # noqa: E402

from gateway.protocol import encode_request  # noqa: E402


def capture(codec: str, records: int, extra: dict[str, str] | None = None) -> list[bytes]:
    """librdkafka's batches of `records` fixed-value records compressed with `codec` (`extra`:
    more producer settings, e.g. a smaller batch.size)."""
    from confluent_kafka import Producer

    broker = Broker("rdmalog")
    topic = f"capture-{codec}"
    try:
        broker.start()
        create_topic(broker.bootstrap, topic, 1)
        conf = {"bootstrap.servers": broker.bootstrap, "compression.type": codec, **(extra or {})}
        prod = Producer(conf)
        value = payload()
        for _ in range(records):
            while True:
                try:
                    prod.produce(topic, value)
                    break
                except BufferError:
                    prod.poll(0.005)
        if prod.flush(60):
            raise RuntimeError("capture: records left undelivered")
        out = []
        for seg in sorted((broker.workdir / "data" / f"{topic}-0").glob("*.log")):
            data, pos = seg.read_bytes(), 0
            while pos + 12 <= len(data):
                size = struct.unpack_from(">i", data, pos + 8)[0] + 12
                if size <= 12 or pos + size > len(data):
                    break
                # as the client sent it: base offset 0, leader epoch -1 (neither under the CRC)
                out.append(
                    bytes(8) + data[pos + 8 : pos + 12] + b"\xff" * 4 + data[pos + 16 : pos + size]
                )
                pos += size
        return out
    finally:
        broker.stop()


def frames(topic: str, batches: list[bytes], requests: int) -> tuple[list[bytes], int]:
    """`requests` Produce requests cycling through the batches, and the records they carry."""
    out, records = [], 0
    for i in range(requests):
        batch = batches[i % len(batches)]
        records += struct.unpack_from(">i", batch, 57)[0]
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        }
        out.append(encode_request(PRODUCE, VERSION, i, body, client_id="bench"))
    return out, records


def measure(name: str, codec: str, reqs: list[bytes], records: int, perf: Path | None) -> dict:
    """One fresh broker: create the topic, send the requests, broker CPU per million records."""
    broker = Broker(name)
    try:
        broker.start()
        create_topic(broker.bootstrap, "replay", 1)
        settle(broker.pid)
        rec = None
        if perf is not None and name != "tansu":
            perf.mkdir(parents=True, exist_ok=True)
            out = perf / f"{name}-{codec}-{int(time.time())}.data"
            cmd = ["perf", "record", "-g", "-q", "-o", str(out), "-p", str(broker.pid)]
            rec = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        try:
            with Meter(broker.pid) as m:
                errors = send_all(broker.port, reqs)
        finally:
            if rec is not None:
                rec.send_signal(2)
                rec.wait(30)
        res = m.result(records, records * 100)
        return {
            "broker": name,
            "codec": codec,
            "errors": errors,
            "cpu_s_per_M": round(res["broker_cpu_s"] / records * 1e6, 4),
            "records_per_s": res["records_per_s"],
        }
    finally:
        broker.stop()


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):g} [{min(xs):g}-{max(xs):g}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--codecs", default="lz4,zstd,gzip")
    ap.add_argument("--brokers", default="rdmalog,tansu")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--capture-records", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--perf", type=Path, default=None)
    ap.add_argument(
        "--producer",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting for the capture (e.g. batch.size=150000: smaller batches)",
    )
    args = ap.parse_args()
    print(json.dumps({"argv": sys.argv[1:], "uptime": uptime_now()}), flush=True)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for codec in [c.strip() for c in args.codecs.split(",") if c.strip()]:
        extra = dict(kv.split("=", 1) for kv in args.producer)
        batches = capture(codec, args.capture_records, extra)
        counts = [struct.unpack_from(">i", b, 57)[0] for b in batches]
        sizes = [len(b) for b in batches]
        print(
            json.dumps(
                {
                    "codec": codec,
                    "batches": len(batches),
                    "records_per_batch": spread(counts),
                    "bytes_per_batch": spread(sizes),
                }
            ),
            flush=True,
        )
        reqs, records = frames("replay", batches, args.requests)
        for _ in range(args.repeat):
            for b in brokers:
                row = measure(b, codec, reqs, records, args.perf)
                print(json.dumps(row), flush=True)
                rows.setdefault((codec, b), []).append(row)
    print(json.dumps({"uptime_after": uptime_now()}), flush=True)
    print("\n| codec | broker | broker CPU-s/M records (median [min-max]) | replay rec/s |")
    print("| --- | --- | --- | --- |")
    for (codec, b), rs in rows.items():
        cpu = [r["cpu_s_per_M"] for r in rs]
        rate = [r["records_per_s"] for r in rs]
        print(f"| {codec} | {b} | {spread(cpu)} | {spread(rate)} |")


if __name__ == "__main__":
    main()

"""Hostile frames against `rdmalog serve`: crashes, tracebacks, peak RSS and a well-behaved client's
ApiVersions latency under a long run of frames mutated from real clients' requests.

    python bench/fuzz.py [--frames 100000] [--connections 8] [--seed 1] [--corpus FILE]
                         [--save-corpus FILE] [--chunk 5000] [--override key=value ...]

The corpus is captured by running kafka-python and confluent-kafka against a broker through a tap
(tests/integration/fuzz_frames.py, the same code as the fuzz test in the suite), or read from
`--corpus` (a file of whole request frames, size prefixes included, as `--save-corpus` writes).
The frames are sent in chunks; after each chunk the harness checks the broker is alive (a dead one
is counted as a crash and started again). Meanwhile a watcher sends ApiVersions every 10 ms on its
own connection and times the answers, and RSS is sampled every 20 ms. At the end 200 records
produced before the flood must read back intact. Prints a JSON line and a markdown table.
Topic auto-creation is off (`auto.create.topics.enable=false`), as in the fuzz test.
`BENCH_KEEP=1` keeps the work directory (the broker's log and data).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat_tests.brokers import BrokerProcess  # noqa: E402
from rdmalog.store.records import Record, build_batch, decode_all  # noqa: E402
from tests.integration.fuzz_frames import (  # noqa: E402
    Flood,
    Mutator,
    Watcher,
    broker_tracebacks,
    capture_corpus,
)
from tests.integration.rawkafka import RawClient, produce  # noqa: E402


def read_corpus(path: Path) -> list[bytes]:
    data, frames, pos = path.read_bytes(), [], 0
    while pos + 4 <= len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        frames.append(data[pos : pos + 4 + size])
        pos += 4 + size
    return frames


class RssSampler(threading.Thread):
    def __init__(self, broker: BrokerProcess, interval_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.broker, self.interval_s = broker, interval_s
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                status = Path(f"/proc/{self.broker.proc.pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    self.peak = max(self.peak, int(line.split()[1]) * 1024)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _intact(bootstrap: str, values: list[bytes]) -> bool:
    body = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 24,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "intact", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 24,
        }]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    with RawClient(bootstrap) as c:
        records = c.call(1, 12, body)["responses"][0]["partitions"][0]["records"]
    return [r.value for r in decode_all(bytes(records))][: len(values)] == values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=5000)
    ap.add_argument("--corpus", type=Path)
    ap.add_argument("--save-corpus", type=Path)
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-fuzz-"))
    try:
        corpus = read_corpus(args.corpus) if args.corpus else capture_corpus(work)
        if args.save_corpus:
            args.save_corpus.write_bytes(b"".join(corpus))
        overrides = {"auto.create.topics.enable": "false"}
        overrides.update(kv.split("=", 1) for kv in args.override)
        broker = BrokerProcess(work / "data", overrides=overrides, log_dir=work)
        broker.start()
        values = [b"intact-%d" % i for i in range(200)]
        with RawClient(broker.bootstrap) as c:
            topic = {"topics": [{"name": "intact", "num_partitions": 1, "replication_factor": 1}]}
            c.call(19, 7, {**topic, "timeout_ms": 30000})
            produce(c, "intact", 0, bytes(build_batch([Record(None, v) for v in values])))
        mutator = Mutator(corpus, args.seed)
        address = (broker.host, broker.port)
        watcher, sampler = Watcher(address), RssSampler(broker)
        watcher.start()
        sampler.start()
        crashes, sent, closed, started = 0, 0, 0, time.monotonic()
        while sent < args.frames:
            n = min(args.chunk, args.frames - sent)
            stats = Flood(address, mutator, n, connections=args.connections).run()
            sent, closed = sent + stats.frames, closed + stats.closed_by_broker
            if not broker.running:
                crashes += 1
                print(f"crash after {sent} frames:\n{broker.stderr_tail(40)}", file=sys.stderr)
                broker.start()
        elapsed = time.monotonic() - started
        watcher.stop()
        sampler.stop()
        intact = _intact(broker.bootstrap, values)
        broker.stop()
        stderr = broker.stderr_path.read_text()
        lat = sorted(watcher.latencies) or [float("nan")]
        result = {
            "frames": sent,
            "connections": args.connections,
            "seed": args.seed,
            "corpus_frames": len(corpus),
            "corpus_apis": len(mutator.apis()),
            "seconds": round(elapsed, 1),
            "frames_per_s": round(sent / elapsed),
            "closed_by_broker": closed,
            "crashes": crashes,
            "tracebacks": len(broker_tracebacks(stderr)),
            "log_lines": stderr.count("\n"),
            "peak_rss_mib": round(sampler.peak / 2**20, 1),
            "apiversions": len(lat),
            "apiversions_failures": len(watcher.failures),
            "apiversions_p50_ms": round(statistics.median(lat) * 1000, 1),
            "apiversions_p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1),
            "apiversions_max_ms": round(lat[-1] * 1000, 1),
            "intact": intact,
        }
        print(json.dumps(result))
        print("| " + " | ".join(result) + " |")
        print("|" + " --- |" * len(result))
        print("| " + " | ".join(str(v) for v in result.values()) + " |")
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

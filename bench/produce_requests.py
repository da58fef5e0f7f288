"""Broker CPU per produce request, with the client taken out: fixed-size Produce requests built in
advance and sent pipelined over one connection, so every broker sees the same requests whatever its
speed (a real client's batches grow when the broker is slow, which moves CPU per record with the
machine's load). This is the cost that decides CPU per record at many partitions: librdkafka 2.16
sends one partition's batch per Produce request, so at 1000 partitions a request carries ~40
records where at one partition it carries thousands.

For each partition count, broker and repeat (brokers interleaved: A B A B), a fresh broker gets a
topic of that many partitions and `--requests` Produce v9 requests (acks=1), request i carrying
`--per-request` partitions (consecutive, round robin) of one batch of `--records` 100-byte records
with random 8-byte keys each. Prints broker CPU microseconds per request and CPU-s per million
records, median over repeats; with `--rounds N` the same requests go N times to the same topic,
each round metered on its own (round 1 is what a freshly created topic costs: its first appends).
`--callgrind` counts instructions instead (needs valgrind; see `callgrind_measure`): the broker's
event loop thread per request for a fresh topic's first append to every partition, the second,
and steady state; use `--requests 1000 --repeat 1` (valgrind runs the broker ~50x slower).

    RDMALOG_BASELINE_BIN=/path/to/other/.venv/bin/rdmalog \\
    python bench/produce_requests.py [--partitions 1,1000,3000] [--brokers baseline,rdmalog]
                                     [--requests 8000] [--records 37] [--per-request 1]
                                     [--repeat 3] [--rounds 1] [--callgrind]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brokers import Broker, port_open  # noqa: E402
from kafka_protocol import Meter, settle  # noqa: E402

from gateway.protocol import decode_response, encode_request  # noqa: E402
from rdmalog.store.records import Record, build_batch  # noqa: E402

PRODUCE, VERSION = 0, 9
WINDOW = 64  # requests in flight (librdkafka allows many more per connection)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """CreateTopics through the admin client, then wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(120)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and len(t.partitions) == partitions and t.error is None:
            return
        time.sleep(0.05)
    raise RuntimeError("partitions not all in metadata")


def frames(topic: str, partitions: int, requests: int, records: int, per_request: int) -> list:
    """The Produce request frames, built before the clock starts (64 distinct batches reused)."""
    rng = random.Random(1)
    now = int(time.time() * 1000)
    batches = [
        bytes(
            build_batch(
                [Record(rng.randbytes(8), b"v" * 100, timestamp=now) for _ in range(records)]
            )
        )
        for _ in range(64)
    ]
    out = []
    for i in range(requests):
        first = i * per_request
        data = [
            {"index": (first + j) % partitions, "records": batches[(first + j) % 64]}
            for j in range(per_request)
        ]
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout": 30000,
            "topic_data": [{"name": topic, "partition_data": data}],
        }
        out.append(encode_request(PRODUCE, VERSION, i, body, client_id="bench"))
    return out


def recv_frame(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise ConnectionError("broker closed the connection")
    n = struct.unpack(">i", head)[0]
    buf = sock.recv(n, socket.MSG_WAITALL)
    if len(buf) < n:
        raise ConnectionError("broker closed the connection")
    return buf


def send_all(port: int, reqs: list[bytes]) -> int:
    """Send the requests with WINDOW in flight; the number of partition answers with an error."""
    errors = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent = done = 0
        while done < len(reqs):
            while sent < len(reqs) and sent - done < WINDOW:
                sock.sendall(reqs[sent])
                sent += 1
            _, body = decode_response(PRODUCE, VERSION, recv_frame(sock))
            for t in body["responses"]:
                errors += sum(1 for p in t["partition_responses"] if p["error_code"])
            done += 1
    return errors


def measure(name: str, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh broker: create the topic, send the requests, broker CPU per request."""
    broker = Broker(name)
    topic = f"req-{partitions}"
    try:
        broker.start()
        create_topic(broker.bootstrap, topic, partitions)
        reqs = frames(topic, partitions, args.requests, args.records, args.per_request)
        records = args.requests * args.per_request * args.records
        rounds = []
        for _ in range(args.rounds):
            settle(broker.pid)
            with Meter(broker.pid) as m:
                errors = send_all(broker.port, reqs)
            res = m.result(records, records * 100)
            rounds.append(
                {
                    "errors": errors,
                    "us_per_request": round(res["broker_cpu_s"] / args.requests * 1e6, 1),
                    "cpu_s_per_M": res["broker_cpu_s_per_M"],
                    "records_per_s": res["records_per_s"],
                }
            )
        return {"broker": name, "partitions": partitions, **rounds[0], "rounds": rounds}
    finally:
        broker.stop()


def callgrind_measure(name: str, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    """Instructions the broker's event loop thread executes per request (callgrind, the maintenance
    and other threads left out; load-independent): for the first `partitions` requests to a fresh
    topic (every partition's first append, the broker's first Produce), the next `partitions`
    (second appends), then steady state as the difference of a run of `--requests` and one of
    3x as many (what the thread does meanwhile when idle is measured and taken off)."""
    from instructions import work

    if name not in ("rdmalog", "baseline"):
        raise ValueError("--callgrind measures rdmalog brokers (a Python process) only")
    broker = Broker(name)
    broker.workdir = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    out = str(broker.workdir / "broker.cg")
    bin_path = broker.command()[0]
    python = str(Path(bin_path).parent / "python")
    vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--separate-threads=yes"]
    log = open(broker.log_path, "wb")  # noqa: SIM115
    broker.proc = subprocess.Popen([*vg, python, *broker.command()], stdout=log, stderr=log)
    log.close()
    dumps = 0

    def dump() -> str:
        nonlocal dumps
        subprocess.run(
            ["callgrind_control", "-d", str(broker.pid)], check=True, capture_output=True
        )
        dumps += 1
        return f"{out}.{dumps}-01"  # thread 1: the event loop

    try:
        deadline = time.monotonic() + 300
        while not port_open(broker.port):
            if time.monotonic() > deadline or broker.proc.poll() is not None:
                raise RuntimeError(f"{name} under valgrind did not start: {broker.tail()}")
            time.sleep(1)
        create_topic(broker.bootstrap, "req", partitions)
        n = args.requests
        reqs = frames("req", partitions, 2 * partitions + 4 * n, args.records, args.per_request)
        settle(broker.pid, quiet=0.05, limit=120)
        dump()
        firsts = []
        for k in (0, 1):
            send_all(broker.port, reqs[k * partitions : (k + 1) * partitions])
            firsts.append(round(work(dump()) / partitions))
            settle(broker.pid, quiet=0.05, limit=120)
            dump()
        t0 = time.perf_counter()
        time.sleep(2)
        idle = work(dump()) / (time.perf_counter() - t0)
        at, windows = 2 * partitions, []
        for k in (n, 3 * n):
            t0 = time.perf_counter()
            send_all(broker.port, reqs[at : at + k])
            at += k
            windows.append(work(dump()) - idle * (time.perf_counter() - t0))
        return {
            "broker": name,
            "partitions": partitions,
            "first_append_instr": firsts[0],
            "second_append_instr": firsts[1],
            "steady_instr": round((windows[1] - windows[0]) / (2 * n)),
        }
    finally:
        broker.stop()


def uptime_now() -> str:
    """`uptime`: the load averages the numbers were measured under."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--partitions", default="1,1000,3000")
    ap.add_argument("--brokers", default="baseline,rdmalog")
    ap.add_argument("--requests", type=int, default=8000)
    ap.add_argument("--records", type=int, default=37, help="records per partition's batch")
    ap.add_argument("--per-request", type=int, default=1, help="partitions per request")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--rounds", type=int, default=1, help="rounds on the same topic (round 1 is its first)"
    )
    ap.add_argument(
        "--callgrind",
        action="store_true",
        help="broker instructions per request under callgrind instead of CPU time",
    )
    args = ap.parse_args()
    print(json.dumps({"argv": sys.argv[1:], "uptime": uptime_now()}), flush=True)
    if args.callgrind:
        for n in [int(x) for x in args.partitions.split(",")]:
            for _ in range(args.repeat):
                for b in [b.strip() for b in args.brokers.split(",") if b.strip()]:
                    print(json.dumps(callgrind_measure(b, n, args)), flush=True)
        return
    rows: dict[tuple[int, str], list[dict]] = {}
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for n in [int(x) for x in args.partitions.split(",")]:
        for _ in range(args.repeat):
            for b in brokers:
                row = measure(b, n, args)
                print(json.dumps(row), flush=True)
                rows.setdefault((n, b), []).append(row)
    print(json.dumps({"uptime_after": uptime_now()}), flush=True)
    print(
        "\n| partitions | broker | round | broker CPU µs per request (median [min–max]) | CPU-s/M |"
    )
    print("| --- | --- | --- | --- | --- |")
    for (n, b), rs in rows.items():
        for i in range(args.rounds):
            us = [r["rounds"][i]["us_per_request"] for r in rs]
            cpm = statistics.median(r["rounds"][i]["cpu_s_per_M"] for r in rs)
            med = round(statistics.median(us), 1)
            print(f"| {n} | {b} | {i + 1} | {med} [{min(us)}–{max(us)}] | {cpm} |")


if __name__ == "__main__":
    main()

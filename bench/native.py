"""Benchmark of the native RDMA datapaths (KafkaDirect section 5 metrics) on shm and tcp.

The broker (Store + RdmaService) runs in its own process; clients run here. Prints JSON lines
{"transport", "metric", "value", "unit"}:

  produce_latency_us_p50_exclusive / _shared   one 100-byte record, send -> commit ack
  consume_latency_us_p50                       poll() that finds and returns one new record
  empty_poll_us_p50, polls_per_s               poll() with nothing new (slot look only)
  store_cpu_s_100_pollers                      broker CPU seconds while 100 consumers poll for 2 s
  produce_gib_s, consume_gib_s                 pipelined 64 KiB batches; consumer fetch size 1 MiB

    python bench/native.py --quick            # under a minute
    python bench/native.py --transport shm
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rdmalog.records import build_batch

REC = b"x" * 100


def emit(transport: str, metric: str, value: float, unit: str, **extra) -> None:
    print(
        json.dumps(
            {
                "transport": transport,
                "metric": metric,
                "value": round(value, 3),
                "unit": unit,
                **extra,
            }
        ),
        flush=True,
    )


def serve(transport: str, data_dir: str) -> None:
    """Broker process: prints its control address, serves until stdin closes."""
    from rdmalog.config import BrokerConfig
    from rdmalog.rdma.service import RdmaService
    from rdmalog.store import Store

    st = Store(Path(data_dir), BrokerConfig.from_sources(None, {"log.dirs": data_dir}))
    st.open(start_maintenance=False)
    for name, seg in (("lat", 1 << 30), ("tput", 1 << 30), ("idle", 1 << 20)):
        st.create_topic(name, 1, {"segment.bytes": str(seg)})
    svc = RdmaService(st, transport).start()
    print(svc.control_address, flush=True)
    sys.stdin.read()
    svc.stop()
    st.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def bench_produce(addr: str, transport: str, mode: str, n: int) -> None:
    from rdmalog.rdma import Producer

    p = Producer(addr, transport, mode=mode)
    for _ in range(50):
        p.produce("lat", 0, REC)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce("lat", 0, REC)
        lat.append((time.perf_counter() - t0) * 1e6)
    emit(transport, f"produce_latency_us_p50_{mode}", p50(lat), "us", n=n)
    p.close()


def bench_consume(addr: str, transport: str, n: int) -> None:
    from rdmalog.rdma import Consumer, Producer

    p = Producer(addr, transport)
    c = Consumer(addr, transport)
    plog_end = p.produce("lat", 0, REC)[1] + 1
    c.assign([("lat", 0)], offset=plog_end - 1)
    while not c.poll(0.1):
        pass
    lat = []
    for _ in range(n):
        p.produce("lat", 0, REC)  # committed before the clock starts
        t0 = time.perf_counter()
        got = c.poll(1.0)
        lat.append((time.perf_counter() - t0) * 1e6)
        assert len(got) == 1
    emit(transport, "consume_latency_us_p50", p50(lat), "us", n=n)
    groups = []
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(200):
            c.poll(0)
        groups.append((time.perf_counter() - t0) / 200 * 1e6)
    emit(transport, "empty_poll_us_p50", p50(groups), "us", n=50 * 200)
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < 1.0:
        for _ in range(100):
            c.poll(0)
        k += 100
    emit(transport, "polls_per_s", k / (time.perf_counter() - t0), "1/s")
    c.close()
    p.close()


def _pollers(addr: str, transport: str, count: int, seconds: float, ready, go, q) -> None:
    from rdmalog.rdma import Consumer

    cs = [Consumer(addr, transport) for _ in range(count)]
    for c in cs:
        c.assign([("idle", 0)])
    ready.release()
    go.wait()
    end, polls = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for c in cs:
            c.poll(0)
        polls += count
    q.put(polls)
    for c in cs:
        c.close()


def bench_pollers(
    addr: str, transport: str, pid: int, procs: int = 4, total: int = 100, seconds: float = 2.0
) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, go, q = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    ps = [
        ctx.Process(target=_pollers, args=(addr, transport, total // procs, seconds, ready, go, q))
        for _ in range(procs)
    ]
    for pr in ps:
        pr.start()
    for _ in ps:
        ready.acquire(timeout=120)
    cpu0 = cpu_seconds(pid)
    go.set()
    polls = sum(q.get(timeout=120) for _ in ps)
    cpu1 = cpu_seconds(pid)
    for pr in ps:
        pr.join(30)
    emit(transport, "store_cpu_s_100_pollers", cpu1 - cpu0, "s", seconds=seconds, polls=polls)


def bench_throughput(addr: str, transport: str, total_bytes: int) -> None:
    from rdmalog.rdma import Consumer, Producer

    p = Producer(addr, transport, staging_bytes=64 << 20)
    batch = build_batch([(None, os.urandom(1024)) for _ in range(63)])  # ~65 KiB
    start = p.produce("tput", 0, b"start")[1] + 1
    k = max(1, total_bytes // len(batch))
    t0 = time.perf_counter()
    for _ in range(k):
        p.send_batch("tput", 0, batch)
    p.flush(120)
    dt = time.perf_counter() - t0
    emit(transport, "produce_gib_s", k * len(batch) / dt / 2**30, "GiB/s", batch_bytes=len(batch))
    c = Consumer(addr, transport, fetch_size=1 << 20)
    c.assign([("tput", 0)], offset=start)
    n, want = 0, k * 63
    t0 = time.perf_counter()
    while n < want:
        n += len(c.poll(1.0, max_records=100_000))
    dt = time.perf_counter() - t0
    emit(transport, "consume_gib_s", k * len(batch) / dt / 2**30, "GiB/s", fetch_size=1 << 20)
    c.close()
    p.close()


def run(transport: str, quick: bool, data_root: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="rdmalog-bench-", dir=data_root) as d:
        broker = subprocess.Popen(
            [sys.executable, __file__, "--serve", transport, d],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            addr = broker.stdout.readline().strip()
            n = 1000 if quick else 10000
            bench_produce(addr, transport, "exclusive", n)
            bench_produce(addr, transport, "shared", n)
            bench_consume(addr, transport, n)
            bench_pollers(addr, transport, broker.pid, seconds=2.0 if quick else 5.0)
            bench_throughput(addr, transport, (64 << 20) if quick else (1 << 30))
        finally:
            broker.stdin.close()
            broker.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sample sizes (under a minute)")
    ap.add_argument("--transport", choices=["shm", "tcp"], action="append")
    ap.add_argument("--data-root", help="where the broker's data dir goes (default: $TMPDIR)")
    ap.add_argument("--serve", nargs=2, metavar=("TRANSPORT", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    for t in args.transport or ["shm", "tcp"]:
        run(t, args.quick, args.data_root)


if __name__ == "__main__":
    main()

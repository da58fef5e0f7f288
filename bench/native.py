"""Benchmark of the native RDMA datapaths (KafkaDirect section 5 metrics) against the Kafka path.

Each transport gets a real `rdmalog serve --override rdma.transport=<t>` process (gateway, group
coordinator and RDMA service in one broker, as deployed); native clients run here. The same
metrics are taken through the gateway's Kafka path with confluent-kafka (transport "kafka") on the
first broker, and the host's large-copy bandwidth (transport "host") is the yardstick bandwidths
are stated against ("of_copy"). Prints one JSON object per line {"transport", "metric", "value",
"unit", ...}:

  produce_latency_us_p50 / _p99   one 100-byte record, send -> commit ack ("mode": exclusive|shared)
  consume_latency_us_p50 / _p99   poll() returning one preloaded (committed) 1 KiB record, and
                                  reading its value
  empty_poll_us_p50, polls_per_s  poll() with nothing new (a slot look; Kafka: the client's queue)
  store_cpu_s_100_pollers         broker CPU seconds while 100 consumers poll an idle partition
  store_cpu_s_idle                the same broker's CPU over the same time with no pollers
  produce_grant_ms                the first produce to a fresh 1 GiB head file: access, registration
                                  (topics have `preallocate=true`, as KafkaDirect ran: the grant
                                  makes the head's first 8 MiB resident) and one record
  head_resident_ms                from that produce until the broker is idle again: the rest of the
                                  head made resident in the background (within ~200 ms); every
                                  measurement waits for that, but produce_gib_s_across_rolls
  produce_gib_s, consume_gib_s    64 KiB batches of 1 KiB records (consume: decoded records),
                                  256 MiB with --quick (1 GiB: a whole segment) on the native
                                  transports; native consumer fetch size 256 KiB, Kafka's 1 MiB.
                                  Native produce sends batches the application built in memory
                                  it registered (`Producer.register`: 128 distinct batches, sent
                                  in turn, as ib_write_bw does), the only kind an RNIC can write
  produce_gib_s_staged            the same through send_batch(bytes): each batch is first copied
                                  into the producer's registered staging area
  produce_gib_s_idempotent        the same bytes (a quarter as many) from an idempotent producer:
                                  stamped (CRC again), at most 5 in flight, committed one by one;
                                  produce_latency "mode": "idempotent" likewise
  consume_gib_s_values            consume_gib_s with every record's value read (lazy records,
                                  on shm, make it then: consume_gib_s does not pay for it)
  consume_batches_gib_s           the same batches through poll_batches() (undecoded, one copy)
  produce_gib_s_across_rolls      the same batches over 3 (quick) or 8 whole 128 MiB segments: the
                                  producer asks for each next head file as one fills (new memory
                                  is made resident meanwhile: bounded by fresh_file_write_gib_s)
  commit_us_p50 / _p99            a native consumer's offset commit: commit_async() (one
                                  FETCH_AND_ADD on its commit slot, "mode": "slot") and commit()
                                  (OffsetCommit through the gateway, "mode": "coordinator")
  copy_gib_s                      a 64 MiB memoryview copy in this process (transport "host")
  fresh_file_write_gib_s          64 MiB written through a new sparse file's shared mapping: the
                                  page allocation every first write into a segment pays ("host")
  resident_file_write_gib_s       the same into a preallocated file another mapping made resident,
                                  as a grant makes a head: what a same-host WRITE's copy alone runs
                                  at (each clean page's first write faults to make it dirty) ("host")
  resident_file_write_gib_s_large_folios   information: the same with the owner's mapping asking
                                  for large folios first (MADV_HUGEPAGE), as a grant does; the
                                  writer then faults once per folio, not per page ("host")
  loadavg_1m                      the host's load at the start and the end (latencies on a shared
                                  2-core host depend on it: client and broker both busy-poll)

    python bench/native.py --quick            # under a minute
    python bench/native.py --transport shm --no-kafka
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from brokers import free_ports, port_open

from rdmalog.store.records import build_batch

REC = b"x" * 100  # produce latency record
REC_1K = b"c" * 1024  # consume latency record
TOPICS = {
    "lat": 1 << 30,
    "tput": 1 << 30,
    "staged": 1 << 30,
    "idem": 256 << 20,
    "idle": 1 << 20,
    "klat": 1 << 30,
    "ktput": 1 << 30,
}
ROLL_SEGMENT = 128 << 20  # topic "roll": sustained produce across segment rolls
COPY_GIB_S: list[float] = []
FETCH = 256 << 10  # the native consumer's fetch size for bandwidth


def emit(transport: str, metric: str, value: float, unit: str, **extra) -> None:
    rec = {"transport": transport, "metric": metric, "value": round(value, 3), "unit": unit}
    print(json.dumps({**rec, **extra}), flush=True)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def emit_latency(transport: str, name: str, xs: list[float], **extra) -> None:
    emit(transport, f"{name}_us_p50", pct(xs, 50), "us", n=len(xs), **extra)
    emit(transport, f"{name}_us_p99", pct(xs, 99), "us", n=len(xs), **extra)


def emit_bandwidth(transport: str, metric: str, gib_s: float, **extra) -> None:
    if COPY_GIB_S:
        extra["of_copy"] = round(gib_s / COPY_GIB_S[0], 3)
    emit(transport, metric, gib_s, "GiB/s", **extra)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, limit: float = 60.0, cpu_s: float = 0.01) -> float:
    """Wait until the broker is idle (under `cpu_s` of CPU in 0.2 s: a grant's head file is made
    resident in the background); returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        c0 = cpu_seconds(pid)
        time.sleep(0.2)
        if cpu_seconds(pid) - c0 < cpu_s:
            break
    return time.perf_counter() - t0


# -- the broker ------------------------------------------------------------------------------------
class Broker:
    """`rdmalog serve` with the RDMA service on `transport`, and the benchmark's topics."""

    def __init__(
        self, transport: str, data_dir: str, prefix: tuple[str, ...] = (), start_s: float = 30.0
    ):
        """`prefix`: a command the broker runs under (bench/instructions.py: valgrind), given
        `start_s` seconds to listen."""
        self.port, self.control_port = free_ports(2)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.control = f"127.0.0.1:{self.control_port}"
        script = Path(sys.executable).parent / "rdmalog"
        cmd = [*prefix, sys.executable] + ([str(script)] if script.exists() else ["-m", "gateway"])
        cmd += ["serve", "--listen", self.bootstrap, "--data-dir", data_dir]
        cmd += ["--override", f"rdma.transport={transport}"]
        cmd += ["--override", f"rdma.control.port={self.control_port}"]
        self.log = open(Path(data_dir).parent / f"broker-{transport}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rdmalog serve exited with {self.proc.returncode}")
            if port_open(self.port) and port_open(self.control_port):
                break
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError(f"rdmalog serve did not start in {start_s:.0f} s")
        self._create_topics()

    def _create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        # KafkaDirect's setup: 1 GiB files with preallocation (RDMA grants make the head resident)
        new = [
            NewTopic(t, 1, 1, config={"segment.bytes": str(b), "preallocate": "true"})
            for t, b in {**TOPICS, "roll": ROLL_SEGMENT}.items()
        ]
        for f in admin.create_topics(new).values():
            f.result(30)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        self.log.close()


# -- host yardstick ------------------------------------------------------------------------------------
def bench_copy(size: int = 64 << 20, rounds: int = 20) -> None:
    src, dst = bytearray(os.urandom(1 << 20) * (size >> 20)), bytearray(size)
    s, d = memoryview(src), memoryview(dst)
    d[:] = s  # fault the pages in
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        d[:] = s
        best = min(best, time.perf_counter() - t0)
    COPY_GIB_S.append(size / best / 2**30)
    emit("host", "copy_gib_s", COPY_GIB_S[0], "GiB/s", bytes=size, rounds=rounds, best_of=rounds)


def file_write_gib_s(d: str, size: int, resident: bool, large: bool = False) -> float:
    """64 KiB writes through a new file's shared mapping in directory d: into a sparse file, or
    (`resident`) into a preallocated one another mapping made resident first (`large`: asking
    for large folios first, as a grant does)."""
    import mmap

    from rdmalog.rdma.broker.prefault import (
        MADV_HUGEPAGE,
        MADV_POPULATE_READ,
        _madvise,
        address_of,
    )

    chunk = os.urandom(64 << 10)
    with tempfile.TemporaryDirectory(prefix="rdmalog-bench-", dir=d) as sub:
        with open(os.path.join(sub, "f"), "w+b") as f:
            owner = None
            if resident:
                os.posix_fallocate(f.fileno(), 0, size)
                owner = mmap.mmap(f.fileno(), size)  # the broker's mapping
                if large:
                    _madvise(address_of(owner), size, MADV_HUGEPAGE)
                _madvise(address_of(owner), size, MADV_POPULATE_READ)
            else:
                f.truncate(size)
            m = mmap.mmap(f.fileno(), size)  # the writer's own mapping
            t0 = time.perf_counter()
            for i in range(0, size, len(chunk)):
                m[i : i + len(chunk)] = chunk
            dt = time.perf_counter() - t0
            m.close()
            if owner is not None:
                owner.close()
    return size / dt / 2**30


def bench_file_writes(data_root: str | None, size: int = 64 << 20) -> None:
    """64 KiB writes through a file's shared mapping, as a native producer's WRITE makes them:
    into a fresh sparse file (the page allocation every first write into a segment pays), and
    into a preallocated file another mapping made resident first, as a grant makes a head
    (what each WRITE into a granted head costs the writer on this host before any protocol
    work: the copy plus the first-write fault that makes each clean page dirty); and, for
    information, the latter with large folios, as a grant asks for them."""
    for metric, resident, large in (
        ("fresh_file_write_gib_s", False, False),
        ("resident_file_write_gib_s", True, False),
        ("resident_file_write_gib_s_large_folios", True, True),
    ):
        gib_s = file_write_gib_s(data_root, size, resident, large)
        extra = {"of_copy": round(gib_s / COPY_GIB_S[0], 3)} if COPY_GIB_S else {}
        emit("host", metric, gib_s, "GiB/s", bytes=size, chunk=64 << 10, **extra)


# -- native datapaths ------------------------------------------------------------------------------------
def bench_produce(b: Broker, transport: str, mode: str, n: int) -> None:
    from rdmalog.rdma import Producer

    idem = mode == "idempotent"  # exclusive, with producer id and sequences
    p = Producer(b.control, transport, mode="exclusive" if idem else mode, idempotent=idem)
    for _ in range(50):
        p.produce("lat", 0, REC)
    settle(b.pid)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce("lat", 0, REC)
        lat.append((time.perf_counter() - t0) * 1e6)
    emit_latency(transport, "produce_latency", lat, mode=mode)
    p.close()


def bench_consume(b: Broker, transport: str, n: int) -> None:
    from rdmalog.rdma import Consumer, Producer

    p = Producer(b.control, transport)
    c = Consumer(b.control, transport)
    end = p.produce("lat", 0, REC_1K)[1] + 1
    c.assign([("lat", 0)], offset=end - 1)
    for _ in range(100):
        if c.poll(0.1):
            break
    settle(b.pid)  # as every measurement: the broker is not still making the head resident
    lat = []
    for _ in range(n):
        p.produce("lat", 0, REC_1K)  # committed (and so preloaded) before the clock starts
        t0 = time.perf_counter()
        got = c.poll(1.0)
        value = got[0].value  # timed: a lazy record (shm) makes its value when first read
        lat.append((time.perf_counter() - t0) * 1e6)
        assert len(got) == 1 and len(value) == 1024
    emit_latency(transport, "consume_latency", lat, record_bytes=1024)
    empty_polls(transport, lambda: c.poll(0))
    c.close()
    p.close()


def bench_commit(b: Broker, transport: str, n: int) -> None:
    from rdmalog.rdma import Consumer

    c = Consumer(b.control, transport, group_id=f"bench-{transport}", bootstrap=b.bootstrap)
    for mode, commit, k in (("slot", c.commit_async, n), ("coordinator", c.commit, n // 10)):
        commit({("lat", 0): 0})  # the first asks for the slot / connects the coordinator client
        lat = []
        for i in range(1, k + 1):
            t0 = time.perf_counter()
            commit({("lat", 0): i})
            lat.append((time.perf_counter() - t0) * 1e6)
        emit_latency(transport, "commit", lat, mode=mode)
    c.close()


def empty_polls(transport: str, poll, **extra) -> None:
    groups = []
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(200):
            poll()
        groups.append((time.perf_counter() - t0) / 200 * 1e6)
    emit(transport, "empty_poll_us_p50", pct(groups, 50), "us", n=50 * 200, **extra)
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < 1.0:
        for _ in range(100):
            poll()
        k += 100
    emit(transport, "polls_per_s", k / (time.perf_counter() - t0), "1/s", **extra)


def _pollers(addr: str, transport: str, count: int, seconds: float, ready, go, q) -> None:
    if transport == "kafka":
        from confluent_kafka import Consumer as KafkaConsumer
        from confluent_kafka import TopicPartition

        cs = []
        for i in range(count):
            kc = KafkaConsumer({"bootstrap.servers": addr, "group.id": f"idle-{os.getpid()}-{i}"})
            kc.assign([TopicPartition("idle", 0, 0)])
            cs.append(kc)
    else:
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
    addr: str, transport: str, pid: int, seconds: float, procs: int = 4, total: int = 100
) -> None:
    cpu0 = cpu_seconds(pid)
    time.sleep(seconds)
    emit(transport, "store_cpu_s_idle", cpu_seconds(pid) - cpu0, "s", seconds=seconds)
    ctx = multiprocessing.get_context("spawn")
    ready, go, q = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    args = (addr, transport, total // procs, seconds, ready, go, q)
    ps = [ctx.Process(target=_pollers, args=args) for _ in range(procs)]
    for pr in ps:
        pr.start()
    for _ in ps:
        ready.acquire(timeout=120)
    time.sleep(0.5)  # let connection set-up work on the broker finish
    cpu0 = cpu_seconds(pid)
    go.set()
    polls = sum(q.get(timeout=120) for _ in ps)
    cpu1 = cpu_seconds(pid)
    for pr in ps:
        pr.join(60)
    emit(transport, "store_cpu_s_100_pollers", cpu1 - cpu0, "s", seconds=seconds, polls=polls)


def tput_batch() -> bytes:
    return build_batch([(None, os.urandom(1024)) for _ in range(63)])  # ~64 KiB


def registered_batches(p, count: int = 128) -> list:
    """`count` distinct ~64 KiB batches built in one buffer registered with producer p."""
    batches = [tput_batch() for _ in range(count)]
    size = len(batches[0])
    buf = p.register(bytearray(size * count))
    for i, b in enumerate(batches):
        buf.view[i * size : (i + 1) * size] = b
    return [buf[i * size : (i + 1) * size] for i in range(count)]


def bench_rolls(b: Broker, transport: str, segments: int) -> None:
    """Produce bandwidth over `segments` whole segments of ROLL_SEGMENT bytes: every roll asks
    for the next head file (prepared in the background with `preallocate`), so this includes
    making new memory resident, which the other bandwidths do not."""
    from rdmalog.rdma import Producer

    p = Producer(b.control, transport)
    batches = registered_batches(p)
    size = batches[0].length
    p.produce("roll", 0, b"start")
    settle(b.pid)
    k = segments * ROLL_SEGMENT // size
    t0 = time.perf_counter()
    for i in range(k):
        p.send_batch("roll", 0, batches[i % len(batches)])
    p.flush(120)
    dt = time.perf_counter() - t0
    emit_bandwidth(
        transport, "produce_gib_s_across_rolls", k * size / dt / 2**30,
        batch_bytes=size, segment_bytes=ROLL_SEGMENT, segments=segments,
    )  # fmt: skip
    p.close()


def bench_throughput(b: Broker, transport: str, total_bytes: int) -> None:
    from rdmalog.rdma import Consumer, Producer

    addr = b.control
    p = Producer(addr, transport)
    batch = tput_batch()
    t0 = time.perf_counter()
    start = p.produce("tput", 0, b"start")[1] + 1  # the grant: registers the 1 GiB head file
    emit(
        transport, "produce_grant_ms", (time.perf_counter() - t0) * 1000, "ms", bytes=TOPICS["tput"]
    )
    settle(b.pid)  # the rest of the head is made resident in the background
    emit(transport, "head_resident_ms", (time.perf_counter() - t0) * 1000, "ms",
         bytes=TOPICS["tput"], approx_ms=200)  # fmt: skip
    p.produce("staged", 0, b"start")
    k = max(1, total_bytes // len(batch))
    for topic, batches in (("tput", registered_batches(p)), ("staged", [batch])):
        settle(b.pid)  # e.g. a quarter into a head its successor is made resident: not measured
        t0 = time.perf_counter()
        for i in range(k):
            p.send_batch(topic, 0, batches[i % len(batches)])
        p.flush(120)
        dt = time.perf_counter() - t0
        metric = "produce_gib_s" if topic == "tput" else "produce_gib_s_staged"
        emit_bandwidth(transport, metric, k * len(batch) / dt / 2**30, batch_bytes=len(batch))
    ip = Producer(addr, transport, idempotent=True)  # 5 in flight, stamped, one-by-one commits
    ip.produce("idem", 0, b"start")
    ki = max(1, k // 4)
    settle(b.pid)
    t0 = time.perf_counter()
    for _ in range(ki):
        ip.send_batch("idem", 0, batch)
    ip.flush(120)
    gib_s = ki * len(batch) / (time.perf_counter() - t0) / 2**30
    emit_bandwidth(transport, "produce_gib_s_idempotent", gib_s, batch_bytes=len(batch))
    ip.close()
    c = Consumer(addr, transport, fetch_size=FETCH)
    c.assign([("tput", 0)], offset=start)
    settle(b.pid)
    n, want = 0, k * 63
    t0 = time.perf_counter()
    for _ in range(100_000):
        if n >= want:
            break
        n += len(c.poll(1.0, max_records=100_000))
    dt = time.perf_counter() - t0
    emit_bandwidth(transport, "consume_gib_s", k * len(batch) / dt / 2**30, fetch_size=FETCH)
    c.seek("tput", 0, start)  # again, every record's value read (a lazy record makes it then)
    n = 0
    t0 = time.perf_counter()
    for _ in range(100_000):
        if n >= want:
            break
        got = c.poll(1.0, max_records=100_000)
        n += len(got)
        for r in got:
            r.value  # noqa: B018
    dt = time.perf_counter() - t0
    gib_s = k * len(batch) / dt / 2**30
    emit_bandwidth(transport, "consume_gib_s_values", gib_s, fetch_size=FETCH, values="read")
    c.seek("tput", 0, start)
    n = 0
    t0 = time.perf_counter()
    for _ in range(100_000):
        if n >= k:
            break
        n += len(c.poll_batches(1.0, max_batches=100_000))
    dt = time.perf_counter() - t0
    gib_s = k * len(batch) / dt / 2**30
    emit_bandwidth(transport, "consume_batches_gib_s", gib_s, fetch_size=FETCH, api="poll_batches")
    c.close()
    p.close()


# -- the gateway's Kafka path (confluent-kafka) ---------------------------------------------------------------
def bench_kafka(b: Broker, n: int, total_bytes: int, seconds: float) -> None:
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition

    t = "kafka"
    p = KafkaProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all"})
    for _ in range(50):
        p.produce("klat", REC, partition=0)
        p.flush(10)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce("klat", REC, partition=0)
        p.flush(10)
        lat.append((time.perf_counter() - t0) * 1e6)
    emit_latency(t, "produce_latency", lat, mode="confluent-kafka acks=all linger.ms=0")

    conf = {"bootstrap.servers": b.bootstrap, "group.id": "bench", "fetch.wait.max.ms": 500}
    c = KafkaConsumer(conf)
    c.assign([TopicPartition("klat", 0, 50 + n)])
    lat = []
    for _ in range(max(50, n // 5)):
        p.produce("klat", REC_1K, partition=0)
        p.flush(10)
        t0 = time.perf_counter()
        msg = None
        for _ in range(100):
            msg = c.poll(1.0)
            if msg is not None and not msg.error():
                break
        lat.append((time.perf_counter() - t0) * 1e6)
        assert msg is not None and len(msg.value()) == 1024
    emit_latency(t, "consume_latency", lat, record_bytes=1024, note="a fetch round trip per record")
    empty_polls(t, lambda: c.poll(0), note="librdkafka's local queue; fetches run in its threads")
    c.close()

    bench_pollers(b.bootstrap, t, b.pid, seconds)

    tp = KafkaProducer(
        {
            "bootstrap.servers": b.bootstrap,
            "linger.ms": 5,
            "batch.size": 64 * 1024,
            "acks": "all",
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    rec = os.urandom(1024)
    tp.produce("ktput", rec, partition=0)  # connection and metadata are not timed
    tp.flush(30)
    k = max(1, total_bytes // 1024)
    t0 = time.perf_counter()
    for _ in range(k):
        while True:
            try:
                tp.produce("ktput", rec, partition=0)
                break
            except BufferError:
                tp.poll(0.01)
    tp.flush(120)
    dt = time.perf_counter() - t0
    emit_bandwidth(t, "produce_gib_s", k * 1024 / dt / 2**30, batch_bytes=64 * 1024)
    big = {"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 1 << 20}
    # librdkafka backs off fetch.queue.backoff.ms (default 1 s) whenever its prefetch queue is full
    c = KafkaConsumer({**conf, **big, "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition("ktput", 0, 1)])
    first = 0
    for _ in range(300):  # connection set-up is not timed (as for the native consumer's assign)
        first = sum(1 for m in c.consume(10_000, 0.1) if not m.error())
        if first:
            break
    got = 0
    t0 = time.perf_counter()
    for _ in range(100_000):
        if first + got >= k:
            break
        want = min(10_000, k - first - got)  # consume() waits for `want` or the timeout
        got += sum(1 for m in c.consume(want, 1.0) if not m.error())
    dt = time.perf_counter() - t0
    emit_bandwidth(
        t, "consume_gib_s", got * 1024 / dt / 2**30, fetch_size=1 << 20, fetch_queue_backoff_ms=10
    )
    c.close()


def run(transport: str, quick: bool, data_root: str | None, kafka: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="rdmalog-bench-", dir=data_root) as d:
        b = Broker(transport, os.path.join(d, "data"))
        try:
            n = 1000 if quick else 10000
            seconds = 2.0 if quick else 5.0
            bench_produce(b, transport, "exclusive", n)
            bench_produce(b, transport, "shared", n)
            bench_produce(b, transport, "idempotent", n)
            bench_consume(b, transport, n)
            bench_commit(b, transport, n)
            bench_pollers(b.control, transport, b.pid, seconds)
            bench_throughput(b, transport, (256 << 20) if quick else (1 << 30))
            bench_rolls(b, transport, 3 if quick else 8)
            if kafka:
                bench_kafka(b, n, (64 << 20) if quick else (512 << 20), seconds)
        finally:
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sample sizes (under a minute)")
    ap.add_argument("--transport", choices=["shm", "tcp"], action="append")
    ap.add_argument("--no-kafka", action="store_true", help="skip the Kafka-path comparison")
    ap.add_argument("--data-root", help="where the broker's data dir goes (default: $TMPDIR)")
    args = ap.parse_args()
    emit("host", "loadavg_1m", os.getloadavg()[0], "", at="start", cpus=os.cpu_count())
    bench_copy()
    bench_file_writes(args.data_root)
    for i, t in enumerate(args.transport or ["shm", "tcp"]):
        run(t, args.quick, args.data_root, kafka=i == 0 and not args.no_kafka)
    emit("host", "loadavg_1m", os.getloadavg()[0], "", at="end", cpus=os.cpu_count())


if __name__ == "__main__":
    main()

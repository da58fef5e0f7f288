"""Kafka-protocol benchmark: rdmalog vs Tansu, same clients, same machine, same run.

Method of seed 004 (100-byte records, one producer, one consumer, client defaults), scaled to one host:

1. produce throughput (confluent-kafka acks=1 and acks=all, kafka-python defaults) with broker CPU
2. consume throughput from offset 0 (confluent-kafka, kafka-python; assign(), no group commits)
3. end-to-end latency at 1000 records/s (confluent-kafka producer and consumer)
4. produce latency of one record at a time (acks=1, linger.ms=0)

Each step runs in its own client process with a record bound and a time bound, so a hung broker costs
one step, not the run; runs alternate between brokers so both see the same machine load. Usage:

    python bench/kafka_protocol.py [--quick] [--brokers rdmalog,tansu] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Broker, proc_cpu_seconds, proc_rss_mb  # noqa: E402
from docs_section import replace_section  # noqa: E402

RECORD_SIZE = 100
MB = 1 << 20  # seed 004 reports MB/s as value bytes / 2^20
SECTION = "## Kafka protocol: rdmalog vs Tansu"
REPO = Path(__file__).resolve().parent.parent

FULL = {
    "produce_records": 1_000_000,
    "kpy_produce_records": 200_000,
    "consume_records": 1_000_000,
    "kpy_consume_records": 300_000,
    "e2e_records": 5000,
    "e2e_rate": 1000,
    "latency_records": 5000,
    "step_time_limit": 60.0,
}
QUICK = {
    "produce_records": 200_000,
    "kpy_produce_records": 30_000,
    "consume_records": 200_000,
    "kpy_consume_records": 50_000,
    "e2e_records": 1000,
    "e2e_rate": 1000,
    "latency_records": 1000,
    "step_time_limit": 30.0,
}


# --------------------------------------------------------------------------------------------------
# helpers used inside step processes


def client_cpu() -> float:
    """CPU seconds of this client process, all threads (librdkafka's included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile q (0..100) of values."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def payload(seed: int = 7) -> bytes:
    """A fixed, incompressible-looking 100-byte value."""
    import random

    return random.Random(seed).randbytes(RECORD_SIZE)


class Meter:
    """Wall time, broker CPU and client CPU over a timed region."""

    def __init__(self, broker_pid: int) -> None:
        self.pid = broker_pid

    def __enter__(self) -> Meter:
        self.cpu0 = proc_cpu_seconds(self.pid)
        self.ccpu0 = client_cpu()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.t1 = time.perf_counter()
        self.cpu1 = proc_cpu_seconds(self.pid)
        self.ccpu1 = client_cpu()

    def result(self, records: int, nbytes: int) -> dict[str, Any]:
        secs = self.t1 - self.t0
        bcpu = self.cpu1 - self.cpu0
        ccpu = self.ccpu1 - self.ccpu0
        return {
            "records": records,
            "seconds": round(secs, 4),
            "records_per_s": round(records / secs) if secs > 0 else 0,
            "mb_per_s": round(nbytes / MB / secs, 2) if secs > 0 else 0,
            "broker_cpu_s": round(bcpu, 3),
            "broker_cpu_s_per_M": round(bcpu / records * 1e6, 2) if records else None,
            "client_cpu_s_per_M": round(ccpu / records * 1e6, 2) if records else None,
            "broker_rss_mb": round(proc_rss_mb(self.pid), 1),
        }


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermark of every partition of topic."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-wm"})
    try:
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        return {p: c.get_watermark_offsets(_tp(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def _tp(topic: str, partition: int, offset: int | None = None):
    from confluent_kafka import TopicPartition

    return (
        TopicPartition(topic, partition)
        if offset is None
        else TopicPartition(topic, partition, offset)
    )


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _errors() -> tuple[list[str], Any]:
    errs: list[str] = []

    def cb(err: Any) -> None:
        if len(errs) < 20:
            errs.append(str(err))

    return errs, cb


# --------------------------------------------------------------------------------------------------
# steps (each runs in its own process; returns a dict)


def step_produce_confluent(p: dict[str, Any]) -> dict[str, Any]:
    """Produce N 100-byte records as fast as librdkafka takes them (defaults but acks)."""
    from confluent_kafka import Producer

    errs, error_cb = _errors()
    bootstrap, topic, n, limit = p["bootstrap"], p["topic"], p["records"], p["time_limit"]
    failed: list[str] = []

    def on_failure(err: Any, msg: Any) -> None:
        if len(failed) < 20:
            failed.append(str(err))

    # delivery.report.only.error: a callback for failed records only, so the client's hot path
    # stays as with defaults
    prod = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": p["acks"],
            "error_cb": error_cb,
            "on_delivery": on_failure,
            "delivery.report.only.error": True,
            **p.get("producer", {}),
        }
    )
    value = payload()
    for _ in range(1000):  # warm-up: connections, metadata, first batches
        prod.produce(topic, value)
    prod.flush(10)
    before = sum(high_watermarks(bootstrap, topic).values())
    sent = 0
    produce, poll = prod.produce, prod.poll
    with Meter(p["broker_pid"]) as m:
        deadline = time.perf_counter() + limit
        while sent < n:
            try:
                produce(topic, value)
                sent += 1
            except BufferError:
                poll(0.005)
                if time.perf_counter() > deadline:
                    break
        left = prod.flush(max(1.0, deadline - time.perf_counter() + 5))
    after = sum(high_watermarks(bootstrap, topic).values())
    res = m.result(sent, sent * RECORD_SIZE)
    # Tansu's ListOffsets(latest) answers the last batch's base offset + 1, so the watermark delta
    # is informative only; the consume steps check the count by reading everything back.
    res.update(hw_delta=after - before, undelivered=left, in_topic=1000 + sent, errors=errs)
    res["failed"] = failed
    if left or errs or failed:
        res["error"] = f"{left} undelivered, {len(failed)} failed: {(failed + errs)[:2]}"
    elif p.get("broker") != "tansu" and after - before != sent:
        res["error"] = f"high watermark moved by {after - before}, {sent} sent"
    return res


def step_produce_kafka_python(p: dict[str, Any]) -> dict[str, Any]:
    """Produce N 100-byte records with kafka-python's defaults (acks=all in 3.x)."""
    from kafka import KafkaProducer

    bootstrap, topic, n, limit = p["bootstrap"], p["topic"], p["records"], p["time_limit"]
    value = payload()
    note = ""
    for conf in ({}, {"enable_idempotence": False}):
        prod = KafkaProducer(bootstrap_servers=bootstrap, **conf)
        warm = [prod.send(topic, value) for _ in range(1000)]
        prod.flush(10)
        try:
            warm[-1].get(10)
            break
        except Exception as e:  # noqa: BLE001
            prod.close(1)
            if conf:
                return {"records": 0, "error": f"warm-up failed: {e!r}"}
            # kafka-python 3.x is idempotent by default; a broker without InitProducerId gets
            # the same run without idempotence, marked in the report
            note = f"defaults failed ({type(e).__name__}: {e}); ran with enable_idempotence=False"
    before = sum(high_watermarks(bootstrap, topic).values())
    sent = 0
    send = prod.send
    failed: list[str] = []

    def on_failure(exc: Exception) -> None:
        if len(failed) < 20:
            failed.append(repr(exc))

    with Meter(p["broker_pid"]) as m:
        deadline = time.perf_counter() + limit
        while sent < n:
            send(topic, value).add_errback(on_failure)
            sent += 1
            if sent % 5000 == 0 and time.perf_counter() > deadline:
                break
        prod.flush(max(1.0, deadline - time.perf_counter() + 5))
    prod.close(5)
    after = sum(high_watermarks(bootstrap, topic).values())
    res = m.result(sent, sent * RECORD_SIZE)
    res.update(hw_delta=after - before, in_topic=1000 + sent, acks=str(prod.config["acks"]))
    res["idempotence"] = prod.config.get("enable_idempotence")
    res["failed"] = failed
    if note:
        res["note"] = note
    if failed:
        res["error"] = f"{len(failed)}+ records failed: {failed[0]}"
    elif p.get("broker") != "tansu" and after - before != sent:
        res["error"] = f"high watermark moved by {after - before}, {sent} sent"
    return res


def step_consume_confluent(p: dict[str, Any]) -> dict[str, Any]:
    """Read a topic from offset 0 with librdkafka's consumer defaults, assign(), no commits."""
    from confluent_kafka import Consumer

    errs, error_cb = _errors()
    bootstrap, topic, limit = p["bootstrap"], p["topic"], p["time_limit"]
    hw = high_watermarks(bootstrap, topic)
    want = min(p["records"], p.get("in_topic") or sum(hw.values()))
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-consume",
            "enable.auto.commit": False,
            "error_cb": error_cb,
            **p.get("consumer", {}),
        }
    )
    got = nbytes = bad = 0
    waited = 0.0
    t99: float | None = None
    consume = c.consume
    with Meter(p["broker_pid"]) as m:
        deadline = time.perf_counter() + limit
        c.assign([_tp(topic, part, 0) for part in hw])
        while got < want and time.perf_counter() < deadline:
            ask = min(10_000, want - got)
            t = time.perf_counter()
            msgs = consume(ask, 1.0)
            dt = time.perf_counter() - t
            if dt > 0.05:  # the application waited for records (building 10k takes ~10 ms)
                waited += dt
            for msg in msgs:
                if msg.error():
                    bad += 1
                    continue
                got += 1
                nbytes += len(msg.value())
            if t99 is None and got >= want * 0.99:
                t99 = time.perf_counter() - m.t0
    c.close()
    res = m.result(got, nbytes)
    res.update(wanted=want, seconds_to_99pct=_r(t99), app_stalled_s=_r(waited))
    res.update(errors=errs, error_messages=bad)
    if got < want:
        res["error"] = f"read {got} of {want} records in {limit}s"
    return res


def step_consume_kafka_python(p: dict[str, Any]) -> dict[str, Any]:
    """Read a topic from offset 0 with kafka-python's defaults, assign(), no group."""
    from kafka import KafkaConsumer, TopicPartition

    bootstrap, topic, limit = p["bootstrap"], p["topic"], p["time_limit"]
    hw = high_watermarks(bootstrap, topic)
    want = min(p["records"], p.get("in_topic") or sum(hw.values()))
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tps = [TopicPartition(topic, part) for part in hw]
    got = nbytes = 0
    t99: float | None = None
    with Meter(p["broker_pid"]) as m:
        deadline = time.perf_counter() + limit
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        while got < want and time.perf_counter() < deadline:
            for recs in c.poll(timeout_ms=1000).values():
                got += len(recs)
                nbytes += sum(len(r.value) for r in recs)
            if t99 is None and got >= want * 0.99:
                t99 = time.perf_counter() - m.t0
    c.close()
    res = m.result(got, nbytes)
    res.update(wanted=want, seconds_to_99pct=_r(t99))
    if got < want:
        res["error"] = f"read {got} of {want} records in {limit}s"
    return res


def step_e2e_confluent(p: dict[str, Any]) -> dict[str, Any]:
    """Send at a fixed rate with the send time in the value; measure produce-to-receipt latency."""
    from confluent_kafka import Consumer, Producer

    errs, error_cb = _errors()
    bootstrap, topic, n, rate = p["bootstrap"], p["topic"], p["records"], p["rate"]
    warm = max(100, n // 10)
    hw = high_watermarks(bootstrap, topic)
    pconf = {"bootstrap.servers": bootstrap, "error_cb": error_cb, **p.get("producer", {})}
    prod = Producer(pconf)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-e2e",
            "enable.auto.commit": False,
            "error_cb": error_cb,
        }
    )
    c.assign([_tp(topic, part, off) for part, off in hw.items()])
    pad = bytes(RECORD_SIZE - 16)
    stop = threading.Event()

    def produce() -> None:
        t0 = time.perf_counter()
        for i in range(warm + n):
            due = t0 + i / rate
            while (d := due - time.perf_counter()) > 0:
                time.sleep(min(d, 0.001))
            if stop.is_set():
                return
            prod.produce(topic, struct.pack("<qq", i, time.perf_counter_ns()) + pad)
            prod.poll(0)
        prod.flush(10)

    lat: list[float] = []
    seen = 0
    th = threading.Thread(target=produce, daemon=True)
    cpu0 = proc_cpu_seconds(p["broker_pid"])
    th.start()
    deadline = time.perf_counter() + (warm + n) / rate + min(30.0, p["time_limit"])
    while seen < warm + n and time.perf_counter() < deadline:
        msg = c.poll(0.1)
        if msg is None or msg.error():
            continue
        now = time.perf_counter_ns()
        i, sent = struct.unpack_from("<qq", msg.value())
        seen += 1
        if i >= warm:
            lat.append((now - sent) / 1e6)
    cpu1 = proc_cpu_seconds(p["broker_pid"])
    stop.set()
    th.join(15)
    c.close()
    res = {
        "records": len(lat),
        "rate": rate,
        "warmup": warm,
        "producer_config": p.get("producer", {}),
        "p50_ms": round(pct(lat, 50), 3),
        "p99_ms": round(pct(lat, 99), 3),
        "p999_ms": round(pct(lat, 99.9), 3),
        "max_ms": round(max(lat), 3) if lat else None,
        "broker_cpu_s": round(cpu1 - cpu0, 3),
        "errors": errs,
    }
    if len(lat) < n:
        res["error"] = f"received {len(lat)} of {n} timed records"
    return res


def step_produce_latency(p: dict[str, Any]) -> dict[str, Any]:
    """Produce one record at a time (acks=1, linger.ms=0) and wait for its delivery report."""
    from confluent_kafka import Producer

    errs, error_cb = _errors()
    bootstrap, topic, n, limit = p["bootstrap"], p["topic"], p["records"], p["time_limit"]
    prod = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "error_cb": error_cb}
    )
    value = payload()
    failed: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and len(failed) < 20:
            failed.append(str(err))

    for _ in range(200):  # warm-up
        prod.produce(topic, value, partition=0, on_delivery=on_delivery)
        prod.flush(5)
    lat: list[float] = []
    perf = time.perf_counter
    with Meter(p["broker_pid"]) as m:
        deadline = perf() + limit
        for _ in range(n):
            t = perf()
            prod.produce(topic, value, partition=0, on_delivery=on_delivery)
            prod.flush(5)
            lat.append((perf() - t) * 1e3)
            if t > deadline:
                break
    res = m.result(len(lat), len(lat) * RECORD_SIZE)
    res.update(
        p50_ms=round(pct(lat, 50), 3),
        p99_ms=round(pct(lat, 99), 3),
        p999_ms=round(pct(lat, 99.9), 3),
        delivery_errors=failed,
        errors=errs,
    )
    if failed:
        res["error"] = f"delivery failed: {failed[0]}"
    return res


STEPS = {
    "produce_confluent": step_produce_confluent,
    "produce_kafka_python": step_produce_kafka_python,
    "consume_confluent": step_consume_confluent,
    "consume_kafka_python": step_consume_kafka_python,
    "e2e_confluent": step_e2e_confluent,
    "produce_latency": step_produce_latency,
}


# --------------------------------------------------------------------------------------------------
# orchestration


def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create topics with replication factor 1."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
        operation_timeout=10,
        request_timeout=15,
    )
    for f in futs.values():
        f.result(20)
    # wait until metadata shows every partition with a leader
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        if all(n in md.topics and len(md.topics[n].partitions) == partitions for n in names):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topics {names} not visible in metadata")


def run_step(name: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one step in a fresh client process; return its JSON result (or an error)."""
    cmd = [sys.executable, __file__, "--step", name, "--params", json.dumps(params)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"step timed out after {timeout:.0f}s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-600:]}"}
    return json.loads(lines[-1])


def plan(
    cfg: dict[str, Any], acks_all: bool, codecs: tuple[str, ...] = ()
) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, step, params) for every measurement, in order; `codecs` adds a produce step per
    compression codec (librdkafka's `compression.type`)."""
    lim = cfg["step_time_limit"]
    steps: list[tuple[str, str, dict[str, Any]]] = [
        (
            "produce confluent acks=1",
            "produce_confluent",
            {"topic": "bench-p1", "records": cfg["produce_records"], "acks": 1},
        ),
    ]
    steps += [
        (
            f"produce confluent acks=1 compression.type={codec}",
            "produce_confluent",
            {
                "topic": f"bench-p1-{codec}",
                "records": cfg["produce_records"],
                "acks": 1,
                "producer": {"compression.type": codec},
            },
        )
        for codec in codecs
    ]
    if acks_all:
        steps.append(
            (
                "produce confluent acks=all",
                "produce_confluent",
                {"topic": "bench-pall", "records": cfg["produce_records"], "acks": "all"},
            )
        )
    steps += [
        (
            "produce kafka-python",
            "produce_kafka_python",
            {"topic": "bench-pkpy", "records": cfg["kpy_produce_records"]},
        ),
        (
            "consume confluent",
            "consume_confluent",
            {"topic": "bench-p1", "records": cfg["consume_records"]},
        ),
        (
            "consume confluent fetch.queue.backoff.ms=10",
            "consume_confluent",
            {
                "topic": "bench-p1",
                "records": cfg["consume_records"],
                "consumer": {"fetch.queue.backoff.ms": 10},
            },
        ),
        (
            "consume kafka-python",
            "consume_kafka_python",
            {"topic": "bench-p1", "records": cfg["kpy_consume_records"]},
        ),
        (
            "e2e confluent defaults",
            "e2e_confluent",
            {"topic": "bench-e2e", "records": cfg["e2e_records"], "rate": cfg["e2e_rate"]},
        ),
        (
            "e2e confluent linger.ms=0",
            "e2e_confluent",
            {
                "topic": "bench-e2e0",
                "records": cfg["e2e_records"],
                "rate": cfg["e2e_rate"],
                "producer": {"linger.ms": 0},
            },
        ),
        (
            "produce latency acks=1",
            "produce_latency",
            {"topic": "bench-lat", "records": cfg["latency_records"]},
        ),
    ]
    for _, _, params in steps:
        params["time_limit"] = lim
    return steps


def start_profiler(
    out_dir: Path | None, broker: str, label: str, pid: int
) -> tuple[subprocess.Popen, Path] | None:
    """py-spy record (collapsed stacks) of a Python broker for the length of one step."""
    if out_dir is None or broker == "tansu":
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{broker}-{label.replace(' ', '_').replace('=', '')}.txt"
    pyspy = Path(sys.executable).parent / "py-spy"
    cmd = [str(pyspy), "record", "--pid", str(pid), "--format", "raw", "--rate", "250"]
    cmd += ["--nonblocking", "-o", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # let py-spy attach before the step starts
    return proc, path


def stop_profiler(spy: tuple[subprocess.Popen, Path]) -> str:
    """Stop py-spy (SIGINT makes it write its output); return the output path."""
    proc, path = spy
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
    return str(path)


def settle(pid: int, quiet: float = 0.02, window: float = 0.3, limit: float = 15.0) -> None:
    """Wait until the broker uses under `quiet` CPU-s per `window` (background work done)."""
    deadline = time.monotonic() + limit
    last = proc_cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = proc_cpu_seconds(pid)
        if now - last < quiet:
            return
        last = now


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by rec/s, or by p50 for latency steps) with every run's figure attached."""
    good = [r for r in runs if "error" not in r and r.get("records")]
    if not good:
        return {**runs[-1], "runs": len(runs)}
    key = "p50_ms" if "p50_ms" in good[0] else "records_per_s"
    good.sort(key=lambda r: r[key])
    med = dict(good[(len(good) - 1) // 2] if key == "p50_ms" else good[len(good) // 2])
    med["runs"] = len(runs)
    med[f"all_{key}"] = [r[key] for r in runs if key in r]
    if "p99_ms" in good[0]:
        med["all_p99_ms"] = [r["p99_ms"] for r in runs if "p99_ms" in r]
    if len(good) < len(runs):
        med["failed_runs"] = [r.get("error") for r in runs if r not in good]
    return med


def start_broker(name: str, topics: list[str], partitions: int) -> tuple[Broker, str | None]:
    """Start a broker and create the topics; (broker, error or None)."""
    broker = Broker(name)
    try:
        broker.start()
        create_topics(broker.bootstrap, topics, partitions)
        high_watermarks(broker.bootstrap, topics[0])  # a group.id client: FindCoordinator once
        time.sleep(1.0)
        return broker, None
    except Exception as e:  # noqa: BLE001
        return broker, f"{type(e).__name__}: {e}"[-800:]


def bench_all(
    names: list[str],
    cfg: dict[str, Any],
    partitions: int,
    acks_all: bool,
    only: set[str] | None,
    profile: Path | None = None,
    repeat: int = 1,
    codecs: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Run every step against every broker, interleaved (run i of a step on each broker in
    turn), so that both see the same machine conditions; one result dict per broker and step."""
    steps = [s for s in plan(cfg, acks_all, codecs) if not only or s[1] in only or s[0] in only]
    topics = sorted({params["topic"] for _, _, params in steps})
    results: list[dict[str, Any]] = []
    brokers: dict[str, Broker] = {}
    try:
        for name in names:
            broker, err = start_broker(name, topics, partitions)
            if err is None:
                brokers[name] = broker
                continue
            broker.stop(keep=bool(os.environ.get("BENCH_KEEP")))
            row = {"broker": name, "test": "start", "error": err}
            print(json.dumps(row), flush=True)
            results.append(row)
        in_topic: dict[tuple[str, str], int] = {}
        for label, step, base in steps:
            runs: dict[str, list[dict[str, Any]]] = {n: [] for n in brokers}
            spies = {n: start_profiler(profile, n, label, b.pid) for n, b in brokers.items()}
            # an e2e run takes (warm-up + records) / rate seconds: at most 3 of them
            for i in range(min(repeat, 3) if step == "e2e_confluent" else repeat):
                for name, broker in brokers.items():
                    if broker.proc is None or broker.proc.poll() is not None:
                        continue
                    if runs[name] and "error" in runs[name][-1]:
                        continue
                    params = {**base, "bootstrap": broker.bootstrap, "broker_pid": broker.pid}
                    params["broker"] = name
                    if (name, base["topic"]) in in_topic:
                        params["in_topic"] = in_topic[(name, base["topic"])]
                    settle(broker.pid)
                    res = run_step(step, params, timeout=cfg["step_time_limit"] * 2 + 60)
                    if broker.proc.poll() is not None:
                        res.setdefault("error", f"broker exited {broker.proc.returncode}")
                        res["broker_log"] = broker.tail(800)
                    print(json.dumps({"broker": name, "test": label, "run": i, **res}), flush=True)
                    runs[name].append(res)
                    if (
                        step.startswith("produce_")
                        and "in_topic" in res
                        and not res.get("undelivered")
                    ):
                        key = (name, base["topic"])
                        in_topic[key] = in_topic.get(key, 0) + res["in_topic"]
            for name in brokers:
                spy = spies[name]
                if spy is not None:
                    stop_profiler(spy)
                if not runs[name]:
                    continue
                row = {"broker": name, "test": label, "step": step, **median_run(runs[name])}
                if spy is not None:
                    row["profile"] = str(spy[1])
                print(json.dumps(row), flush=True)
                results.append(row)
    finally:
        for broker in brokers.values():
            broker.stop(keep=bool(os.environ.get("BENCH_KEEP")))
    return results


# --------------------------------------------------------------------------------------------------
# report


def machine() -> dict[str, str]:
    """nproc, CPU model, load, kernel and client versions."""
    import confluent_kafka
    import kafka

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})",
        "kafka_python": kafka.__version__,
    }


def _cell(r: dict[str, Any] | None, kind: str) -> str:
    if r is None:
        return "not run"
    if "error" in r and not r.get("records"):
        return "error: " + str(r["error"])[:100].replace("|", "/").replace("\n", " ")
    warn = " (!)" if "error" in r or "failed_runs" in r else ""
    if r.get("note"):
        warn += " (idempotence off†)" if "idempotence" in r["note"] else " (†)"
    if kind == "tput":
        runs = r.get("all_records_per_s", [])
        spread = f" [{min(runs):,}–{max(runs):,}]" if len(runs) > 1 else ""
        stall = ""
        if r.get("app_stalled_s") is not None:
            stall = f"; app stalled {r['app_stalled_s']:.2g} of {r['seconds']:.2g} s"
        return (
            f"{r['records_per_s']:,} rec/s{spread}, {r['mb_per_s']} MB/s; CPU-s/M broker "
            f"{r.get('broker_cpu_s_per_M')}, client {r.get('client_cpu_s_per_M')}{stall}{warn}"
        )
    runs = r.get("all_p50_ms", [])
    spread = f" [{min(runs):.3g}–{max(runs):.3g}]" if len(runs) > 1 else ""
    return f"p50 {r['p50_ms']:.3g} ms{spread}, p99 {r['p99_ms']:.3g} ms{warn}"


TARGETS = {
    "produce confluent acks=1": "≥ Tansu rec/s, ≤ Tansu CPU-s/M",
    "produce confluent acks=all": "",
    "produce kafka-python": "",
    "consume confluent": "≥ 1.5× Tansu",
    "consume kafka-python": "",
    "e2e confluent defaults": "p50 ≤ 1 ms, p99 ≤ 5 ms",
    "e2e confluent linger.ms=0": "p50 ≤ 1 ms, p99 ≤ 5 ms",
    "produce latency acks=1": "p50 ≤ 0.25 ms",
}


def _ok(r: dict[str, Any] | None) -> bool:
    return r is not None and "error" not in r and bool(r.get("records"))


def verdict(test: str, r: dict[str, Any] | None, t: dict[str, Any] | None) -> str:
    """'met' / 'MISSED' for rdmalog's target on this test, with the ratio to Tansu; '' if none."""
    if not _ok(r):
        return "MISSED (no result)" if test in TARGETS and TARGETS[test] else ""
    assert r is not None
    ratio = ""
    if _ok(t):
        assert t is not None
        if "records_per_s" in r and "p50_ms" not in r:
            ratio = f"{r['records_per_s'] / max(t['records_per_s'], 1):.2f}× Tansu rec/s"
        else:
            ratio = f"p50 {r['p50_ms'] / max(t['p50_ms'], 1e-9):.3g}× Tansu"
    met: bool | None = None
    if test.startswith("produce confluent acks=1") and _ok(t):
        assert t is not None
        met = (
            r["records_per_s"] >= t["records_per_s"]
            and r["broker_cpu_s_per_M"] <= t["broker_cpu_s_per_M"]
        )
    elif test == "consume confluent" and _ok(t):
        assert t is not None
        met = r["records_per_s"] >= 1.5 * t["records_per_s"]
    elif test.startswith("e2e"):
        met = r["p50_ms"] <= 1.0 and r["p99_ms"] <= 5.0
    elif test == "produce latency acks=1":
        met = r["p50_ms"] <= 0.25
    word = "" if met is None else ("met" if met else "MISSED")
    return ", ".join(x for x in (word, ratio) if x)


def table(results: list[dict[str, Any]], brokers: list[str]) -> str:
    """Markdown table: one row per test, one column per broker, then rdmalog's target."""
    by = {(r["broker"], r["test"]): r for r in results}
    tests: list[str] = []
    for r in results:
        if r["test"] not in tests and r["test"] != "start":
            tests.append(r["test"])
    both = "rdmalog" in brokers and "tansu" in brokers
    head = "| test | " + " | ".join(brokers) + " | rdmalog target |"
    sep = "| --- | " + " | ".join("---" for _ in brokers) + " | --- |"
    if both:
        head += " rdmalog vs target |"
        sep += " --- |"
    rows = [head, sep]
    for t in tests:
        kind = "lat" if ("e2e" in t or "latency" in t) else "tput"
        cells = [_cell(by.get((b, t)), kind) for b in brokers]
        target = TARGETS.get(t.split(" compression.type=")[0], "")
        row = f"| {t} | " + " | ".join(cells) + f" | {target} |"
        if both:
            row += f" {verdict(t, by.get(('rdmalog', t)), by.get(('tansu', t)))} |"
        rows.append(row)
    for b in brokers:
        if (b, "start") in by:
            err = by[(b, "start")]["error"].strip().splitlines()
            rows.append(f"\n{b} failed: `{err[-1] if err else '?'}`")
    return "\n".join(rows)


def plot(path: Path, results: list[dict[str, Any]], brokers: list[str]) -> None:
    """Throughput steps as grouped bars per broker (rec/s), and broker CPU per million records."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from plots import grouped_bars

    by = {(r["broker"], r["test"]): r for r in results}
    tests = [t for t in dict.fromkeys(r["test"] for r in results) if t != "start"]
    tput = [t for t in tests if any("records_per_s" in by.get((b, t), {}) for b in brokers)]
    series = {b: [by.get((b, t), {}).get("records_per_s", 0) or 0 for t in tput] for b in brokers}
    grouped_bars(path, "Kafka protocol: records per second", tput, series, "records/s")
    cpu = path.with_name(path.stem + "_cpu" + path.suffix)
    series = {
        b: [by.get((b, t), {}).get("broker_cpu_s_per_M", 0) or 0 for t in tput] for b in brokers
    }
    grouped_bars(cpu, "Broker CPU per million records", tput, series, "CPU seconds / M records")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer records per step")
    ap.add_argument("--brokers", default="rdmalog,tansu")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    ap.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="runs per step (e2e: at most 3), median reported (default 5, quick 1)",
    )
    ap.add_argument("--no-acks-all", action="store_true", help="skip the acks=all produce step")
    ap.add_argument("--only", default="", help="comma-separated step or test names to run")
    ap.add_argument(
        "--codecs",
        default="",
        help="also run the acks=1 produce step with each of these compression.type values "
        "(comma-separated: gzip,snappy,lz4,zstd)",
    )
    ap.add_argument("--out", type=Path, help="markdown file to write the section to")
    ap.add_argument(
        "--plot", type=Path, help="draw rec/s (and broker CPU, NAME_cpu.png) per step to this PNG"
    )
    ap.add_argument(
        "--profile", type=Path, help="py-spy the rdmalog broker per step into this directory"
    )
    ap.add_argument(
        "--notes", default="", help="text, or a file of text, appended to the written section"
    )
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.step:
        print(json.dumps(STEPS[args.step](json.loads(args.params))), flush=True)
        return

    cfg = QUICK if args.quick else FULL
    args.repeat = args.repeat or (1 if args.quick else 5)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    started = dt.datetime.now(dt.UTC)
    env = machine()
    print(json.dumps({"run": started.isoformat(timespec="seconds"), **env, "config": cfg}))
    versions: dict[str, str] = {}
    for b in brokers:
        versions[b] = Broker(b).version()
    codecs = tuple(c.strip() for c in args.codecs.split(",") if c.strip())
    results = bench_all(
        brokers, cfg, args.partitions, not args.no_acks_all, only, args.profile, args.repeat, codecs
    )
    env_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    md = table(results, brokers)
    print()
    print(md)
    if args.plot:
        plot(args.plot, results, brokers)
        print(f"figures: {args.plot}, {args.plot.with_name(args.plot.stem + '_cpu.png')}")
    if args.out:
        argv = " ".join(a if " " not in a else repr(a) for a in sys.argv[1:])
        body = "\n".join(
            [
                f"Command: `python bench/kafka_protocol.py {argv}`  ",
                f"Date: {started.strftime('%Y-%m-%d %H:%M UTC')}  ",
                f"Machine: {env['nproc']} CPUs, {env['cpu']}, Linux {env['kernel']}, "
                f"Python {env['python']}  ",
                f"Load before: `{env['uptime']}`  ",
                f"Load after: `{env_after}`  ",
                f"Clients: confluent-kafka {env['confluent_kafka']}, kafka-python "
                f"{env['kafka_python']}  ",
                "Brokers: " + ", ".join(f"{k}: {v}" for k, v in versions.items()) + "  ",
                f"Topics: {args.partitions} partition(s), replication factor 1; brokers, clients "
                "and the harness share the same host (127.0.0.1).",
                "",
                "Method (seed 004, scaled to one host): 100-byte values, no keys, one producer, one "
                "consumer, client defaults unless the row says otherwise. MB/s counts value bytes "
                "only, MB = 2^20 bytes. Broker CPU is utime+stime of the broker process (and "
                "children) from /proc over the timed region, per million records. Consumers use "
                "assign() from offset 0 with a group.id but no commits. End-to-end latency: one "
                "process sends at a fixed rate with its send time in the value and measures on "
                "receipt (warm-up records excluded). Produce latency: produce one record, flush, "
                "repeat.",
                "",
                md,
                "",
                "† kafka-python 3.x is idempotent by default (needs InitProducerId); if a broker "
                "rejects that, the step reruns with enable_idempotence=False and the cell says so. "
                "librdkafka's consumer backs off `fetch.queue.backoff.ms` (default 1000 ms) "
                "whenever its prefetch queue holds `queued.min.messages` (100000): a broker that "
                "delivers faster than the Python application drains hits that back-off, so the "
                "defaults row measures the client's back-off as much as the broker; the "
                "`fetch.queue.backoff.ms=10` row takes the back-off mostly out of the way (there "
                "the client's CPU becomes the limit).",
                "",
                f"Each step ran {args.repeat} time(s) (e2e at most 3), brokers interleaved run by "
                "run; the table shows the median run "
                "(by rec/s, or by p50) and [min–max] over runs. Records per run: "
                f"{json.dumps(cfg)}",
            ]
        )
        if args.notes:
            notes = Path(args.notes)
            body += "\n\n" + (notes.read_text().strip() if notes.is_file() else args.notes)
        replace_section(args.out, SECTION, body)


if __name__ == "__main__":
    main()

"""Replication benchmark: one three-broker cluster on this host (ZooKeeper + `rdmalog serve` x3), in one
run: acks=all produce latency (p50/p99) and throughput with replication factor 1 and 3 (confluent-kafka,
100-byte and 64 KiB records), broker CPU per record, and failover: the time from kill -9 of a leader,
and from a controlled shutdown (SIGTERM) of one, to the first acknowledged produce after it, with the
longest gap between acknowledgements of a producer sending one record at a time.

    python bench/replication.py [--quick] [--repeat N] [--session-timeout-ms 6000] [--out docs/performance.md]
    python bench/replication.py --latency-only [--quick] [--repeat N]   # the p50s, CPU per request
    python bench/replication.py --modes [--quick] [--repeat N] [--transports shm,tcp]
                                [--out docs/performance.md] [--plot docs/push_batching.png]

`--modes` compares replication modes instead (issue 16: `none`, `pull`, `push` per RDMA transport,
JSON lines {"transport", "mode", "metric", "value", "unit"}, and the batching curve of push
replication): see bench/replication_modes.py.

Both topics of a size have their leader on broker 1 (replica assignments [1] and [1, 2, 3], and
min.insync.replicas=2 for RF 3), and RF 1 and RF 3 runs alternate (A B A B) so machine load drifts
cancel; the table shows the median run. Nothing here asserts anything: numbers go to the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.brokers import proc_cpu_seconds  # noqa: E402
from bench.docs_section import replace_section  # noqa: E402
from compat_tests.cluster import BrokerCluster, wait_for  # noqa: E402
from compat_tests.zookeeper import ZooKeeperServer  # noqa: E402

SIZES = {"100 B": 100, "64 KiB": 65536}
SECTION = "## Replication (cluster mode)"


def create(bootstrap: str, name: str, replicas: list[int], **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=1, replica_assignment=[replicas], config=configs)
    admin.create_topics([topic], operation_timeout=30)[name].result(30)


def latency(bootstrap: str, topic: str, size: int, count: int) -> dict:
    """One record at a time (linger.ms=0, produce then flush): per-record acks=all latency."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    value = b"x" * size
    for _ in range(20):  # connections, metadata
        p.produce(topic, value)
        p.flush(30)
    out = []
    for _ in range(count):
        t = time.perf_counter()
        p.produce(topic, value)
        p.flush(30)
        out.append(time.perf_counter() - t)
    out.sort()
    return {
        "p50_ms": 1000 * out[len(out) // 2],
        "p99_ms": 1000 * out[min(len(out) - 1, int(len(out) * 0.99))],
    }


def latency_cpu(cluster: BrokerCluster, tag: str, size: int, rf: int, count: int) -> dict:
    """`latency` with each broker's CPU time per request over it (the leader, broker 1, first;
    /proc's 10 ms ticks: read it over a few hundred requests)."""
    pids = [b.proc.pid for b in cluster.brokers.values()]
    before = [proc_cpu_seconds(pid) for pid in pids]
    lat = latency(cluster.bootstrap, f"rf{rf}-{tag}", size, count)
    cpu = [
        round((proc_cpu_seconds(pid) - t) * 1e6 / (count + 20))
        for pid, t in zip(pids, before, strict=True)
    ]
    return {"size": size, "rf": rf, **lat, "cpu_us_per_request": cpu, "load": os.getloadavg()}


def throughput(cluster: BrokerCluster, topic: str, size: int, count: int) -> dict:
    """`count` records as fast as librdkafka batches them (linger.ms=5, acks=all); broker CPU of
    all three brokers over the run."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    value = b"x" * size
    p.produce(topic, value)
    p.flush(30)
    errors = []
    pids = [b.proc.pid for b in cluster.brokers.values()]
    cpu0 = sum(proc_cpu_seconds(pid) for pid in pids)
    t0 = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    cpu = sum(proc_cpu_seconds(pid) for pid in pids) - cpu0
    return {
        "rec_s": count / elapsed,
        "mb_s": count * size / elapsed / 1e6,
        "broker_cpu_us_per_rec": 1e6 * cpu / count,
        "errors": len(errors),
    }


class SteadyProducer:
    """Sends one record at a time (acks=all, idempotent); notes (sent, acknowledged) times."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acks: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 120000,
            }
        )
        self.topic = topic
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err, _msg, sent=sent) -> None:
                if err is None:
                    self.acks.append((sent, time.monotonic()))
                else:
                    self.errors.append(str(err))

            self.p.produce(self.topic, b"x" * 100, on_delivery=done)
            self.p.flush(130)

    def __enter__(self) -> SteadyProducer:
        self.t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.t.join(150)


def failover(cluster: BrokerCluster, topic: str, sig: int, session_ms: int) -> dict:
    """Fault the leader of `topic` with `sig` under a steady producer: the longest gap between
    acknowledgements around it, the first acknowledgement of a record sent after it (only the new
    leader can give that after a kill), and when ZooKeeper named the new leader."""
    leader = cluster.leader(topic)
    stopper = threading.Thread(target=cluster.broker(leader).stop, args=(sig,), daemon=True)
    with SteadyProducer(cluster.bootstrap, topic) as sp:
        wait_for("steady acks", lambda: len(sp.acks) > 50)
        t0 = time.monotonic()
        stopper.start()
        elected = wait_for(
            "a new leader",
            lambda: cluster.leader(topic) not in (-1, leader) and time.monotonic(),
            timeout=4 * session_ms / 1000 + 30,
        )
        wait_for("acks after the fault", lambda: sum(a > elected for _, a in sp.acks) > 50)
    stopper.join(60)
    acked = [a for _, a in sp.acks if a > t0 - 1.0]
    gaps = [b - a for a, b in zip(acked, acked[1:], strict=False)]
    result = {
        "first_ack_of_later_send_s": min(a for s, a in sp.acks if s >= t0) - t0,
        "max_gap_s": max(gaps) if gaps else None,
        "leader_seen_s": elected - t0,
        "errors": len(sp.errors),
    }
    cluster.broker(leader).start()
    cluster.wait_isr(topic, set(cluster.brokers), timeout=120)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--modes", action="store_true", help="none/pull/push per transport (issue 16)")
    ap.add_argument("--transports", default="shm,tcp")
    ap.add_argument("--plot", type=Path, help="--modes: the batching curve as an image")
    ap.add_argument(
        "--latency-only",
        action="store_true",
        help="only the acks=all latency rounds, with each broker's CPU per request (no table)",
    )
    args = ap.parse_args()
    if args.modes:
        run_modes(args)
        return
    repeat = 1 if args.quick else args.repeat
    lat_n = {"100 B": 300 if args.quick else 2000, "64 KiB": 100 if args.quick else 500}
    thr_n = {"100 B": 30000 if args.quick else 200000, "64 KiB": 300 if args.quick else 2000}
    session = args.session_timeout_ms
    rows: dict[tuple[str, str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk").start()
        cluster = BrokerCluster(
            Path(tmp) / "cluster",
            zk.connect + "/bench",
            3,
            {
                "zookeeper.session.timeout.ms": str(session),
                "replica.lag.time.max.ms": "10000",
                "replica.fetch.wait.max.ms": "500",
                "controlled.shutdown.retry.backoff.ms": "200",
            },
        )
        try:
            cluster.start()
            b = cluster.bootstrap
            for label in SIZES:
                tag = label.replace(" ", "").lower()
                create(b, f"rf1-{tag}", [1])
                create(b, f"rf3-{tag}", [1, 2, 3], **{"min.insync.replicas": "2"})
                cluster.wait_isr(f"rf3-{tag}", {1, 2, 3})
            for run in range(repeat):
                for label, size in SIZES.items():
                    tag = label.replace(" ", "").lower()
                    for rf in (1, 3):  # A B A B
                        if args.latency_only:
                            print(json.dumps(latency_cpu(cluster, tag, size, rf, lat_n[label])))
                            continue
                        lat = latency(b, f"rf{rf}-{tag}", size, lat_n[label])
                        thr = throughput(cluster, f"rf{rf}-{tag}", size, thr_n[label])
                        row = {"size": label, "rf": rf, "run": run, **lat, **thr}
                        print(json.dumps(row), flush=True)
                        rows.setdefault(("produce", label, rf), []).append(row)
            if args.latency_only:
                return
            create(b, "failover-kill", [1, 2, 3], **{"min.insync.replicas": "2"})
            create(b, "failover-cs", [2, 3, 1], **{"min.insync.replicas": "2"})
            cluster.wait_isr("failover-kill", {1, 2, 3})
            cluster.wait_isr("failover-cs", {1, 2, 3})
            for run in range(repeat):
                for name, topic, sig in (
                    ("kill -9", "failover-kill", signal.SIGKILL),
                    ("controlled shutdown", "failover-cs", signal.SIGTERM),
                ):
                    res = {"fault": name, "run": run, **failover(cluster, topic, sig, session)}
                    print(json.dumps(res), flush=True)
                    rows.setdefault(("failover", name, 0), []).append(res)
        finally:
            cluster.stop()
            zk.stop()
    table = render(rows, session, args)
    print(table)
    if args.out:
        replace_section(args.out, SECTION, table)


def run_modes(args: argparse.Namespace) -> None:
    from bench import replication_modes as rm

    repeat = 1 if args.quick else args.repeat
    rows = rm.run(args.transports.split(","), repeat, args.quick)
    command = "python bench/replication.py --modes" + (" --quick" if args.quick else "")
    table = rm.render(rows, command + f" --repeat {repeat} --transports {args.transports}")
    print(table)
    if args.out:
        replace_section(args.out, rm.SECTION, table)
    if args.plot:
        rm.plot(rows, args.plot)


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs if r.get(key) is not None)


def render(rows: dict, session_ms: int, args: argparse.Namespace) -> str:
    lines = [
        SECTION,
        "",
        f"`python bench/replication.py{' --quick' if args.quick else ''} --repeat {args.repeat} "
        f"--session-timeout-ms {session_ms}` on {datetime.date.today()}, {platform.node()} "
        f"({os.cpu_count()} cores, shared with other sessions' work: numbers move with load). "
        "ZooKeeper and three `rdmalog serve` brokers on 127.0.0.1, confluent-kafka "
        "(librdkafka) producers with acks=all; RF 3 topics have min.insync.replicas=2; both "
        "topics of a size are led by broker 1. Median of the runs (RF 1 and RF 3 alternating).",
        "",
        "| records | RF | p50 ms | p99 ms | rec/s | MB/s | broker CPU us/record (3 brokers) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label in SIZES:
        for rf in (1, 3):
            runs = rows.get(("produce", label, rf), [])
            if not runs:
                continue
            lines.append(
                f"| {label} | {rf} | {_median(runs, 'p50_ms'):.2f} | {_median(runs, 'p99_ms'):.2f} "
                f"| {_median(runs, 'rec_s'):,.0f} | {_median(runs, 'mb_s'):.1f} "
                f"| {_median(runs, 'broker_cpu_us_per_rec'):.1f} |"
            )
    lines += [
        "",
        "| ratio RF 3 / RF 1 | p50 (target <= 2) | throughput (target >= 0.5) |",
        "| --- | --- | --- |",
    ]
    for label in SIZES:
        one, three = rows.get(("produce", label, 1)), rows.get(("produce", label, 3))
        if one and three:
            lines.append(
                f"| {label} | {_median(three, 'p50_ms') / _median(one, 'p50_ms'):.2f} "
                f"| {_median(three, 'rec_s') / _median(one, 'rec_s'):.2f} |"
            )
    lines += [
        "",
        f"Failover (zookeeper.session.timeout.ms={session_ms}; targets: kill -9 <= "
        f"{2 * session_ms / 1000:.0f} s, controlled shutdown <= 1 s), a producer sending one "
        "record at a time:",
        "",
        "| fault | longest gap between acknowledgements, s | first acknowledgement of a record "
        "sent after the fault, s | new leader in ZooKeeper after, s |",
        "| --- | --- | --- | --- |",
    ]
    for name in ("kill -9", "controlled shutdown"):
        runs = rows.get(("failover", name, 0), [])
        if runs:
            lines.append(
                f"| {name} | {_median(runs, 'max_gap_s'):.2f} "
                f"| {_median(runs, 'first_ack_of_later_send_s'):.2f} "
                f"| {_median(runs, 'leader_seen_s'):.2f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

"""Transactions benchmark: the latency of a transaction (begin, one record on each of three
partitions, commit) and transactions per second, on one broker and on a three-broker cluster
(ZooKeeper + `rdmalog serve` x3, RF 3, the partitions led by different brokers, so markers go to
other brokers over the inter-broker listener). confluent-kafka (librdkafka) transactional producers.
The two setups alternate (A B A B) so machine load drifts cancel; the table shows the median run.
Nothing here asserts anything: numbers go to the table.

    python bench/transactions.py [--count 200] [--repeat 3] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.docs_section import replace_section  # noqa: E402
from compat_tests.brokers import BrokerProcess  # noqa: E402
from compat_tests.cluster import BrokerCluster  # noqa: E402
from compat_tests.zookeeper import ZooKeeperServer  # noqa: E402

SECTION = "## Transactions: one broker and a cluster"
SETTINGS = {"transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4"}


def create(bootstrap: str, name: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 3, rf)], operation_timeout=30)[name].result(30)


def run(bootstrap: str, topic: str, count: int, txn_id: str) -> dict:
    """`count` transactions of three records (one per partition), one after the other."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions(60)
    took = []
    t0 = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        p.begin_transaction()
        for part in range(3):
            p.produce(topic, b"x" * 100, partition=part)
        p.commit_transaction(60)
        took.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - t0
    took.sort()
    return {
        "p50_ms": 1000 * took[len(took) // 2],
        "p99_ms": 1000 * took[min(len(took) - 1, int(len(took) * 0.99))],
        "txn_s": count / elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows: dict[str, list[dict]] = {"one broker": [], "cluster (3 brokers, RF 3)": []}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        zk = ZooKeeperServer(d / "zk").start()
        single = BrokerProcess(d / "single" / "data", SETTINGS, log_dir=d / "single")
        cluster = BrokerCluster(d / "cluster", f"{zk.connect}/bench", 3, SETTINGS)
        try:
            single.start()
            cluster.start()
            create(single.bootstrap, "txn-bench", 1)
            create(cluster.bootstrap, "txn-bench", 3)
            leaders = {cluster.leader("txn-bench", p) for p in range(3)}
            print(f"cluster partition leaders: {sorted(leaders)}", flush=True)
            for r in range(args.repeat):
                for name, bootstrap in (
                    ("one broker", single.bootstrap),
                    ("cluster (3 brokers, RF 3)", cluster.bootstrap),
                ):
                    got = run(bootstrap, "txn-bench", args.count, f"bench-{r}")
                    rows[name].append(got)
                    print(name, {k: round(v, 2) for k, v in got.items()}, flush=True)
        finally:
            cluster.stop()
            single.stop()
            zk.stop()
    load1 = os.getloadavg()[0]
    lines = [
        f"`python bench/transactions.py --count {args.count} --repeat {args.repeat}` on "
        f"{datetime.date.today()}, {platform.node()} ({os.cpu_count()} cores, shared with other "
        f"sessions' work; load average {load0:.1f} at the start, {load1:.1f} at the end). "
        "A transaction is begin, one 100-byte record on each of three partitions, commit "
        "(confluent-kafka, linger.ms=0); in the cluster the partitions are led by different "
        "brokers, so the coordinator sends markers to the others. Median of the runs "
        "(the setups alternating).",
        "",
        "| setup | p50 ms | p99 ms | transactions/s |",
        "| --- | --- | --- | --- |",
    ]
    for name, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        lines.append(f"| {name} | {med['p50_ms']:.1f} | {med['p99_ms']:.1f} | {med['txn_s']:.1f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        replace_section(args.out, SECTION, table)


if __name__ == "__main__":
    main()

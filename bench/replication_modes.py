"""Replication modes compared (issue 16): `none` (replication factor 1), `pull` (Kafka's follower
fetches over TCP) and `push` (KafkaDirect 4.3.2: the leader writes followers' head files over the
RDMA transport), per transport, on one host; `bench/replication.py --modes ...` runs it.

Two three-broker clusters run side by side on one ZooKeeper, one with `replica.transport=pull`,
one with `push` (both serving the transport to native clients); rounds alternate the modes (A B C
A B C) so machine drift cancels, and the median round is reported. Per mode:

- `acks_all_latency_us_p50/p99`: one 1 KiB record at a time, confluent-kafka (acks=all, linger.ms=0)
  through the gateway; `native_acks_all_latency_us_p50/p99`: the same from a native producer
  (acks=all, its default: answered once the ISR holds the record);
- `replicated_produce_gib_s`: 64 KiB batches from a native producer (its defaults in every mode:
  acks=all, up to 64 batches in flight, never one at a time), timed until the leader's high
  watermark covers them (the ISR holds them), and `leader_cpu_s_per_gib`: the leader's CPU time
  over that run per GiB.

Then the batching curve, in-process (a follower's RdmaService and a leader's push link,
compat_tests/push_pair.py): 64-byte entries, one batch each, appended at each of RATES a
second (an open loop: 10,000 a second, which one write per entry keeps up with, and 40,000, more
than one write per entry can carry here), for `replica.push.batch.max.bytes` from 0 (one batch
per write) up, with the entry latency (append to acknowledgement), the goodput and the entries
each write carried.

Every result is one JSON line: {"transport", "mode", "metric", "value", "unit"[, ...]}.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.brokers import proc_cpu_seconds
from compat_tests.cluster import BrokerCluster
from compat_tests.zookeeper import ZooKeeperServer

SECTION = "## Push replication (replica.transport)"

MODES = ("none", "pull", "push")
BATCH_MAX = (0, 256, 1024, 4096, 16384)
RATES = (10000, 40000)  # entries a second offered to the link in the batching curve
OVERRIDES = {
    "zookeeper.session.timeout.ms": "10000",
    "replica.lag.time.max.ms": "10000",
    "replica.fetch.wait.max.ms": "500",
}


def emit(transport: str, mode: str, metric: str, value: float, unit: str, **extra) -> dict:
    row = {"transport": transport, "mode": mode, "metric": metric, "value": value, "unit": unit}
    row.update(extra)
    print(json.dumps(row), flush=True)
    return row


def create(bootstrap: str, name: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"min.insync.replicas": "2"} if len(replicas) > 1 else {}
    topic = NewTopic(name, 1, replica_assignment=[replicas], config=configs)
    admin.create_topics([topic], operation_timeout=30)[name].result(30)


def latency_us(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    value = b"x" * 1024
    for _ in range(20):
        p.produce(topic, value)
        p.flush(30)
    out = []
    for _ in range(count):
        t = time.perf_counter()
        p.produce(topic, value)
        p.flush(30)
        out.append(time.perf_counter() - t)
    out.sort()
    return 1e6 * out[len(out) // 2], 1e6 * out[min(len(out) - 1, int(len(out) * 0.99))]


def native_latency_us(c: BrokerCluster, transport: str, topic: str, count: int) -> tuple:
    """A native producer (acks=all, the default) sending one 1 KiB record at a time: (p50, p99)."""
    from rdmalog.rdma import Producer as NativeProducer

    native = NativeProducer(c.rdma_control[1], transport)
    value = b"x" * 1024
    out = []
    try:
        for _ in range(20):
            native.send(topic, 0, value).wait(30)
        for _ in range(count):
            t = time.perf_counter()
            native.send(topic, 0, value).wait(30)
            out.append(time.perf_counter() - t)
    finally:
        native.close()
    out.sort()
    return 1e6 * out[len(out) // 2], 1e6 * out[min(len(out) - 1, int(len(out) * 0.99))]


def replicated_bandwidth(c: BrokerCluster, transport: str, topic: str, batches: int) -> tuple:
    """(GiB/s, leader CPU s/GiB): native 64 KiB batches until the high watermark covers them."""
    from rdmalog.rdma import Producer as NativeProducer
    from rdmalog.store.records import build_batch

    batch = bytes(build_batch([(None, b"y" * 1000)] * 64))  # 64 records, ~64 KiB
    watch = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "bench-hw"})
    tp = TopicPartition(topic, 0)
    native = NativeProducer(c.rdma_control[1], transport)
    try:
        native.send_batch(topic, 0, batch).wait(30)
        start_hw = watch.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        leader_pid = c.broker(1).proc.pid
        cpu0 = proc_cpu_seconds(leader_pid)
        t0 = time.perf_counter()
        for _ in range(batches):
            native.send_batch(topic, 0, batch)
        native.flush(120)
        want = start_hw + 64 * batches
        deadline = time.monotonic() + 120
        while watch.get_watermark_offsets(tp, timeout=10, cached=False)[1] < want:
            if time.monotonic() > deadline:
                raise TimeoutError("the high watermark did not cover the batches")
            time.sleep(0.001)
        secs = time.perf_counter() - t0
        cpu = proc_cpu_seconds(leader_pid) - cpu0
    finally:
        native.close()
        watch.close()
    gib = batches * len(batch) / (1 << 30)
    return gib / secs, cpu / gib


def clusters(tmp: Path, zk: ZooKeeperServer, transport: str) -> dict[str, BrokerCluster]:
    out = {}
    for rt in ("pull", "push"):
        c = BrokerCluster(
            tmp / f"{transport}-{rt}",
            f"{zk.connect}/bench-{transport}-{rt}",
            3,
            {**OVERRIDES, "replica.transport": rt},
            rdma=transport,
        )
        out[rt] = c.start()
        create(c.bootstrap, "rf1", [1])
        create(c.bootstrap, "rf3", [1, 2, 3])
        c.wait_isr("rf3", {1, 2, 3})
    return out


def run_cluster_modes(transport: str, repeat: int, quick: bool) -> list[dict]:
    rows: list[dict] = []
    # 1500 batches (~96 MiB) at least: 300 took ~50 ms on shm, as long as the pipeline's fill
    # and drain and a few 10 ms ticks of the leader's CPU clock
    lat_n, batches = (300, 1500) if quick else (2000, 3000)
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-push-") as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk").start()
        cs: dict[str, BrokerCluster] = {}
        try:
            cs = clusters(Path(tmp), zk, transport)
            for run in range(repeat):
                for mode in MODES:  # A B C A B C
                    c = cs["push" if mode == "none" else mode]
                    topic = "rf1" if mode == "none" else "rf3"
                    p50, p99 = latency_us(c.bootstrap, topic, lat_n)
                    n50, n99 = native_latency_us(c, transport, topic, lat_n)
                    gib_s, cpu = replicated_bandwidth(c, transport, topic, batches)
                    for metric, value in (
                        ("acks_all_latency_us_p50", p50),
                        ("acks_all_latency_us_p99", p99),
                        ("native_acks_all_latency_us_p50", n50),
                        ("native_acks_all_latency_us_p99", n99),
                        ("replicated_produce_gib_s", gib_s),
                        ("leader_cpu_s_per_gib", cpu),
                    ):
                        samples.setdefault((mode, metric), []).append(value)
                        print(json.dumps({"run": run, "transport": transport, "mode": mode,
                                          "metric": metric, "value": value}), flush=True)  # fmt: skip
        finally:
            for c in cs.values():
                c.stop()
            zk.stop()
    units = {"acks_all_latency_us_p50": "us", "acks_all_latency_us_p99": "us",
             "native_acks_all_latency_us_p50": "us", "native_acks_all_latency_us_p99": "us",
             "replicated_produce_gib_s": "GiB/s", "leader_cpu_s_per_gib": "s/GiB"}  # fmt: skip
    for (mode, metric), values in samples.items():
        rows.append(emit(transport, mode, metric, statistics.median(values), units[metric]))
    return rows


def batching_curve(transport: str, seconds: float, repeat: int = 1) -> list[dict]:
    """64-byte entries through a push link with each batch.max and rate, in-process; the
    sizes alternate within a round, and each point is the median of `repeat` rounds."""
    from compat_tests.push_pair import Follower, Leader

    samples: dict[tuple[int, int, str], list[float]] = {}
    units = {}
    for _ in range(repeat):
        for rate in RATES:
            for batch_max in BATCH_MAX:
                with tempfile.TemporaryDirectory(prefix="bench-batching-") as tmp:
                    follower = Follower(Path(tmp) / "follower", transport)
                    leader = Leader(Path(tmp) / "leader", follower, transport, batch_max=batch_max)
                    try:
                        for metric, value, unit in _curve_point(leader, rate, seconds):
                            samples.setdefault((rate, batch_max, metric), []).append(value)
                            units[metric] = unit
                    finally:
                        leader.close()
                        follower.close()
    return [
        emit(transport, "push", metric, statistics.median(values), units[metric],
             batch_max_bytes=batch_max, rate=rate)
        for (rate, batch_max, metric), values in samples.items()
    ]  # fmt: skip


def _curve_point(leader, rate: int, seconds: float) -> list[tuple[str, float, str]]:
    from rdmalog.store.records import build_batch

    entry = bytes(build_batch([(None, b"e" * 64)]))
    appended: list[float] = []
    acked_at: dict[int, float] = {}
    on_ack = leader.link.on_ack

    def ack(pp, leo: int) -> None:
        acked_at[leo] = time.perf_counter()
        on_ack(pp, leo)

    leader.link.on_ack = ack
    plog, link = leader.log, leader.link
    t0 = time.perf_counter()
    while (now := time.perf_counter()) - t0 < seconds:
        for _ in range(int((now - t0) * rate) - len(appended)):  # paced: `rate` a second
            plog.append(memoryview(bytearray(entry)))
            appended.append(time.perf_counter())
            link.kick(plog)
        time.sleep(0.0002)
    end = plog.log_end_offset
    leader.wait("the last entry acknowledged", lambda: leader.acked >= end, timeout=60)
    elapsed = max(acked_at.values()) - t0
    # each entry's latency: its append to the first acknowledgement covering it
    marks = sorted(acked_at.items())
    lat, i = [], 0
    for offset, t_app in enumerate(appended):
        while marks[i][0] <= offset:
            i += 1
        lat.append(marks[i][1] - t_app)
    lat.sort()
    writes = leader.pp.order
    return [
        ("batching_latency_us_p50", 1e6 * lat[len(lat) // 2], "us"),
        ("batching_latency_us_p99", 1e6 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], "us"),
        ("batching_goodput_mib_s", len(appended) * 64 / elapsed / 2**20, "MiB/s"),
        ("batching_entries_per_write", len(appended) / max(writes, 1), "entries"),
    ]


def run(transports: list[str], repeat: int, quick: bool) -> list[dict]:
    rows: list[dict] = []
    for transport in transports:
        rows += run_cluster_modes(transport, repeat, quick)
        rows += batching_curve(transport, 1.0 if quick else 3.0, repeat)
    return rows


def render(rows: list[dict], command: str) -> str:
    """The markdown section: the modes table, the targets, the batching curve."""
    by = {
        (r["transport"], r["mode"], r["metric"], r.get("batch_max_bytes")): r["value"] for r in rows
    }
    transports = sorted({r["transport"] for r in rows})
    lines = [
        SECTION,
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d')}: two three-broker clusters (pull, push) side "
        "by side with one ZooKeeper on this 2-core host, shared with other sessions' work "
        "(numbers move with load); rounds alternate the modes; medians.",
        "",
        "| transport | mode | acks=all p50 us | p99 us | native acks=all p50 us | p99 us "
        "| replicated GiB/s (64 KiB, native) | leader CPU s/GiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in transports:
        for m in MODES:
            v = [by.get((t, m, k, None)) for k in ("acks_all_latency_us_p50",
                 "acks_all_latency_us_p99", "native_acks_all_latency_us_p50",
                 "native_acks_all_latency_us_p99", "replicated_produce_gib_s",
                 "leader_cpu_s_per_gib")]  # fmt: skip
            if None in v:
                continue
            lines.append(f"| {t} | {m} | {v[0]:.0f} | {v[1]:.0f} | {v[2]:.0f} | {v[3]:.0f} "
                         f"| {v[4]:.3f} | {v[5]:.1f} |")  # fmt: skip
    lines += ["", "| transport | push p50 / pull p50 (target <= 0.33) | native: push p50 / pull p50 "
              "| push GiB/s / none GiB/s (target >= 0.7) |", "| --- | --- | --- | --- |"]  # fmt: skip
    for t in transports:
        try:
            lat = (
                by[(t, "push", "acks_all_latency_us_p50", None)]
                / by[(t, "pull", "acks_all_latency_us_p50", None)]
            )
            native = (
                by[(t, "push", "native_acks_all_latency_us_p50", None)]
                / by[(t, "pull", "native_acks_all_latency_us_p50", None)]
            )
            bw = (
                by[(t, "push", "replicated_produce_gib_s", None)]
                / by[(t, "none", "replicated_produce_gib_s", None)]
            )
        except KeyError:
            continue
        lines.append(f"| {t} | {lat:.2f} | {native:.2f} | {bw:.2f} |")
    return "\n".join(lines + batching_table(rows)) + "\n"


def batching_table(rows: list[dict]) -> list[str]:
    """The batching curve's rows, per transport and offered rate."""
    by = {(r["transport"], r.get("rate"), r["metric"], r.get("batch_max_bytes")): r["value"]
          for r in rows if r.get("batch_max_bytes") is not None}  # fmt: skip
    lines = ["", "Batching: 64-byte entries (one batch each) offered at a fixed rate to an "
             "in-process link; `replica.push.batch.max.bytes`, 0 = one batch per write:", "",
             "| transport | offered entries/s | batch max bytes | entry latency p50 us | p99 us "
             "| goodput MiB/s | entries per write |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    keys = ("batching_latency_us_p50", "batching_latency_us_p99", "batching_goodput_mib_s",
            "batching_entries_per_write")  # fmt: skip
    for t in sorted({k[0] for k in by}):
        for rate in RATES:
            for b in BATCH_MAX:
                v = [by.get((t, rate, k, b)) for k in keys]
                if None not in v:
                    lines.append(f"| {t} | {rate:,} | {b} | {v[0]:.0f} | {v[1]:.0f} "
                                 f"| {v[2]:.2f} | {v[3]:.1f} |")  # fmt: skip
    return lines


def plot(rows: list[dict], path: Path) -> None:
    """Entry latency (left) and goodput (right) against batch.max, per transport and rate."""
    from bench.plots import _pyplot

    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    colors = {"shm": "tab:blue", "tcp": "tab:orange"}
    for t in sorted({r["transport"] for r in rows if r.get("batch_max_bytes") is not None}):
        for rate, style in zip(RATES, ("o-", "s--"), strict=False):
            pts = {(r["batch_max_bytes"], r["metric"]): r["value"] for r in rows
                   if r["transport"] == t and r.get("rate") == rate}  # fmt: skip
            xs = [b for b in BATCH_MAX if (b, "batching_latency_us_p50") in pts]
            if not xs:
                continue
            xplot = [max(b, 64) for b in xs]  # 0 (no coalescing) drawn at 64
            label = f"{t}, {rate:,}/s"
            ax.plot(xplot, [pts[(b, "batching_latency_us_p50")] for b in xs], style,
                    color=colors.get(t), label=label)  # fmt: skip
            ax2.plot(xplot, [pts[(b, "batching_goodput_mib_s")] for b in xs], style,
                     color=colors.get(t), label=label)  # fmt: skip
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xlabel("replica.push.batch.max.bytes (64 = no coalescing)")
        a.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("entry latency p50, us (log)")
    ax2.set_ylabel("goodput, MiB/s of 64-byte entries")
    fig.suptitle("Push replication: batching 64-byte entries (offered entries a second)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

"""Log cleaner benchmark: how fast the cleaner cleans, what it costs produce latency meanwhile, and
how fast a broker with many offset commits starts once `__consumer_offsets` is compacted.

1. Throughput (in-process, one cleaner, Kafka's default 128 MiB offset map): a compacted log of
   `--mb` MB of keyed records (`--keys` distinct keys) in three shapes - one-record batches (what
   `__consumer_offsets` holds), 100-record plain batches, 100-record lz4 batches - is built with
   the store API, then one cleaning round runs on a fresh copy: MB of log read per second (the
   whole round, and its offset-map pass), records in and out. `--rounds` copies per shape,
   interleaved.
2. Produce latency while cleaning: `rdmalog serve` on a data dir holding `--backlog` compacted
   partitions of `--mb` MB each, all dirty; confluent-kafka produces one 100-byte record at a time
   (acks=1, linger.ms=0) to another topic for `--seconds` s (bench/kafka_protocol.py's
   produce_latency step) and reports p50/p99/p99.9. Modes: `off` (log.cleaner.enable=false),
   `on` (the cleaner cleans the backlog meanwhile), `throttled` (on, with
   log.cleaner.io.max.bytes.per.second=`--throttle`). Modes interleave: off, on, throttled, off, ...
   The broker's log says when each clean ran; the report gives how much of the window it covered.
3. Start-up after `--commits` offset commits (one group, `offsets.topic.num.partitions`
   partitions): seconds from exec to answering Metadata (groups are loaded before that) for a
   data dir that took a dozen commits, the many commits uncompacted (cleaner off), and the same
   after the cleaner ran.

Usage: python bench/compaction.py [--mb 100] [--keys 50000] [--rounds 2] [--backlog 2]
                                  [--seconds 15] [--throttle 20e6] [--commits 1000000]
                                  [--parts throughput,latency,startup] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from brokers import Broker  # noqa: E402
from docs_section import replace_section  # noqa: E402
from kafka_protocol import machine, run_step  # noqa: E402

SECTION = "## Log compaction: cleaner throughput, produce latency, start-up"
SHAPES = ("one-record batches", "100-record batches", "100-record lz4 batches")
MB = 1 << 20


def store_config(d: Path, **extra: str):
    from rdmalog.config import BrokerConfig

    return BrokerConfig.from_sources(None, {"log.dirs": str(d), **extra})


def build_log(d: Path, shape: str, mb: int, keys: int, topic: str = "c", partitions: int = 1):
    """A data dir with a compacted topic of `mb` MB of keyed records per partition, all dirty."""
    from rdmalog.store.compression import Codec
    from rdmalog.store.log_manager import Store
    from rdmalog.store.records import Record, build_batch

    st = Store(d, store_config(d)).open(start_maintenance=False)
    configs = {"cleanup.policy": "compact", "segment.bytes": str(64 * MB)}
    t = st.create_topic(topic, partitions, configs)
    rnd = random.Random(1)
    now = int(time.time() * 1000)
    for plog in t.partitions:
        total = 0
        while total < mb * MB:
            if shape == SHAPES[0]:
                recs = [
                    Record(b"key-%08d" % rnd.randrange(keys), rnd.randbytes(100), timestamp=now)
                ]
                codec = Codec.NONE
            else:
                recs = [
                    Record(b"key-%08d" % rnd.randrange(keys), b"value-%06d " % i * 8, timestamp=now)
                    for i in range(100)
                ]
                codec = Codec.LZ4 if "lz4" in shape else Codec.NONE
            b = build_batch(recs, compression=codec, now_ms=now)
            plog.append(b)
            total += len(b)
        plog.roll()
    st.close()


def clean_round(src: Path, work: Path) -> dict[str, Any]:
    """One cleaning round of the log in `src` (copied to `work` first), on this thread."""
    from rdmalog.store.cleaner_manager import cleanable_offsets
    from rdmalog.store.log_manager import Store

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    st = Store(work, store_config(work)).open(start_maintenance=False)
    plog = st.partition("c", 0)
    cleaner = st.cleaner._new_cleaner()
    first_dirty, uncleanable, _ = cleanable_offsets(plog, None, 0)
    os.sync()  # the copy's dirty pages would be written by the round's first fsync
    t0, cpu0 = time.perf_counter(), time.thread_time()
    _, stats = cleaner.clean(plog, first_dirty, uncleanable, int(time.time() * 1000))
    elapsed, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    st.close()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "mb": round(stats.bytes_read / MB, 1),
        "s": round(elapsed, 2),
        "mb_s": round(stats.bytes_read / MB / elapsed, 1),
        "cpu_s": round(cpu, 2),
        "mb_per_cpu_s": round(stats.bytes_read / MB / max(cpu, 1e-9), 1),
        "records_per_cpu_s": round(stats.messages_read / max(cpu, 1e-9)),
        "map_mb_s": round(stats.map_bytes_read / MB / max(stats.map_done - stats.start, 1e-9), 1),
        "records_in": stats.messages_read,
        "records_out": stats.messages_written,
        "out_mb": round(stats.bytes_written / MB, 2),
    }


def bench_throughput(args, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    sources = {}
    for shape in SHAPES:
        sources[shape] = tmp / f"src-{SHAPES.index(shape)}"
        t0 = time.perf_counter()
        build_log(sources[shape], shape, args.mb, args.keys)
        print(f"built {shape}: {time.perf_counter() - t0:.0f} s", flush=True)
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SHAPES}
    for r in range(args.rounds):
        for shape in SHAPES:
            res = clean_round(sources[shape], tmp / "work")
            out[shape].append(res)
            print(f"round {r} {shape}: {res}", flush=True)
    return out


_CLEANED = re.compile(r"cleaned log (\S+) .*?processed in ([0-9.]+) s")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(cleaning log|cleaned log)", re.M)


def cleaning_in(log_text: str, start: float, end: float) -> float:
    """Seconds of [start, end] (wall clock) during which a cleaning round ran, from the broker's
    'cleaning log' / 'cleaned log' lines (a round still running at the end counts to the end)."""
    busy, began = 0.0, None
    for stamp, what in _STAMP.findall(log_text):
        t = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:]) / 1000
        if what == "cleaning log":
            began = t
        elif began is not None:
            busy += max(0.0, min(t, end) - max(began, start))
            began = None
    if began is not None:
        busy += max(0.0, end - max(began, start))
    return busy


def bench_latency(args, tmp: Path) -> list[dict[str, Any]]:
    src = tmp / "backlog"
    t0 = time.perf_counter()
    build_log(src, SHAPES[1], args.mb, args.keys, topic="backlog", partitions=args.backlog)
    print(f"built the backlog: {time.perf_counter() - t0:.0f} s", flush=True)
    modes = {
        "off": {"log.cleaner.enable": "false"},
        "on": {"log.cleaner.backoff.ms": "100"},
        "throttled": {
            "log.cleaner.backoff.ms": "100",
            "log.cleaner.io.max.bytes.per.second": str(args.throttle),
        },
    }
    results = []
    for r in range(args.rounds):
        for mode, overrides in modes.items():
            broker = Broker("rdmalog")
            broker.workdir = Path(tempfile.mkdtemp(prefix="bench-compaction-", dir=tmp))
            shutil.copytree(src, broker.workdir / "data")
            cmd = broker.command()
            for k, v in overrides.items():
                cmd += ["--override", f"{k}={v}"]
            broker.command = lambda cmd=cmd: cmd  # type: ignore[method-assign]
            broker.start()
            from kafka_protocol import create_topics

            create_topics(broker.bootstrap, ["lat"], 1)
            window_start = time.time()
            res = run_step(
                "produce_latency",
                {
                    "bootstrap": broker.bootstrap,
                    "topic": "lat",
                    "records": 10**9,
                    "time_limit": args.seconds,
                    "broker_pid": broker.pid,
                },
                args.seconds + 120,
            )
            window_end = time.time()
            broker.stop(keep=True)
            text = broker.log_path.read_text(errors="replace")
            res.update(
                mode=mode,
                round=r,
                cleans=len(_CLEANED.findall(text)),
                clean_s=round(cleaning_in(text, window_start, window_end), 1),
                window_s=round(window_end - window_start, 1),
            )
            print(f"round {r} {mode}: {json.dumps(res)[:400]}", flush=True)
            results.append(res)
            shutil.rmtree(broker.workdir, ignore_errors=True)
    return results


def build_commits(d: Path, commits: int, partitions: int) -> None:
    """A data dir whose __consumer_offsets holds `commits` offset commits of one group."""
    from gateway.groups.offsets_topic import OffsetsTopic
    from gateway.groups.schema import OffsetKey, OffsetValue, encode_key, encode_offset_value
    from rdmalog.store.log_manager import Store

    st = Store(d, store_config(d)).open(start_maintenance=False)
    topic = OffsetsTopic(st, partitions, 100 * MB)
    now = int(time.time() * 1000)
    for i in range(commits):
        key = encode_key(OffsetKey("bench-group", "events", i % 12))
        value = encode_offset_value(OffsetValue(i, -1, "", now, -1))
        topic.append("bench-group", [(key, value)], now)
    for plog in st.topic("__consumer_offsets").partitions:
        plog.roll()  # all of it sealed, as a quiet partition's head is after segment.ms
    st.close()


def start_time(data: Path, overrides: dict[str, str]) -> tuple[float, Broker]:
    broker = Broker("rdmalog")
    broker.workdir = data.parent
    cmd = broker.command()
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    broker.command = lambda: cmd  # type: ignore[method-assign]
    t0 = time.monotonic()
    broker.start(timeout=600)
    return time.monotonic() - t0, broker


def bench_startup(args, tmp: Path) -> list[dict[str, Any]]:
    base = {"offsets.topic.num.partitions": str(args.offsets_partitions)}
    src = tmp / "commits" / "data"
    t0 = time.perf_counter()
    build_commits(src, args.commits, args.offsets_partitions)
    raw_mb = sum(p.stat().st_size for p in src.rglob("*.log")) / MB
    print(f"built {args.commits} commits ({raw_mb:.0f} MB): {time.perf_counter() - t0:.0f} s")
    compacted = tmp / "compacted" / "data"
    shutil.copytree(src, compacted)
    # let the broker's cleaner compact them once (time-rolled heads so all of it is cleanable)
    _, b = start_time(compacted, {**base, "log.cleaner.backoff.ms": "100"})
    from rdmalog.store.cleaner_manager import CHECKPOINT_FILE

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if len(_CLEANED.findall(b.log_path.read_text(errors="replace"))) >= 1:
            break
        time.sleep(0.5)
    time.sleep(2)
    b.stop(keep=True)
    small_mb = sum(p.stat().st_size for p in compacted.rglob("*.log")) / MB
    print(f"compacted to {small_mb:.2f} MB ({(compacted / CHECKPOINT_FILE).exists()})")
    few = tmp / "few" / "data"
    build_commits(few, 12, args.offsets_partitions)
    results = []
    for r in range(args.rounds):
        for name, data, extra in (
            ("a few commits", few, {"log.cleaner.enable": "false"}),
            ("uncompacted", src, {"log.cleaner.enable": "false"}),
            ("compacted", compacted, {"log.cleaner.enable": "false"}),
        ):
            s, b = start_time(data, {**base, **extra})
            b.stop(keep=True)
            mb = sum(p.stat().st_size for p in data.rglob("*.log")) / MB
            results.append(
                {"data": name, "round": r, "start_s": round(s, 2), "log_mb": round(mb, 2)}
            )
            print(results[-1], flush=True)
    return results


def report(args, through, latency, startup) -> str:
    m = machine()
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `python "
        f"bench/compaction.py {' '.join(sys.argv[1:])}` on a shared machine ({m['nproc']} cores, "
        f"{m['cpu']}; {m['uptime']}): other engineers' tests and benchmarks ran meanwhile, so "
        "absolute numbers move; runs interleave so drift hits every mode alike.",
        "",
    ]
    if through:
        lines += [
            f"**Cleaner throughput**: one round over {args.mb} MB of keyed records, "
            f"{args.keys} distinct keys, one cleaner thread, 128 MiB offset map (Kafka's default "
            "`log.cleaner.dedupe.buffer.size`), MB of log read per second per round:",
            "",
            "| log | round MB/s (wall) | map pass MB/s | MB per CPU-s | records per CPU-s "
            "| records in -> out | MB out |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for shape, runs in through.items():

            def col(k: str, runs: list = runs) -> str:
                return ", ".join(str(r[k]) for r in runs)

            r0 = runs[0]
            lines.append(
                f"| {shape} | {col('mb_s')} | {col('map_mb_s')} | {col('mb_per_cpu_s')} "
                f"| {col('records_per_cpu_s')} | {r0['records_in']} -> {r0['records_out']} "
                f"| {r0['out_mb']} |"
            )
        lines.append("")
    if latency:
        lines += [
            f"**Produce latency while the cleaner runs**: {args.backlog} dirty compacted "
            f"partitions of {args.mb} MB (100-record batches) in the data dir; one record at a "
            f"time (acks=1) to another topic for {args.seconds} s; ms:",
            "",
            "| mode | round | p50 | p99 | p99.9 | records | cleaning during the window |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in latency:
            if "error" in r:
                lines.append(f"| {r['mode']} | {r['round']} | error: {r['error'][:80]} | | | | |")
                continue
            lines.append(
                f"| {r['mode']} | {r['round']} | {r['p50_ms']} | {r['p99_ms']} | {r['p999_ms']} "
                f"| {r['records']} | {r['clean_s']} s of {r['window_s']} s "
                f"({r['cleans']} rounds ended) |"
            )
        lines.append("")
    if startup:
        lines += [
            f"**Start-up after {args.commits} offset commits** (one group, 12 partitions, "
            f"`offsets.topic.num.partitions={args.offsets_partitions}`): seconds from exec to "
            "answering Metadata (the group coordinator loads `__consumer_offsets` first):",
            "",
            "| data dir | start s | __consumer_offsets and other logs, MB |",
            "| --- | --- | --- |",
        ]
        for r in startup:
            lines.append(f"| {r['data']} (round {r['round']}) | {r['start_s']} | {r['log_mb']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--backlog", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--throttle", type=float, default=20e6)
    ap.add_argument("--commits", type=int, default=1_000_000)
    ap.add_argument("--offsets-partitions", type=int, default=50)
    ap.add_argument("--parts", default="throughput,latency,startup")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        through = bench_throughput(args, tmp) if "throughput" in parts else {}
        latency = bench_latency(args, tmp) if "latency" in parts else []
        startup = bench_startup(args, tmp) if "startup" in parts else []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps({"throughput": through, "latency": latency, "startup": startup})
        )
    body = report(args, through, latency, startup)
    print(body)
    if args.out:
        replace_section(args.out, SECTION, body)


if __name__ == "__main__":
    main()

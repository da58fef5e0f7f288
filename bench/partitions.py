"""Partitions sweep: rdmalog vs Tansu as the partitions of one topic grow (1 to 3000 by default).

For each partition count and broker, a fresh broker (rdmalog on a temp data dir, Tansu memory://)
gets one topic of that many partitions, then, each step in its own client process:

1. CreateTopics: seconds until the answer, then the broker's RSS and open descriptors;
2. produce: `--rounds` rounds of `--records` 100-byte records with random keys from confluent-kafka
   (`linger.ms=5`), records/s and broker CPU-s per million records per round (round 1 is the one
   a freshly created topic gets), and the Produce requests librdkafka sent (its statistics):
   records per request and broker CPU µs per request;
3. consume: everything back from offset 0 (assign() of every partition), records/s and CPU-s/M;
4. restart (rdmalog; Tansu with memory:// has nothing to reload): seconds from SIGTERM to exit and
   from exec to answering Metadata, and descriptors and RSS after the restart.

Brokers alternate at every partition count (rdmalog, Tansu, rdmalog, ...) so both see the same
machine drift; `baseline` is rdmalog of another commit (RDMALOG_BASELINE_BIN, see brokers.py), for
before/after comparisons in one run. Usage:

    python bench/partitions.py [--partitions 1,10,100,1000,3000] [--records 300000] [--rounds 2]
                               [--brokers rdmalog,tansu[,baseline]] [--out docs/performance.md]
                               [--plot docs/partitions_cpu.png]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Broker, proc_rss_mb  # noqa: E402
from docs_section import replace_section  # noqa: E402
from kafka_protocol import Meter, machine, payload, settle  # noqa: E402

SECTION = "## Many partitions: rdmalog vs Tansu"
KEYS = 65536  # distinct random keys the producer cycles through
STEP_TIME_LIMIT = 120.0
STATS_INTERVAL_MS = 500


def open_fds(pid: int) -> int | None:
    """Descriptors the process has open (/proc/PID/fd)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


# --------------------------------------------------------------------------------------------------
# steps (each runs in its own client process; returns a dict)


def step_create(p: dict[str, Any]) -> dict[str, Any]:
    """CreateTopics of one topic with p['partitions'] partitions; seconds until the answer."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": p["bootstrap"]})
    admin.list_topics(timeout=10)  # connected before the clock starts
    t0 = time.perf_counter()
    fut = admin.create_topics(
        [NewTopic(p["topic"], num_partitions=p["partitions"], replication_factor=1)],
        operation_timeout=60,
        request_timeout=120,
    )[p["topic"]]
    fut.result(150)
    answered = time.perf_counter() - t0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every partition in metadata (with a leader)
        md = admin.list_topics(p["topic"], timeout=10)
        t = md.topics.get(p["topic"])
        if t is not None and len(t.partitions) == p["partitions"] and t.error is None:
            break
        time.sleep(0.05)
    else:
        return {"create_s": round(answered, 3), "error": "partitions not all in metadata"}
    return {"create_s": round(answered, 3), "visible_s": round(time.perf_counter() - t0, 3)}


def step_produce(p: dict[str, Any]) -> dict[str, Any]:
    """Produce p['records'] 100-byte records with random keys (confluent-kafka, linger.ms=5)."""
    import random

    from confluent_kafka import Producer

    errs: list[str] = []
    failed: list[str] = []

    def on_error(err: Any) -> None:
        if len(errs) < 20:
            errs.append(str(err))

    def on_failure(err: Any, msg: Any) -> None:
        if len(failed) < 20:
            failed.append(str(err))

    stats: list[str] = []
    prod = Producer(
        {
            "bootstrap.servers": p["bootstrap"],
            "linger.ms": 5,
            "error_cb": on_error,
            "on_delivery": on_failure,
            "delivery.report.only.error": True,
            # librdkafka's own count of the Produce requests it sent (read once, after the round)
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "stats_cb": stats.append,
        }
    )
    rng = random.Random(p.get("seed", 1))
    keys = [rng.randbytes(8) for _ in range(KEYS)]
    value = payload()
    topic, n = p["topic"], p["records"]
    prod.list_topics(topic, timeout=10)  # metadata and connection before the clock starts
    sent = 0
    produce, poll = prod.produce, prod.poll
    with Meter(p["broker_pid"]) as m:
        deadline = time.perf_counter() + p["time_limit"]
        while sent < n:
            try:
                produce(topic, value, keys[sent % KEYS])
                sent += 1
            except BufferError:
                poll(0.005)
                if time.perf_counter() > deadline:
                    break
        left = prod.flush(max(1.0, deadline - time.perf_counter() + 10))
    res = m.result(sent, sent * len(value))
    res.update(produce_requests(prod, stats, res["broker_cpu_s"], sent))
    res.update(undelivered=left, errors=errs, failed=failed)
    if left or errs or failed:
        res["error"] = f"{left} undelivered, {len(failed)} failed: {(failed + errs)[:2]}"
    return res


def produce_requests(prod: Any, stats: list[str], broker_cpu_s: float, sent: int) -> dict:
    """The Produce requests the producer sent (from a statistics report after its flush), records
    per request and broker CPU µs per request: what CPU per record is made of at many partitions,
    where librdkafka sends one partition's batch per request and picks the batch sizes."""
    stats.clear()
    deadline = time.monotonic() + 3 * STATS_INTERVAL_MS / 1000
    while not stats and time.monotonic() < deadline:
        prod.poll(0.05)
    if not stats:
        return {}
    brokers = json.loads(stats[-1])["brokers"].values()
    n = sum(b["req"].get("Produce", 0) for b in brokers if b.get("nodeid", -1) >= 0)
    if not n:
        return {}
    return {
        "produce_requests": n,
        "records_per_request": round(sent / n, 1),
        "broker_cpu_us_per_request": round(broker_cpu_s / n * 1e6, 1),
    }


def step_consume(p: dict[str, Any]) -> dict[str, Any]:
    """Read p['records'] records back from offset 0 of every partition (assign(), no commits)."""
    from confluent_kafka import Consumer, TopicPartition

    errs: list[str] = []
    c = Consumer(
        {
            "bootstrap.servers": p["bootstrap"],
            "group.id": "bench-partitions",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            "error_cb": lambda e: errs.append(str(e)) if len(errs) < 20 else None,
        }
    )
    topic, want = p["topic"], p["records"]
    parts = range(p["partitions"])
    got = nbytes = 0
    with Meter(p["broker_pid"]) as m:
        deadline = time.perf_counter() + p["time_limit"]
        c.assign([TopicPartition(topic, q, 0) for q in parts])
        while got < want and time.perf_counter() < deadline:
            for msg in c.consume(10_000, 1.0):
                if msg.error() is None:
                    got += 1
                    nbytes += len(msg.value())
    c.close()
    res = m.result(got, nbytes)
    res.update(wanted=want, errors=errs)
    if got < want:
        res["error"] = f"read {got} of {want} records in {p['time_limit']}s"
    return res


STEPS = {"create": step_create, "produce": step_produce, "consume": step_consume}


def run_step(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Run one step in a fresh client process; return its JSON result (or an error)."""
    cmd = [sys.executable, __file__, "--step", name, "--params", json.dumps(params)]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=params.get("time_limit", 60) * 2 + 120
        )
    except subprocess.TimeoutExpired:
        return {"error": "step timed out"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-600:]}"}
    return json.loads(lines[-1])


# --------------------------------------------------------------------------------------------------
# one broker, one partition count


def restart(broker: Broker) -> dict[str, Any]:
    """Stop the broker cleanly and start it on the same data dir: seconds each took."""
    assert broker.proc is not None
    t0 = time.perf_counter()
    broker.proc.send_signal(signal.SIGTERM)
    broker.proc.wait(300)
    stopped = time.perf_counter() - t0
    t0 = time.perf_counter()
    broker.start(timeout=300)
    return {"stop_s": round(stopped, 2), "start_s": round(time.perf_counter() - t0, 2)}


def measure(name: str, partitions: int, records: int, rounds: int) -> dict[str, Any]:
    """Every step of the sweep for one broker and partition count, on a fresh broker."""
    broker = Broker(name)
    row: dict[str, Any] = {"broker": name, "partitions": partitions}
    topic = f"sweep-{partitions}"
    try:
        broker.start()
        settle(broker.pid)
        row["idle_fds"], row["idle_rss_mb"] = open_fds(broker.pid), round(proc_rss_mb(broker.pid))
        base = {"bootstrap": broker.bootstrap, "topic": topic, "partitions": partitions}
        base.update(broker_pid=broker.pid, time_limit=STEP_TIME_LIMIT)
        created = run_step("create", base)
        row.update(created)
        if "error" in created:
            return row
        settle(broker.pid)
        row["created_fds"] = open_fds(broker.pid)
        row["created_rss_mb"] = round(proc_rss_mb(broker.pid))
        row["produce"] = []
        for r in range(rounds):
            settle(broker.pid)
            res = run_step("produce", {**base, "records": records, "seed": r + 1})
            row["produce"].append(res)
            if "error" in res:
                return row
        settle(broker.pid)
        row["consume"] = run_step("consume", {**base, "records": records * rounds})
        settle(broker.pid)
        row["fds"], row["rss_mb"] = open_fds(broker.pid), round(proc_rss_mb(broker.pid))
        if name == "rdmalog":
            row["restart"] = restart(broker)
            settle(broker.pid)
            row["restart"].update(fds=open_fds(broker.pid), rss_mb=round(proc_rss_mb(broker.pid)))
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {e}"[-600:]
        row["broker_log"] = broker.tail(600)
    finally:
        broker.stop(keep=bool(os.environ.get("BENCH_KEEP")))
    return row


# --------------------------------------------------------------------------------------------------
# report


def _num(x: Any, fmt: str = "{:,}") -> str:
    return "–" if x is None else fmt.format(x)


def _rate(res: dict[str, Any] | None) -> str:
    if not res:
        return "–"
    if "error" in res and not res.get("records"):
        return "error: " + str(res["error"])[:60].replace("|", "/")
    warn = " (!)" if "error" in res else ""
    cell = f"{res['records_per_s'] / 1000:,.1f} k/s, {res['broker_cpu_s_per_M']}{warn}"
    if res.get("produce_requests"):  # produce rounds: requests, records and broker µs per request
        cell += (
            f" ({res['produce_requests']:,} req of {res['records_per_request']:g}, "
            f"{res['broker_cpu_us_per_request']:g} µs)"
        )
    return cell


def table(rows: list[dict[str, Any]], rounds: int) -> str:
    """Markdown table, one row per broker and partition count."""
    head = ["partitions", "broker", "create s"]
    head += [f"produce round {r + 1}: rec/s, CPU-s/M (requests of rec, µs)" for r in range(rounds)]
    head += ["consume: rec/s, CPU-s/M", "fds idle / created / loaded", "RSS MB created / loaded"]
    head += ["restart: stop s, start s"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        if "error" in r and "produce" not in r:
            out.append(f"| {r['partitions']} | {r['broker']} | error: {r['error'][:120]} |")
            continue
        prod = r.get("produce", [])
        cells = [str(r["partitions"]), r["broker"], _num(r.get("create_s"), "{:.2f}")]
        cells += [_rate(prod[i] if i < len(prod) else None) for i in range(rounds)]
        cells.append(_rate(r.get("consume")))
        cells.append(
            f"{_num(r.get('idle_fds'))} / {_num(r.get('created_fds'))} / {_num(r.get('fds'))}"
        )
        cells.append(f"{_num(r.get('created_rss_mb'))} / {_num(r.get('rss_mb'))}")
        rs = r.get("restart")
        cells.append(f"{rs['stop_s']}, {rs['start_s']}" if rs else "–")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Broker CPU-s per million records against partitions (log x), produce and consume."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    styles = {"rdmalog": "tab:blue", "baseline": "tab:gray", "tansu": "tab:orange"}
    for broker, color in styles.items():
        mine = sorted((r for r in rows if r["broker"] == broker), key=lambda r: r["partitions"])
        for what, marker, style in (("produce", "o", "-"), ("consume", "s", "--")):
            xs, ys = [], []
            for r in mine:
                res = r.get(what)
                res = res[0] if isinstance(res, list) and res else res
                if isinstance(res, dict) and res.get("broker_cpu_s_per_M") is not None:
                    xs.append(r["partitions"])
                    ys.append(res["broker_cpu_s_per_M"])
            if xs:
                label = f"{broker} {what}" + (" (round 1)" if what == "produce" else "")
                ax.plot(xs, ys, style, marker=marker, color=color, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("partitions of the topic")
    ax.set_ylabel("broker CPU-s per million records")
    ax.set_title("Broker CPU per record vs partitions (100-byte records)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--partitions", default="1,10,100,1000,3000")
    ap.add_argument("--records", type=int, default=300_000, help="records per produce round")
    ap.add_argument("--rounds", type=int, default=2, help="produce rounds per topic")
    ap.add_argument("--brokers", default="rdmalog,tansu")
    ap.add_argument("--out", type=Path, help="markdown file to write the section to")
    ap.add_argument("--plot", type=Path, help="PNG of CPU per record against partitions")
    ap.add_argument("--json", type=Path, help="write the raw rows here")
    ap.add_argument(
        "--from-json", type=Path, help="report the rows a --json run wrote instead of measuring"
    )
    ap.add_argument("--notes", default="", help="text, or a file of text, for the section")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        print(json.dumps(STEPS[args.step](json.loads(args.params))), flush=True)
        return

    argv = " ".join(a if " " not in a else repr(a) for a in sys.argv[1:])
    counts = [int(x) for x in args.partitions.split(",") if x.strip()]
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    started = dt.datetime.now(dt.UTC)
    env = machine()
    print(json.dumps({"run": started.isoformat(timespec="seconds"), **env}), flush=True)
    rows = []
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        rows, env, started = (
            saved["rows"],
            saved["machine"],
            dt.datetime.fromisoformat(saved["run"]),
        )
        argv = saved.get("argv", argv)
        brokers = list(dict.fromkeys(r["broker"] for r in rows))
    for n in [] if args.from_json else counts:
        for b in brokers:
            row = measure(b, n, args.records, args.rounds)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if not args.from_json:
        env["uptime_after"] = subprocess.run(
            ["uptime"], capture_output=True, text=True
        ).stdout.strip()
    if args.json:
        saved = {"run": started.isoformat(), "machine": env, "rows": rows, "argv": argv}
        args.json.write_text(json.dumps(saved, indent=1))
    md = table(rows, args.rounds)
    print()
    print(md)
    if args.plot:
        plot(rows, args.plot)
    if args.out:
        env_after = env["uptime_after"]
        versions = ", ".join(f"{b}: {Broker(b).version()}" for b in brokers)
        lines = [
            f"Command: `python bench/partitions.py {argv}`  ",
            f"Date: {started.strftime('%Y-%m-%d %H:%M UTC')}  ",
            f"Machine: {env['nproc']} CPUs, {env['cpu']}, Linux {env['kernel']}, "
            f"Python {env['python']}  ",
            f"Load before: `{env['uptime']}`  ",
            f"Load after: `{env_after}`  ",
            f"Client: confluent-kafka {env['confluent_kafka']}; brokers: {versions}",
            "",
            "One topic per row on a fresh broker; each produce round sends "
            f"{args.records:,} 100-byte records with random keys (confluent-kafka, `linger.ms=5`, "
            "otherwise defaults), the consume step reads them all back from offset 0 "
            "(`fetch.queue.backoff.ms=10`). Cells: records/s and broker CPU-s (utime+stime from "
            "/proc) per million records. fds: the broker's open descriptors before the topic "
            "exists, after it was created, and after the records were produced and consumed. "
            "Restart: SIGTERM to exit, and exec to answering Metadata (rdmalog; Tansu runs with "
            "memory:// storage).",
            "",
            table(rows, args.rounds),
        ]
        if args.plot:
            rel = os.path.relpath(args.plot.resolve(), args.out.resolve().parent)
            lines += ["", f"![broker CPU per record against partitions]({rel})"]
        if args.notes:
            notes = Path(args.notes)
            lines += ["", notes.read_text().strip() if notes.is_file() else args.notes]
        replace_section(args.out, SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()

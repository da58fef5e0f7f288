"""KafkaDirect 5.4 streaming benchmark (OSPBench): Spark event delay per source and workload.

For each workload (constant, burst) and each available source (`rdmalog-shm`, `rdmalog-tcp`,
`rdmalog-kafka`, `kafka`) it starts a fresh broker (`rdmalog serve` with `rdma.transport`,
temp data dir, free ports), creates `ndwflow`/`ndwspeed` (LogAppendTime), starts the Spark
job (bench/ospbench/job.py) in its own process, warms it up, runs the generator for the bounded
duration, drains, and reads the per-event delays. Prints one JSON line per run, then a markdown
table; writes a PNG of delay over time and (unless --no-docs) the section "Spark streaming event
delay (KafkaDirect 5.4)" of docs/performance.md.

    python bench/ospbench/run.py --quick                 # ~15 s per run
    python bench/ospbench/run.py --duration 45 --rate 400
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # workload, and bench/brokers

import workload  # noqa: E402
from brokers import free_port, port_open  # noqa: E402

PY = sys.executable
SECTION = "## Spark streaming event delay (KafkaDirect 5.4)"
SOURCE_NAMES = {
    "rdmalog-shm": "rdmalog source, native shm",
    "rdmalog-tcp": "rdmalog source, native tcp",
    "rdmalog-kafka": "rdmalog source, Kafka protocol",
    "kafka": "spark-sql-kafka",
}


def log(msg: str) -> None:
    """Progress on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Broker:
    """A real `rdmalog serve` with the native datapaths on `transport` (or none), on free ports."""

    def __init__(self, transport: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="ospbench-broker-")
        port, control_port = free_port(), free_port()
        cmd = [str(Path(PY).parent / "rdmalog"), "serve", "--listen", f"127.0.0.1:{port}"]
        cmd += ["--data-dir", str(Path(self.dir) / "data")]
        overrides = {"offsets.topic.num.partitions": "1", "auto.create.topics.enable": "false"}
        if transport != "none":
            overrides |= {"rdma.transport": transport, "rdma.control.port": str(control_port)}
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        self.log_path = Path(self.dir) / "broker.log"
        self.proc = subprocess.Popen(cmd, stderr=open(self.log_path, "wb"), cwd=ROOT)  # noqa: SIM115
        self.bootstrap = f"127.0.0.1:{port}"
        self.control: str | None = f"127.0.0.1:{control_port}" if transport != "none" else None
        self.rdma_error: str | None = None
        deadline = time.monotonic() + 60
        while not port_open(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.1)

    def close(self) -> None:
        """SIGTERM (a clean stop), wait, clean up; keeps the log when the broker logged an error."""
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if b"Traceback" in self.log_path.read_bytes():
            log(f"broker logged an error: {self.log_path}")
            return
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(path: Path, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    """Wait until `path` exists (False on timeout or when `proc` exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def percentile(values, q: float) -> float:
    """Linear-interpolated percentile of a sorted-able sequence."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype="float64"), q))


def one_run(source: str, pattern: str, args: argparse.Namespace, results: Path) -> dict:
    """Broker + job + generator for one (source, workload); returns the run's summary."""
    from job import unavailable

    rundir = results / f"{source}-{pattern}"
    shutil.rmtree(rundir, ignore_errors=True)
    rundir.mkdir(parents=True)
    transport = "tcp" if source.startswith("rdmalog-tcp") else "shm"
    broker = Broker(transport)
    job = None
    try:
        reason = unavailable(source, broker.control)
        if reason and broker.rdma_error:
            reason = f"{reason}: {broker.rdma_error}"
        if reason:
            return {"source": source, "workload": pattern, "skipped": reason}
        workload.create_topics(broker.bootstrap)
        cmd = [PY, str(HERE / "job.py"), "--source", source, "--bootstrap", broker.bootstrap]
        cmd += ["--out", str(rundir), "--trigger-ms", str(args.trigger_ms)]
        cmd += ["--max-seconds", str(args.duration + 300), "--stage", args.stage]
        if broker.control:
            cmd += ["--control", broker.control]
        job = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=open(rundir / "job.out", "wb"),  # noqa: SIM115
            stderr=open(rundir / "job.log", "wb"),  # noqa: SIM115
        )
        if not wait_for(rundir / "started", 240, job):
            raise RuntimeError(f"Spark job did not start; see {rundir}/job.log")
        warm = workload.KafkaSender(broker.bootstrap)
        deadline = time.monotonic() + 180
        while not (rundir / "ready").exists():
            if time.monotonic() > deadline or job.poll() is not None:
                raise RuntimeError(f"Spark job processed no warm-up batch; see {rundir}/job.log")
            for topic in workload.TOPICS:
                warm.send(topic, b"warmup", json.dumps({"warmup": True}).encode())
            warm.tick()
            time.sleep(0.5)
        # a few more warm-up batches so Python workers and codegen are hot on both topics
        for _ in range(int(args.warmup * 10)):
            for topic in workload.TOPICS:
                warm.send(topic, b"warmup", json.dumps({"warmup": True}).encode())
            time.sleep(0.1)
        warm.close()
        time.sleep(1.0)
        log(f"{source} {pattern}: generating for {args.duration:.0f} s at {args.rate:g} msg/s")
        gen_cmd = [PY, str(HERE / "workload.py"), "--bootstrap", broker.bootstrap, "--no-create"]
        gen_cmd += ["--pattern", pattern, "--rate", str(args.rate)]
        gen_cmd += ["--duration", str(args.duration)]
        if args.burst_size is not None:
            gen_cmd += ["--burst-size", str(args.burst_size)]
        gen_cmd += ["--producer", args.producer]
        if args.producer == "native":
            gen_cmd += ["--control", broker.control or "", "--transport", "shm"]
        gen = subprocess.run(
            gen_cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.duration + 120
        )
        if gen.returncode != 0:
            raise RuntimeError(f"generator failed: {gen.stdout} {gen.stderr[-2000:]}")
        produced = json.loads(gen.stdout.strip().splitlines()[-1])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and job.poll() is None:
            seen = (rundir / "progress").read_text() if (rundir / "progress").exists() else "0"
            if int(seen or 0) >= produced["sent"]:
                break
            time.sleep(0.2)
        (rundir / "stop").touch()
        job.wait(180)
        return summarize(source, pattern, rundir, produced)
    finally:
        if job is not None and job.poll() is None:
            job.terminate()
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                job.kill()
        broker.close()


def range_reads(records: int = 400, reads: int = 15) -> list[dict]:
    """What one Spark task's read costs without Spark, per transport.

    Calls the source's read_range() for consecutive ranges of `records` JSON events of `ndwflow`,
    as the tasks of consecutive micro-batches do in one Python worker. The first call creates the
    client; the later ones take it from the source's per-worker pool (native: still assigned, it
    continues where the previous range stopped; Kafka protocol: reassigned to the next range).
    Reports the first call and p50/p95 ms of the `reads` - 1 pooled calls, per transport.
    """
    import statistics

    from rdmalog.spark.options import parse_read
    from rdmalog.spark.transport import read_range

    broker = Broker("shm")
    try:
        workload.create_topics(broker.bootstrap)
        sender = workload.KafkaSender(broker.bootstrap)
        gen = workload.messages(workload.sensors(40))
        for _ in range(records * (reads + 1)):
            topic, key, make = next(gen)
            sender.send(workload.FLOW_TOPIC, key, make())
        sender.close()
        sources = [("rdmalog-kafka", "kafka")]
        if broker.control:
            sources.insert(0, ("rdmalog-shm", "shm"))
        rows = []
        tp = (workload.FLOW_TOPIC, 0)
        for name, transport in sources:
            opts = {"rdmalog.bootstrap": broker.bootstrap, "subscribe": workload.FLOW_TOPIC}
            opts |= {"rdmalog.transport": transport, "rdmalog.control": broker.control or ""}
            conn = parse_read(opts, streaming=True).conn
            times = []
            for i in range(reads):
                t0 = time.perf_counter()
                rng = read_range(conn, tp, i * records, (i + 1) * records, True, 30_000)
                n = sum(1 for _ in rng)
                times.append((time.perf_counter() - t0) * 1000.0)
                assert n == records, (name, n)
            pooled = times[1:]
            rows.append(
                {
                    "step": "range_read",
                    "source": name,
                    "records": records,
                    "reads": reads,
                    "first_ms": round(times[0], 1),
                    "p50_ms": round(statistics.median(pooled), 1),
                    "p95_ms": round(percentile(pooled, 95), 1),
                }
            )
        return rows
    finally:
        _close_pooled_clients()
        broker.close()


def _close_pooled_clients() -> None:
    """Close the clients the source pooled in this process (the range reads ran here)."""
    from rdmalog.spark import kafka_client

    for consumers in kafka_client._POOL.values():
        for c in consumers:
            c.close()
    kafka_client._POOL.clear()
    try:
        from rdmalog.spark import native_client
    except ImportError:
        return
    for c in native_client._POOL.values():
        c.close()
    native_client._POOL.clear()


def summarize(source: str, pattern: str, rundir: Path, produced: dict) -> dict:
    """Delay percentiles of one run from events.parquet."""
    import pandas as pd

    path = rundir / "events.parquet"
    if not path.exists():
        return {"source": source, "workload": pattern, "error": f"no events; see {rundir}"}
    ev = pd.read_parquet(path)
    out = {"source": source, "workload": pattern, "sent": produced["sent"], "events": len(ev)}
    if ev.empty:
        return out | {"error": "the job read no events"}
    delay = ev["read_ms"] - ev["gen_ms"]
    out |= {
        "p50_ms": percentile(delay, 50),
        "p95_ms": percentile(delay, 95),
        "p99_ms": percentile(delay, 99),
        "mean_ms": float(delay.mean()),
        "max_ms": float(delay.max()),
        "append_p50_ms": percentile(ev["read_ms"] - ev["kafka_ms"], 50),
        "done_p50_ms": percentile(ev["done_ms"] - ev["gen_ms"], 50),
        "to_plan_p50_ms": percentile(ev["batch_ms"] - ev["gen_ms"], 50),
        "plan_to_read_p50_ms": percentile(ev["read_ms"] - ev["batch_ms"], 50),
        "batches": int(ev["batch_id"].nunique()),
        "batch_ms": batch_time(rundir),
    }
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def batch_time(rundir: Path) -> float:
    """Median Spark triggerExecution (ms) of the micro-batches that had rows."""
    import pandas as pd

    try:
        p = pd.read_csv(rundir / "progress.csv")
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return float("nan")
    p = p[p["rows"] > 0]
    return float(p["triggerExecution"].median()) if len(p) else float("nan")


def table(rows: list[dict]) -> str:
    """Markdown table of the runs, plus the native/Kafka p50 ratio per workload."""
    head = (
        "| workload | source | events | p50 ms | p95 ms | p99 ms | mean ms | max ms | "
        "p50 generated->batch planned | p50 planned->read | micro-batches | ms per batch |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    )
    lines = []
    for r in rows:
        name = SOURCE_NAMES.get(r["source"], r["source"])
        if "p50_ms" not in r:
            why = r.get("skipped") or r.get("error")
            lines.append(f"| {r['workload']} | {name} | - | not run: {why} ||||||||| ")
            continue
        lines.append(
            f"| {r['workload']} | {name} | {r['events']}/{r['sent']} | {r['p50_ms']:.1f} | "
            f"{r['p95_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_ms']:.1f} | {r['max_ms']:.1f} | "
            f"{r['to_plan_p50_ms']:.1f} | {r['plan_to_read_p50_ms']:.1f} | {r['batches']} | "
            f"{r['batch_ms']:.0f} |"
        )
    ratios = []
    for pattern in sorted({r["workload"] for r in rows}):
        by = {r["source"]: r for r in rows if r["workload"] == pattern and "p50_ms" in r}
        for native, ref in [("rdmalog-shm", "rdmalog-kafka"), ("rdmalog-shm", "kafka")]:
            if native in by and ref in by and by[native]["p50_ms"] > 0:
                ratio = by[ref]["p50_ms"] / by[native]["p50_ms"]
                ratios.append(
                    f"- {pattern}: p50 of {SOURCE_NAMES[ref]} / {SOURCE_NAMES[native]} = "
                    f"{ratio:.2f}x (goal >= 3x; KafkaDirect: 3.3x)"
                )
    return head + "\n".join(lines) + ("\n\n" + "\n".join(ratios) if ratios else "") + "\n"


def reads_table(reads: list[dict]) -> str:
    """Markdown lines for the Spark-free range reads."""
    ok = [r for r in reads if "p50_ms" in r]
    if not ok:
        return ""
    lines = [
        "",
        f"Without Spark: the source's read_range() of {ok[0]['records']} new records per call, "
        f"{ok[0].get('reads', 15)} consecutive ranges as consecutive micro-batch tasks in one "
        "Python worker read them. The first call creates the client; the later ones reuse it "
        "from the source's per-worker pool:",
        "",
        "| source | first call ms | pooled p50 ms | pooled p95 ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in ok:
        name = SOURCE_NAMES.get(r["source"], r["source"])
        first = f"{r['first_ms']:.1f}" if "first_ms" in r else "-"
        lines.append(f"| {name} | {first} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], results: Path, png: Path) -> None:
    """Per workload: delay over time per source (top) and the delay CDF (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    patterns = [p for p in ("constant", "burst") if any(r["workload"] == p for r in rows)]
    fig, axes = plt.subplots(2, len(patterns), figsize=(7 * len(patterns), 8), squeeze=False)
    for col, pattern in enumerate(patterns):
        top, bottom = axes[0][col], axes[1][col]
        for r in rows:
            if r["workload"] != pattern or "p50_ms" not in r:
                continue
            ev = pd.read_parquet(results / f"{r['source']}-{pattern}" / "events.parquet")
            delay = (ev["read_ms"] - ev["gen_ms"]).to_numpy()
            t = ((ev["gen_ms"] - ev["gen_ms"].min()) / 1000.0).to_numpy()
            step = max(1, len(ev) // 4000)  # keep the PNG small: every n-th event over time
            label = f"{SOURCE_NAMES.get(r['source'], r['source'])} (p50 {r['p50_ms']:.0f} ms)"
            top.scatter(t[::step], delay[::step], s=1, alpha=0.5, label=label)
            xs = np.sort(delay)
            bottom.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=label)
        top.set_title(f"{pattern} workload: delay over time")
        top.set_xlabel("event generation time (s)")
        top.set_ylabel("delay: Spark read - generated (ms)")
        top.set_yscale("log")
        top.grid(True, which="both", alpha=0.3)
        bottom.set_title(f"{pattern} workload: delay CDF")
        bottom.set_xlabel("delay (ms)")
        bottom.set_ylabel("fraction of events")
        bottom.grid(True, alpha=0.3)
        bottom.legend(fontsize=8, loc="lower right")
    fig.suptitle("Spark structured streaming event delay (OSPBench, KafkaDirect 5.4)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    plt.close(fig)


ANALYSIS = "### What the numbers say"  # hand-written after a run: kept by write_section


def write_section(md: Path, body: str) -> None:
    """Replace (or append) our section of `md` up to its hand-written analysis subsection (kept,
    to be updated by hand) or the next section; everything else stays. Re-read just before."""
    text = md.read_text() if md.exists() else "# Performance\n"
    start = text.find(SECTION)
    if start < 0:
        new = text.rstrip("\n") + "\n\n" + body
    else:
        nxt = text.find("\n## ", start + len(SECTION))
        kept = text.find("\n" + ANALYSIS, start, nxt if nxt >= 0 else len(text))
        cut = kept if kept >= 0 else nxt
        new = text[:start] + body + ("" if cut < 0 else "\n" + text[cut + 1 :])
    md.write_text(new)


def section(
    args: argparse.Namespace, argv: list[str], tbl: str, png: Path, load: float | None = None
) -> str:
    """Our docs/performance.md section: command, date, machine, table, plot, method."""
    import pyspark

    load = os.getloadavg()[0] if load is None else load
    burst = args.burst_size if args.burst_size is not None else int(args.rate * 10)
    producer = (
        "confluent-kafka (linger.ms=0, acks=1)"
        if args.producer == "kafka"
        else "native rdmalog.rdma.Producer"
    )
    rel_png = os.path.relpath(png, ROOT / "docs")
    cmd = "python bench/ospbench/run.py " + " ".join(argv)
    return f"""{SECTION}

KafkaDirect section 5.4 / Figure 21: the delay between an event's generation and the moment Spark
read it, OSPBench's NDW traffic workload (JSON flow and speed per lane on `ndwflow` and `ndwspeed`,
LogAppendTime), constant rate and a burst every 10 s. Method and code: `bench/ospbench/`.

- Command: `{cmd.strip()}`
- Date: {datetime.datetime.now().strftime("%Y-%m-%d %H:%M")} UTC; machine: {os.cpu_count()} cores,
  {platform.machine()}, Python {platform.python_version()}, pyspark {pyspark.__version__}, load
  average {load:.1f} at the end (the cores are shared with other work).
- Workload: {args.rate:g} messages/s over both topics for {args.duration:g} s per run; `burst` adds
  {burst} messages at once every 10 s; producer: {producer}.
- Spark: `local[2]`, foreachBatch, trigger processingTime {args.trigger_ms} ms, one fresh broker
  and Spark process per run, {args.warmup:g} s of warm-up traffic excluded.
- Delay = executor wall clock when the parsed event reached the stage (vectorized UDF right after
  the source) - the JSON's generation time (the Kafka LogAppendTime gives the same to < 1 ms). It
  splits into generated -> micro-batch planned (waiting for the running batch to end, then
  planning) and planned -> read (task launch, the source's read, the UDF). "ms per batch" is
  Spark's median triggerExecution.

{tbl}
![event delay over time]({rel_png})
"""


def report_existing(ap: argparse.ArgumentParser, args: argparse.Namespace, results: Path) -> int:
    """Table, plot and section again from a finished run's rows.json (e.g. after a plot change)."""
    saved = json.loads((results / "rows.json").read_text())
    run_args = ap.parse_args(saved["argv"])  # the settings of the run, for the section
    if run_args.duration is None:
        run_args.duration = 15.0 if run_args.quick else 45.0
    tbl = table(saved["rows"]) + reads_table(saved["reads"])
    print(tbl)
    plot(saved["rows"], results, Path(args.plot))
    if not args.no_docs:
        text = section(run_args, saved["argv"], tbl, Path(args.plot), saved.get("load"))
        write_section(Path(args.out), text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run every available (source, workload) pair; print JSON lines and the table."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="15 s per run")
    ap.add_argument("--duration", type=float, default=None, help="seconds per run (default 45)")
    ap.add_argument("--rate", type=float, default=400.0, help="messages/s over both topics")
    ap.add_argument("--burst-size", type=int, default=None, help="default 10 x rate")
    ap.add_argument("--sources", default="rdmalog-shm,rdmalog-kafka,kafka")
    ap.add_argument("--workloads", default="constant,burst")
    ap.add_argument("--producer", choices=["kafka", "native"], default="kafka")
    ap.add_argument("--trigger-ms", type=int, default=100, help="0: as fast as possible")
    ap.add_argument(
        "--stage", choices=["join", "parse"], default="join", help="parse: no per-lane join"
    )
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up traffic")
    ap.add_argument("--results", default=None, help="run directory (default: a temp dir)")
    ap.add_argument(
        "--plot",
        default=None,
        help="PNG (default docs/ospbench_delay.png; with --no-docs: in --results)",
    )
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    ap.add_argument("--no-range-reads", action="store_true", help="skip the Spark-free step")
    ap.add_argument(
        "--from-results", action="store_true", help="only re-summarize the runs in --results"
    )
    ap.add_argument("--no-docs", action="store_true", help="print only; write no docs")
    args = ap.parse_args(argv)
    if args.duration is None:
        args.duration = 15.0 if args.quick else 45.0
    results = Path(args.results or tempfile.mkdtemp(prefix="ospbench-"))
    results.mkdir(parents=True, exist_ok=True)
    if args.plot is None:
        args.plot = str(results if args.no_docs else ROOT / "docs") + "/ospbench_delay.png"
    log(f"results in {results}")
    reads: list[dict] = []
    if args.from_results:
        return report_existing(ap, args, results)
    if not args.no_range_reads:
        try:
            reads = range_reads()
        except Exception as exc:  # noqa: BLE001
            reads = [{"step": "range_read", "error": str(exc)[:300]}]
        for r in reads:
            print(json.dumps(r), flush=True)
    rows = []
    for pattern in args.workloads.split(","):
        for source in args.sources.split(","):
            try:
                row = one_run(source, pattern, args, results)
            except Exception as exc:  # noqa: BLE001 - one failed run must not hide the others
                row = {"source": source, "workload": pattern, "error": str(exc)[:500]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    saved = {"rows": rows, "reads": reads, "argv": argv, "load": os.getloadavg()[0]}
    (results / "rows.json").write_text(json.dumps(saved))
    tbl = table(rows) + reads_table(reads)
    print()
    print(tbl)
    if any("p50_ms" in r for r in rows):
        png = Path(args.plot)
        plot(rows, results, png)
        log(f"plot: {png}")
        if not args.no_docs:
            write_section(Path(args.out), section(args, argv, tbl, png))
            log(f"section written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

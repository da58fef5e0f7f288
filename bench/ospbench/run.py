"""KafkaDirect 5.4 streaming benchmark (OSPBench): Spark event delay per source, mode and workload.

For each workload (constant, burst), trigger mode (micro-batch; real-time mode; continuous
processing) and source that offers that mode (`rdmalog-jvm`, `rdmalog-tcp`, `rdmalog-shm`,
`rdmalog-kafka`, `kafka`), it starts a fresh broker (`rdmalog serve` with `rdma.transport` tcp, or
shm for rdmalog-shm; temp data dir, free ports), creates `ndwflow`/`ndwspeed` (LogAppendTime),
starts the Spark job (bench/ospbench/job.py) in its own process, warms it up, runs the generator
for the bounded duration, drains, and reads the per-event delays. Sources run in an interleaved
order per workload (A B A B, when --repeat > 1). With --rates it also sweeps the constant
workload's rate to find the highest one each source sustains. Prints one JSON line per run, then
the tables (report.py); writes a PNG and (unless --no-docs) the section "Spark streaming event
delay (KafkaDirect 5.4)" of docs/performance.md.

    python bench/ospbench/run.py --quick                 # ~15 s per run
    python bench/ospbench/run.py --duration 30 --modes microbatch,realtime,continuous
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # workload, report, and bench/brokers

import report  # noqa: E402
import workload  # noqa: E402
from brokers import free_ports, port_open  # noqa: E402

PY = sys.executable


def log(msg: str) -> None:
    """Progress on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Broker:
    """A real `rdmalog serve` with the native datapaths on `transport`, on free ports."""

    def __init__(self, transport: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="ospbench-broker-")
        port, control_port = free_ports(2)
        cmd = [str(Path(PY).parent / "rdmalog"), "serve", "--listen", f"127.0.0.1:{port}"]
        cmd += ["--data-dir", str(Path(self.dir) / "data")]
        overrides = {"offsets.topic.num.partitions": "1", "auto.create.topics.enable": "false"}
        overrides |= {"rdma.transport": transport, "rdma.control.port": str(control_port)}
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        self.log_path = Path(self.dir) / "broker.log"
        self.proc = subprocess.Popen(cmd, stderr=open(self.log_path, "wb"), cwd=ROOT)  # noqa: SIM115
        self.bootstrap = f"127.0.0.1:{port}"
        self.control = f"127.0.0.1:{control_port}"
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


def trigger_ms(mode: str, args: argparse.Namespace) -> int:
    """The job's --trigger-ms for `mode`."""
    return {
        "microbatch": args.trigger_ms,
        "realtime": args.realtime_ms,
        "continuous": args.continuous_ms,
    }[mode]


def one_run(
    source: str, mode: str, pattern: str, rate: float, args: argparse.Namespace, rundir: Path
) -> dict:
    """Broker + job + generator for one (source, mode, workload, rate); the run's summary."""
    from job import unavailable

    key = {"source": source, "mode": mode, "workload": pattern, "rate": rate}
    shutil.rmtree(rundir, ignore_errors=True)
    rundir.mkdir(parents=True)
    broker = Broker("shm" if source == "rdmalog-shm" else "tcp")
    job = None
    try:
        reason = unavailable(source, broker.control, mode)
        if reason:
            return key | {"skipped": reason}
        workload.create_topics(broker.bootstrap)
        stage = args.stage if mode == "microbatch" else "parse"
        cmd = [PY, str(HERE / "job.py"), "--source", source, "--bootstrap", broker.bootstrap]
        cmd += ["--out", str(rundir), "--mode", mode, "--trigger-ms", str(trigger_ms(mode, args))]
        cmd += ["--max-seconds", str(args.duration + 300), "--stage", stage]
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
                raise RuntimeError(f"Spark job processed no warm-up rows; see {rundir}/job.log")
            for topic in workload.TOPICS:
                warm.send(topic, b"warmup", json.dumps({"warmup": True}).encode())
            warm.tick()
            time.sleep(0.5)
        # more warm-up traffic so workers, consumers and generated code are hot on both topics
        for _ in range(int(args.warmup * 10)):
            for topic in workload.TOPICS:
                warm.send(topic, b"warmup", json.dumps({"warmup": True}).encode())
            time.sleep(0.1)
        warm.close()
        time.sleep(1.0)
        log(f"{source} {mode} {pattern}: generating for {args.duration:.0f} s at {rate:g} msg/s")
        gen_cmd = [PY, str(HERE / "workload.py"), "--bootstrap", broker.bootstrap, "--no-create"]
        gen_cmd += ["--pattern", pattern, "--rate", str(rate), "--duration", str(args.duration)]
        if args.burst_size is not None:
            gen_cmd += ["--burst-size", str(args.burst_size)]
        gen_cmd += ["--producer", args.producer]
        if args.producer == "native":
            gen_cmd += ["--control", broker.control, "--transport", "shm"]
        gen = subprocess.run(
            gen_cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.duration + 120
        )
        if gen.returncode != 0:
            raise RuntimeError(f"generator failed: {gen.stdout} {gen.stderr[-2000:]}")
        produced = json.loads(gen.stdout.strip().splitlines()[-1])
        drained_at = time.monotonic()
        deadline = drained_at + args.drain
        while time.monotonic() < deadline and job.poll() is None:
            seen = (rundir / "progress").read_text() if (rundir / "progress").exists() else "0"
            if int(seen or 0) >= produced["sent"]:
                break
            time.sleep(0.2)
        drain_s = time.monotonic() - drained_at
        (rundir / "stop").touch()
        job.wait(180)
        return report.summarize(key, rundir, produced) | {"drain_s": round(drain_s, 1)}
    finally:
        if job is not None and job.poll() is None:
            job.terminate()
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                job.kill()
        broker.close()


def range_reads(records: int = 400, reads: int = 15) -> list[dict]:
    """What one Spark task's read costs without Spark, per transport (Python source).

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
        rows = []
        tp = (workload.FLOW_TOPIC, 0)
        for name, transport in [("rdmalog-shm", "shm"), ("rdmalog-kafka", "kafka")]:
            opts = {"rdmalog.bootstrap": broker.bootstrap, "subscribe": workload.FLOW_TOPIC}
            opts |= {"rdmalog.transport": transport, "rdmalog.control": broker.control}
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
                    "p95_ms": round(report.percentile(pooled, 95), 1),
                }
            )
        return rows
    finally:
        _close_pooled_clients()
        broker.close()


def _close_pooled_clients() -> None:
    """Close the clients the source pooled in this process (the range reads ran here)."""
    from rdmalog.spark import kafka_client, native_client

    for consumers in kafka_client._POOL.values():
        for c in consumers:
            c.close()
    kafka_client._POOL.clear()
    for c in native_client._POOL.values():
        c.close()
    native_client._POOL.clear()


def plan(args: argparse.Namespace) -> list[tuple[str, str, str, float]]:
    """(source, mode, workload, rate) of every run, sources interleaved per repetition."""
    runs = []
    for pattern in args.workloads.split(","):
        for mode in args.modes.split(","):
            for _ in range(args.repeat):
                runs += [(s, mode, pattern, args.rate) for s in args.sources.split(",")]
    for rate in [float(r) for r in args.rates.split(",") if r]:
        runs += [(s, "microbatch", "constant", rate) for s in args.sources.split(",")]
    return runs


def main(argv: list[str] | None = None) -> int:
    """Run every available (source, mode, workload) combination; print JSON lines and tables."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="15 s per run")
    ap.add_argument("--duration", type=float, default=None, help="seconds per run (default 45)")
    ap.add_argument("--rate", type=float, default=400.0, help="messages/s over both topics")
    ap.add_argument("--burst-size", type=int, default=None, help="default 10 x rate")
    ap.add_argument("--sources", default="rdmalog-jvm,rdmalog-tcp,rdmalog-shm,kafka")
    ap.add_argument("--modes", default="microbatch,realtime,continuous")
    ap.add_argument("--workloads", default="constant,burst")
    ap.add_argument("--repeat", type=int, default=1, help="runs per combination, interleaved")
    ap.add_argument("--rates", default="", help="micro-batch constant-rate sweep, e.g. 2000,8000")
    ap.add_argument("--producer", choices=["kafka", "native"], default="kafka")
    ap.add_argument("--trigger-ms", type=int, default=100, help="micro-batch processing time")
    ap.add_argument("--realtime-ms", type=int, default=10_000, help="real-time batch duration")
    ap.add_argument("--continuous-ms", type=int, default=1000, help="continuous checkpoints")
    ap.add_argument("--drain", type=float, default=60.0, help="seconds to wait for the last rows")
    ap.add_argument(
        "--stage", choices=["join", "parse"], default="join", help="micro-batch: parse = no join"
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
    if args.from_results:
        return report.report_existing(ap, args, results)
    reads: list[dict] = []
    if not args.no_range_reads:
        try:
            reads = range_reads()
        except Exception as exc:  # noqa: BLE001
            reads = [{"step": "range_read", "error": str(exc)[:300]}]
        for r in reads:
            print(json.dumps(r), flush=True)
    rows = []
    for i, (source, mode, pattern, rate) in enumerate(plan(args)):
        rundir = results / f"{i:03d}-{source}-{mode}-{pattern}-{rate:g}"
        try:
            row = one_run(source, mode, pattern, rate, args, rundir)
        except Exception as exc:  # noqa: BLE001 - one failed run must not hide the others
            row = {"source": source, "mode": mode, "workload": pattern, "rate": rate}
            row["error"] = str(exc)[:500]
        row["dir"] = rundir.name
        print(json.dumps(row), flush=True)
        rows.append(row)
        saved = {"rows": rows, "reads": reads, "argv": argv, "load": os.getloadavg()[0]}
        (results / "rows.json").write_text(json.dumps(saved))
    return report.finish(args, argv, results, rows, reads)


if __name__ == "__main__":
    sys.exit(main())

"""The delay floor under the Spark numbers: the OSPBench topics read by a bare JVM consumer.

KafkaDirect compared its RDMA consumer with Kafka's under Spark. This measures the two consumers a
JVM reader can sit on, without Spark, against one broker and the same generator: rdmalog's native
consumer from the JVM reader's jar (floor/Floor.java `native`: metadata slot looks every 20-200 us,
one-sided READs over the tcp soft-RNIC) and Apache Kafka's Java consumer, kafka-clients 4.3.0 from
compat_tests/java/jars, with its defaults (`kafka`: what spark-sql-kafka's executors call;
long polls the gateway answers as soon as the high watermark moves). Delay = the JVM's clock when
the consumer returns the record - its generation time. Runs alternate (A B A B) on one broker per
workload.

    python bench/ospbench/floor.py [--duration 20] [--repeat 2] [--workloads constant,burst]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT)]  # report, workload, run; compat_tests

import report  # noqa: E402
import workload  # noqa: E402
from run import PY, Broker, log  # noqa: E402


def classpath() -> str:
    import pyspark

    from compat_tests import java
    from rdmalog.spark import jvm

    pyspark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    return ":".join([str(jvm.jar()), *java.jars(), str(pyspark_jars / "*")])


def compile_floor(out: Path, cp: str) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise SystemExit("javac is not on PATH (scripts/setup.sh installs a JDK)")
    done = subprocess.run(
        [javac, "-cp", cp, "-d", str(out), str(HERE / "floor" / "Floor.java")],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"javac failed: {done.stderr}")


def one(mode: str, broker: Broker, pattern: str, args, cp: str, work: Path) -> dict:
    out = work / f"{mode}-{pattern}-{time.monotonic_ns()}.txt"
    seconds = int(args.duration) + 15
    cmd = ["java", "-cp", f"{work}:{cp}", "Floor", mode, broker.bootstrap, broker.control]
    err = out.with_suffix(".err")
    with open(err, "wb") as err_file:
        proc = subprocess.Popen(
            [*cmd, str(seconds), str(out)], stdout=subprocess.PIPE, stderr=err_file, text=True
        )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            proc.wait(10)
            raise RuntimeError(f"Floor {mode} did not start: {err.read_text()[-2000:]}")
        warm = workload.KafkaSender(broker.bootstrap)
        for _ in range(30):  # a few seconds of warm-up traffic: connections and JIT are hot
            for topic in workload.TOPICS:
                warm.send(topic, b"warmup", json.dumps({"warmup": True}).encode())
            time.sleep(0.1)
        warm.close()
        gen = [PY, str(HERE / "workload.py"), "--bootstrap", broker.bootstrap, "--no-create"]
        gen += ["--pattern", pattern, "--rate", str(args.rate), "--duration", str(args.duration)]
        gen += ["--burst-size", str(args.burst_size)]
        done = subprocess.run(gen, capture_output=True, text=True, timeout=args.duration + 120)
        sent = json.loads(done.stdout.strip().splitlines()[-1])["sent"]
        proc.wait(seconds + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    delays = [float(x) for x in out.read_text().split()]
    return {
        "consumer": mode,
        "workload": pattern,
        "sent": sent,
        "read": len(delays),
        "p50_ms": round(report.percentile(delays, 50), 2),
        "p99_ms": round(report.percentile(delays, 99), 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=400.0)
    ap.add_argument("--burst-size", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workloads", default="constant,burst")
    args = ap.parse_args(argv)
    cp = classpath()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ospbench-floor-") as tmp:
        work = Path(tmp)
        compile_floor(work, cp)
        for pattern in args.workloads.split(","):
            broker = Broker("tcp")
            try:
                workload.create_topics(broker.bootstrap)
                for _ in range(args.repeat):
                    for mode in ("native", "kafka"):
                        log(f"floor {mode} {pattern}")
                        row = one(mode, broker, pattern, args, cp, work)
                        print(json.dumps(row), flush=True)
                        rows.append(row)
            finally:
                broker.close()
    print(
        "\n| workload | consumer | read/sent | p50 ms | p99 ms |\n| --- | --- | ---: | ---: | ---: |"
    )
    for r in rows:
        print(
            f"| {r['workload']} | {r['consumer']} | {r['read']}/{r['sent']} | {r['p50_ms']} | "
            f"{r['p99_ms']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

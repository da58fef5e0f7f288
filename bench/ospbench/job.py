"""OSPBench's ingest + stateless stage as a Spark structured-streaming job, recording event delays.

Reads `ndwflow` and `ndwspeed` (from `latest`), parses the JSON, drops warm-up and bad
measurements and, in micro-batch mode, joins flow with speed per lane (each event gets its lane's
mean flow and mean speed in the micro-batch: a window aggregation per measurement id + lane, so
each event row stays). Real-time mode and continuous processing run the parse stage only: Spark
allows no window aggregation there. Per event it records:

- `gen_ms`: generation time (the JSON `timestamp`), `kafka_ms`: the record's Kafka timestamp
  (LogAppendTime on these topics);
- `read_ms`: the executor JVM's wall clock (microseconds, `java.time.Instant.now()` through
  `java_method`) when the row left the source: the time Spark read it, taken the same way for
  every source and mode;
- micro-batch mode: `batch_ms`, the micro-batch's timestamp (`current_timestamp()`, set when
  Spark planned it), and `done_ms`, driver wall clock when the batch's results were collected.

The delay the runner reports is `read_ms - gen_ms` (KafkaDirect 5.4: "the delay between the
timestamp when the sensor generated an event and the time when the processing engine read it").

    python bench/ospbench/job.py --source rdmalog-jvm --bootstrap 127.0.0.1:P --control 127.0.0.1:Q \
        --out DIR [--mode microbatch|realtime|continuous] [--trigger-ms 100]

Sources: `rdmalog-jvm` (format rdmalog with the JVM reader's jar: native tcp reads in the JVM),
`rdmalog-shm` / `rdmalog-tcp` (the Python data source, native transport), `rdmalog-kafka` (the
Python data source, Kafka protocol), `kafka` (spark-sql-kafka; jars from env SPARK_KAFKA_JARS).
Sinks: micro-batch foreachBatch (collected to pandas), real-time mode a Python `foreach` writer
(Spark's real-time allowlist takes foreach, console and Kafka sinks), continuous the memory sink.
Control files in --out: the job writes `started` once the query runs and `ready` after its first
rows; it stops when `stop` appears (or after --max-seconds), then writes `events.parquet`,
`progress.csv` (micro-batch: Spark's durationMs per batch) and, in micro-batch mode, Spark's
event log (`eventlog/`, for breakdown.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

SOURCES = ("rdmalog-jvm", "rdmalog-shm", "rdmalog-tcp", "rdmalog-kafka", "kafka")
MODES = ("microbatch", "realtime", "continuous")
# the sources that run in real-time mode and continuous processing (JVM sources only: Python
# data sources have neither)
LOW_LATENCY_SOURCES = ("rdmalog-jvm", "kafka")
TOPICS = "ndwflow,ndwspeed"
SCHEMA = (
    "lat double, long double, lane string, flow double, speed double, period int, "
    "accuracy int, timestamp double, num_lanes int, warmup boolean"
)
# the executor JVM's clock, per row, in milliseconds with microseconds
JVM_NOW_MS = "cast(unix_micros(cast(java_method('java.time.Instant', 'now') as timestamp)) as double) / 1000.0"
EVENT_COLUMNS = ["topic", "id", "lane", "gen_ms", "kafka_ms", "ts_type", "read_ms"]


def unavailable(source: str, control: str | None, mode: str = "microbatch") -> str | None:
    """Why `source` cannot run here (in `mode`), or None."""
    if mode != "microbatch" and source not in LOW_LATENCY_SOURCES:
        return f"{mode}: Python data sources offer micro-batches only"
    if source == "kafka" and not os.environ.get("SPARK_KAFKA_JARS"):
        return "spark-sql-kafka needs env SPARK_KAFKA_JARS (comma-separated connector jars)"
    if source == "kafka" and mode == "realtime" and not kafka_real_time():
        return "real-time mode: this spark-sql-kafka build has no SupportsRealTimeMode"
    if source.startswith("rdmalog"):
        try:
            import rdmalog.spark  # noqa: F401
        except ImportError as exc:
            return f"rdmalog.spark is not importable: {exc}"
    if source == "rdmalog-jvm":
        from rdmalog.spark import jvm

        try:
            jvm.jar()
        except jvm.BuildError as exc:
            return f"the JVM reader's jar: {exc}"
    if source in ("rdmalog-shm", "rdmalog-tcp", "rdmalog-jvm"):
        from rdmalog.spark import native_client

        if not native_client.available():
            return "rdmalog.rdma.Consumer/Producer are not available"
        if not control:
            return "the broker runs no RDMA service (no control address)"
    return None


def kafka_real_time() -> bool:
    """Whether the spark-sql-kafka jar in SPARK_KAFKA_JARS offers real-time mode (its micro-batch
    stream implements SupportsRealTimeMode, as the connectors of newer Spark releases do)."""
    import zipfile

    stream = "org/apache/spark/sql/kafka010/KafkaMicroBatchStream.class"
    for jar in os.environ["SPARK_KAFKA_JARS"].split(","):
        try:
            with zipfile.ZipFile(jar.strip()) as z:
                if stream in z.namelist():
                    return b"SupportsRealTimeMode" in z.read(stream)
        except (OSError, zipfile.BadZipFile):
            continue
    return False


def kafka_classpath() -> list[str]:
    """SPARK_KAFKA_JARS, plus kafka-clients and commons-pool2 from compat_tests/java/jars unless
    it names a kafka-clients jar itself."""
    jars = [p.strip() for p in os.environ["SPARK_KAFKA_JARS"].split(",") if p.strip()]
    if not any("kafka-clients" in Path(p).name for p in jars):
        # run as a script, this folder is on sys.path, not the checkout holding compat_tests
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from compat_tests import java

        jars += [p for p in java.jars() if Path(p).name.startswith(("kafka-clients", "commons-"))]
    return jars


def spark_session(source: str, mode: str, out: Path):
    """local[2] session tuned for small micro-batches (event log on in micro-batch mode)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need pyarrow and rdmalog
    root = Path(__file__).resolve().parents[2]  # workers import rdmalog from the checkout
    paths = (str(root), os.environ.get("PYTHONPATH"))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)

    # continuous processing holds a core per topic-partition for as long as it runs: one more
    # for the driver's count of what arrived
    cores = 3 if mode == "continuous" else 2
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(f"ospbench-{source}-{mode}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.noDataProgressEventInterval", "1000")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.streaming.numRecentProgressUpdates", "2000")
    )
    if mode == "microbatch":
        (out / "eventlog").mkdir(exist_ok=True)
        builder = (
            builder.config("spark.eventLog.enabled", "true")
            .config("spark.eventLog.dir", str(out / "eventlog"))
            .config("spark.eventLog.compress", "false")
            .config("spark.eventLog.rolling.enabled", "false")
        )
    if source == "kafka":
        builder = builder.config("spark.jars", ",".join(kafka_classpath()))
    elif source == "rdmalog-jvm":
        from rdmalog.spark import jvm

        builder = builder.config("spark.jars", str(jvm.jar()))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def reader(spark, source: str, bootstrap: str, control: str | None):
    """The streaming DataFrame of both topics, from `latest`."""
    if source == "kafka":
        r = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    else:
        import rdmalog.spark

        rdmalog.spark.register(spark)
        transport = "tcp" if source == "rdmalog-jvm" else source.split("-")[1]
        r = (
            spark.readStream.format("rdmalog")
            .option("rdmalog.bootstrap", bootstrap)
            .option("rdmalog.transport", transport)
        )
        if control:
            r = r.option("rdmalog.control", control)
    # `latest` is resolved once per query: the rdmalog sources' initialOffset() keeps its first
    # answer (Spark asks again when it plans the first batch), as spark-sql-kafka does.
    return r.option("subscribe", TOPICS).option("startingOffsets", "latest").load()


def stage(df, mode: str, join: bool = True):
    """Stamp the read time, parse, filter; micro-batch with `join`: flow joined with speed per lane
    (window aggregate)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parsed = df.select(
        F.expr(JVM_NOW_MS).alias("read_ms"),  # first: right where the row leaves the source
        F.col("topic"),
        F.col("key").cast("string").alias("id"),
        F.from_json(F.col("value").cast("string"), SCHEMA).alias("m"),
        (F.unix_micros(F.col("timestamp")) / 1000.0).alias("kafka_ms"),
        F.col("timestampType").alias("ts_type"),
    )
    warmup = F.coalesce(F.col("m.warmup"), F.lit(False))
    good = parsed.where(F.col("m").isNotNull() & (warmup | (F.col("m.accuracy") >= 50)))
    if mode == "microbatch":  # (elsewhere warm-up rows reach the sink: they tell it is ready)
        good = good.where(~warmup)
    columns = [
        "topic",
        "id",
        F.col("m.lane").alias("lane"),
        F.col("m.timestamp").alias("gen_ms"),
        "kafka_ms",
        "ts_type",
        "read_ms",
    ]
    if mode != "microbatch":
        return good.select(*columns)
    events = good.select(
        *columns,
        (F.unix_micros(F.current_timestamp()) / 1000.0).alias("batch_ms"),
        F.col("m.flow").alias("flow"),
        F.col("m.speed").alias("speed"),
    )
    if not join:
        return events
    lane = Window.partitionBy("id", "lane")
    return events.select(
        "*",
        F.avg("flow").over(lane).alias("lane_flow"),
        F.avg("speed").over(lane).alias("lane_speed"),
    )


class RowFiles:
    """Real-time mode's sink: a `foreach` writer appending each row as a JSON line to a file of
    its task in `dir` (flushed per row: a batch cut short by the query's stop keeps its rows)."""

    def __init__(self, directory: str) -> None:
        self.dir = directory

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.f = open(f"{self.dir}/{partition_id}-{epoch_id}-{os.getpid()}.jsonl", "a")  # noqa: SIM115
        return True

    def process(self, row) -> None:
        self.f.write(json.dumps([row[c] for c in EVENT_COLUMNS]) + "\n")
        self.f.flush()

    def close(self, error) -> None:
        self.f.close()


def arrived(spark, mode: str, rows_dir: Path) -> tuple[int, int]:
    """Rows the real-time or continuous query wrote so far, and how many of them are events (the
    warm-up rows have no lane and no generation time)."""
    if mode == "realtime":
        lines = [line for p in rows_dir.glob("*.jsonl") for line in p.read_text().splitlines()]
        return len(lines), sum(", null, null, " not in line for line in lines)
    counts = spark.sql("SELECT count(*), count(gen_ms) FROM ospbench").collect()[0]
    return counts[0], counts[1]


def rows_written(directory: Path) -> pd.DataFrame:
    """The rows RowFiles wrote (a line cut short by a stop is skipped)."""
    rows = []
    for path in glob.glob(str(directory / "*.jsonl")):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    """Run the query until the `stop` file appears; write per-event delays."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=SOURCES, required=True)
    ap.add_argument("--mode", choices=MODES, default="microbatch")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--control", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--trigger-ms",
        type=int,
        default=100,
        help="micro-batch: processing-time trigger (0: as fast as possible); real-time mode: "
        "batch duration; continuous: checkpoint interval",
    )
    ap.add_argument("--stage", choices=["join", "parse"], default="join")
    ap.add_argument("--max-seconds", type=float, default=600.0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reason = unavailable(args.source, args.control, args.mode)
    if reason:
        print(json.dumps({"source": args.source, "skipped": reason}), flush=True)
        return 3

    spark = spark_session(args.source, args.mode, out)
    frames: list[pd.DataFrame] = []
    batches: list[dict] = []
    counts = {"events": 0}

    def on_batch(df, batch_id: int) -> None:
        enter = time.time() * 1000.0
        pdf = stage(df, args.mode, join=args.stage == "join").toPandas()
        done = time.time() * 1000.0
        pdf["done_ms"] = done
        pdf["batch_id"] = batch_id
        frames.append(pdf)
        counts["events"] += len(pdf)
        batches.append({"batch_id": batch_id, "enter_ms": enter, "done_ms": done, "rows": len(pdf)})
        (out / "progress").write_text(str(counts["events"]))
        (out / "ready").touch()  # Spark runs no batch without new data: the warm-up arrived

    source = reader(spark, args.source, args.bootstrap, args.control)
    # micro-batch: the stage runs on each batch's DataFrame (Spark streams allow no window
    # aggregation); the other modes run it on the stream itself
    events = source if args.mode == "microbatch" else stage(source, args.mode)
    rows_dir = out / "rows"
    checkpoint = str(out / "checkpoint")
    if args.mode == "microbatch":
        writer = events.writeStream.foreachBatch(on_batch).option("checkpointLocation", checkpoint)
        if args.trigger_ms > 0:
            writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    elif args.mode == "realtime":
        shutil.rmtree(rows_dir, ignore_errors=True)
        rows_dir.mkdir()
        writer = (
            events.writeStream.foreach(RowFiles(str(rows_dir)))
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=f"{args.trigger_ms} milliseconds")
        )
    else:
        writer = (
            events.writeStream.format("memory")
            .queryName("ospbench")
            .option("checkpointLocation", checkpoint)
            .trigger(continuous=f"{args.trigger_ms} milliseconds")
        )
    query = writer.start()
    (out / "started").touch()
    deadline = time.monotonic() + args.max_seconds
    try:
        while not (out / "stop").exists() and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if args.mode != "microbatch":  # count what arrived, for the runner
                rows, events = arrived(spark, args.mode, rows_dir)
                (out / "progress").write_text(str(events))
                if rows:
                    (out / "ready").touch()
            time.sleep(0.2)
    finally:
        progress = [
            {"batch_id": p["batchId"], "rows": p["numInputRows"], **p["durationMs"]}
            for p in query.recentProgress
            if "durationMs" in p
        ]
        if args.mode == "continuous":
            frames.append(spark.sql("SELECT * FROM ospbench").toPandas())
        query.stop()
        if args.mode == "realtime":
            frames.append(rows_written(rows_dir))
        pd.DataFrame(progress).to_csv(out / "progress.csv", index=False)
        result = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        result.to_parquet(out / "events.parquet")
        pd.DataFrame(batches).to_csv(out / "batches.csv", index=False)
        spark.stop()
    print(json.dumps({"source": args.source, "events": len(result)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

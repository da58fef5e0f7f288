"""OSPBench's ingest + stateless stage as a Spark structured-streaming job, recording event delays.

Reads `ndwflow` and `ndwspeed` (from `latest`), parses the JSON, drops warm-up and bad
measurements, and joins flow with speed per lane: every event gets its lane's mean flow and mean
speed in the micro-batch (a window aggregation per measurement id + lane, so each event row stays).
Per event it records:

- `gen_ms`: generation time (the JSON `timestamp`), `kafka_ms`: the record's Kafka timestamp
  (LogAppendTime on these topics, as the Kafka protocol reports it);
- `read_ms`: wall clock in the executor when the parsed event reached the stage (a vectorized UDF
  right after the source, per Arrow batch): the time Spark read it;
- `batch_ms`: the micro-batch's timestamp (`current_timestamp()`, set when Spark planned it);
- `done_ms`: driver wall clock when the micro-batch's results were collected.

The delay the runner reports is `read_ms - gen_ms` (KafkaDirect 5.4: "the delay between the
timestamp when the sensor generated an event and the time when the processing engine read it").

    python bench/ospbench/job.py --source rdmalog-shm --bootstrap 127.0.0.1:P --control 127.0.0.1:Q \
        --out DIR [--trigger-ms 100]

Sources: `rdmalog-shm` / `rdmalog-tcp` (format rdmalog, native transport), `rdmalog-kafka`
(format rdmalog, Kafka protocol), `kafka` (spark-sql-kafka; jars from env SPARK_KAFKA_JARS).
Control files in --out: the job writes `started` once the query runs and `ready` after its first
non-empty micro-batch; it stops when `stop` appears (or after --max-seconds), then writes
`events.parquet` and `batches.csv`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

SOURCES = ("rdmalog-shm", "rdmalog-tcp", "rdmalog-kafka", "kafka")
TOPICS = "ndwflow,ndwspeed"
SCHEMA = (
    "lat double, long double, lane string, flow double, speed double, period int, "
    "accuracy int, timestamp double, num_lanes int, warmup boolean"
)


def unavailable(source: str, control: str | None) -> str | None:
    """Why `source` cannot run here, or None."""
    if source == "kafka" and not os.environ.get("SPARK_KAFKA_JARS"):
        return "spark-sql-kafka needs env SPARK_KAFKA_JARS (comma-separated connector jars)"
    if source.startswith("rdmalog"):
        try:
            import rdmalog.spark  # noqa: F401
        except ImportError as exc:
            return f"rdmalog.spark is not importable: {exc}"
    if source in ("rdmalog-shm", "rdmalog-tcp"):
        from rdmalog.spark import native_client

        if not native_client.available():
            return "rdmalog.rdma.Consumer/Producer are not available"
        if not control:
            return "the broker runs no RDMA service (no control address)"
    return None


def spark_session(source: str):
    """local[2] session tuned for small micro-batches."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need pyarrow and rdmalog
    root = Path(__file__).resolve().parents[2]  # workers import rdmalog from the checkout
    paths = (str(root), os.environ.get("PYTHONPATH"))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(f"ospbench-{source}")
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
    if source == "kafka":
        builder = builder.config("spark.jars", os.environ["SPARK_KAFKA_JARS"])
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
        transport = source.split("-")[1]
        r = (
            spark.readStream.format("rdmalog")
            .option("rdmalog.bootstrap", bootstrap)
            .option("rdmalog.transport", transport)
        )
        if control:
            r = r.option("rdmalog.control", control)
    # `latest` is resolved once per query: the rdmalog source's initialOffset() keeps its first
    # answer (Spark asks again when it plans the first batch), as spark-sql-kafka does.
    return r.option("subscribe", TOPICS).option("startingOffsets", "latest").load()


def wall_clock_ms(x: pd.Series) -> pd.Series:
    """Vectorized UDF body: the executor's wall clock (ms) for every row of the Arrow batch."""
    return pd.Series([time.time() * 1000.0] * len(x), dtype="float64")


def stage(df, join: bool = True):
    """Parse, filter, stamp read time; with `join`, join flow with speed per lane (window agg)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    now_ms = pandas_udf(wall_clock_ms, "double")  # type: ignore[call-overload]
    parsed = df.select(
        F.col("topic"),
        F.col("key").cast("string").alias("id"),
        F.from_json(F.col("value").cast("string"), SCHEMA).alias("m"),
        (F.unix_micros(F.col("timestamp")) / 1000.0).alias("kafka_ms"),
        F.col("timestampType").alias("ts_type"),
    ).withColumn("read_ms", now_ms(F.col("kafka_ms")))
    good = parsed.where(
        F.col("m").isNotNull()
        & ~F.coalesce(F.col("m.warmup"), F.lit(False))
        & (F.col("m.accuracy") >= 50)
    )
    lane = Window.partitionBy("id", "lane")
    events = good.select(
        "topic",
        "id",
        F.col("m.lane").alias("lane"),
        F.col("m.timestamp").alias("gen_ms"),
        "kafka_ms",
        "ts_type",
        "read_ms",
        (F.unix_micros(F.current_timestamp()) / 1000.0).alias("batch_ms"),
        F.col("m.flow").alias("flow"),
        F.col("m.speed").alias("speed"),
    )
    if not join:
        return events
    return events.select(
        "*",
        F.avg("flow").over(lane).alias("lane_flow"),
        F.avg("speed").over(lane).alias("lane_speed"),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the query until the `stop` file appears; write per-event delays."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=SOURCES, required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--control", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--trigger-ms", type=int, default=100, help="0: as fast as possible")
    ap.add_argument("--stage", choices=["join", "parse"], default="join")
    ap.add_argument("--max-seconds", type=float, default=600.0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reason = unavailable(args.source, args.control)
    if reason:
        print(json.dumps({"source": args.source, "skipped": reason}), flush=True)
        return 3

    spark = spark_session(args.source)
    frames: list[pd.DataFrame] = []
    batches: list[dict] = []
    counts = {"events": 0}

    def on_batch(df, batch_id: int) -> None:
        enter = time.time() * 1000.0
        pdf = stage(df, args.stage == "join").toPandas()
        done = time.time() * 1000.0
        pdf["done_ms"] = done
        pdf["batch_id"] = batch_id
        frames.append(pdf)
        counts["events"] += len(pdf)
        batches.append({"batch_id": batch_id, "enter_ms": enter, "done_ms": done, "rows": len(pdf)})
        (out / "progress").write_text(str(counts["events"]))
        (out / "ready").touch()  # Spark runs no batch without new data: the warm-up arrived

    stream = reader(spark, args.source, args.bootstrap, args.control)
    writer = stream.writeStream.foreachBatch(on_batch).option(
        "checkpointLocation", str(out / "checkpoint")
    )
    if args.trigger_ms > 0:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    query = writer.start()
    (out / "started").touch()
    deadline = time.monotonic() + args.max_seconds
    try:
        while not (out / "stop").exists() and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.2)
    finally:
        progress = [
            {"batch_id": p["batchId"], "rows": p["numInputRows"], **p["durationMs"]}
            for p in query.recentProgress
        ]
        query.stop()
        pd.DataFrame(progress).to_csv(out / "progress.csv", index=False)
        events = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        events.to_parquet(out / "events.parquet")
        pd.DataFrame(batches).to_csv(out / "batches.csv", index=False)
        spark.stop()
    print(json.dumps({"source": args.source, "events": counts["events"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

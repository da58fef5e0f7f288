"""The cleaned segment's bytes against Apache Kafka's own code: kafka-clients' MemoryRecords.filterTo
(what Kafka's log cleaner writes segments with), run in a JVM over the same segment with the same
decisions (`kafka_cleaner/KafkaCleanerFilter.java`). The files must be identical byte for byte:
copied batches, re-built ones (record encoding, base timestamp, delete horizon, header fields),
empty ones; re-built compressed batches too, compressed as Kafka's Java codecs frame them
(`compression.compress_as_kafka`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.java import jars
from rdmalog.store.compression import Codec
from rdmalog.store.records import HEADER, Record, RecordBatch, build_batch, iter_batches
from tests.unit.store.cleaner_helpers import clean, new_cleaner
from tests.unit.store.helpers import T0, Clock, open_log

SOURCE = Path(__file__).parent / "kafka_cleaner" / "KafkaCleanerFilter.java"
RETENTION = 60_000


@pytest.fixture(scope="module")
def kafka_filter(tmp_path_factory) -> list[str]:
    """The command that runs Kafka's filterTo (compiled against the pinned kafka-clients)."""
    try:
        classpath = jars()
    except ScenarioSkip as e:
        pytest.skip(str(e))
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("no JDK (javac) to compile the Kafka reference filter")
    out = tmp_path_factory.mktemp("kafka-filter")
    cp = ":".join(classpath)
    subprocess.run(["javac", "-cp", cp, "-d", str(out), str(SOURCE)], check=True, timeout=120)
    return ["java", "-cp", f"{cp}:{out}", "KafkaCleanerFilter"]


def run_kafka(cmd: list[str], data: bytes, params: list[str], tmp: Path) -> bytes:
    (tmp / "in").write_bytes(data)
    (tmp / "params").write_text("\n".join(params) + "\n")
    subprocess.run(
        [*cmd, str(tmp / "in"), str(tmp / "params"), str(tmp / "out")], check=True, timeout=120
    )
    return (tmp / "out").read_bytes()


def rec(key, value, ts, headers=()) -> Record:
    enc = [x.encode() if isinstance(x, str) else x for x in (key, value)]
    return Record(enc[0], enc[1], list(headers), timestamp=ts)


def build(plog, codec: Codec) -> None:
    """Every case of the filter in one segment."""
    hdrs = [("trace", b"t-1"), ("none", None), ("", b"")]
    add = plog.append
    add(build_batch([rec("a", "1", T0)]))  # superseded: dropped
    add(
        build_batch(
            [rec("b", "2", T0 + 1, hdrs), rec("c", "3", T0 + 5), rec("d", "4", T0 + 2)],
            compression=codec,
        )
    )
    add(build_batch([rec("e", None, T0 + 3)]))  # a tombstone: kept, gets a horizon
    pid7 = {"producer_id": 7, "producer_epoch": 2}
    add(build_batch([rec("f", "5", T0 + 4)], base_sequence=0, **pid7))
    add(build_batch([rec("f", "6", T0 + 4)], base_sequence=1, **pid7))  # pid 7's last: empty
    add(build_batch([rec("f", "7", T0 + 6)], producer_id=8, producer_epoch=0, base_sequence=0))
    add(build_batch([rec("c", "8", T0 + 7), rec("g", "9", T0 + 8, hdrs)], compression=codec))
    add(build_batch([rec("a", "10", T0 + 9), rec("j", "x", T0 + 10)], compression=codec))
    add(build_batch([rec("i", "11", T0 + 11)]))
    add(build_batch([rec(None, "no key", T0 + 12)]))  # ends the round: stays, empty


def params(plog, now: int, start: int, upper: int) -> list[str]:
    """The offset map of [start, upper) and the producers, as the Java filter reads them."""
    latest = {}
    for seg in plog.segments:
        for b in iter_batches(seg.path.read_bytes()[: seg.size]):
            for r in RecordBatch(bytes(b.bytes())).records():
                if start <= r.offset < upper and r.key is not None:
                    latest[r.key] = r.offset
    lines = [f"now {now}", f"retention {RETENTION}", f"upper {upper}", f"latest {upper - 1}"]
    lines += [f"key {k.hex()} {o}" for k, o in latest.items()]
    for pid, (last, epoch) in plog.producer_state.last_records().items():
        lines.append(f"producer {pid} {-1 if last is None else last} {epoch}")
    return lines


def sealed_bytes(plog) -> bytes:
    return b"".join(seg.path.read_bytes()[: seg.size] for seg in plog.segments[:-1])


def compare(ours: bytes, kafkas: bytes) -> None:
    """Byte for byte; on a difference, the batches side by side say where."""
    if ours != kafkas:
        a = [HEADER.unpack_from(b.bytes()) for b in iter_batches(ours)]
        b = [HEADER.unpack_from(x.bytes()) for x in iter_batches(kafkas)]
        assert a == b
    assert ours == kafkas


@pytest.mark.parametrize(
    "codec,timestamps",
    [
        (Codec.NONE, "CreateTime"),
        (Codec.NONE, "LogAppendTime"),
        (Codec.GZIP, "CreateTime"),
        (Codec.SNAPPY, "CreateTime"),
        (Codec.LZ4, "CreateTime"),
        (Codec.ZSTD, "CreateTime"),
    ],
)
def test_cleaned_segments_are_what_kafkas_filter_writes(
    tmp_path: Path, kafka_filter, codec: Codec, timestamps: str
) -> None:
    clock = Clock()
    d = tmp_path / "t-0"
    cfg = {"segment_bytes": 1 << 16, "delete_retention_ms": RETENTION}
    plog = open_log(d, clock=clock, message_timestamp_type=timestamps, **cfg)
    build(plog, codec)
    plog.roll()
    plog.config = plog.config.altered({"cleanup.policy": "compact"})  # keyless records imported
    cleaner = new_cleaner(clock)
    upper = plog.active_segment.base_offset

    # first pass: everything dirty; the tombstone's batch gets its delete horizon
    before = sealed_bytes(plog)
    expected = run_kafka(kafka_filter, before, params(plog, clock(), 0, upper), tmp_path)
    end, _ = clean(plog, cleaner)
    compare(sealed_bytes(plog), expected)

    # second pass, past the horizon: the tombstone goes; the first cleaned segment and the new
    # one are cleaned as one group, as filterTo over both
    clock.advance(RETENTION)
    plog.append(build_batch([rec("h", "12", clock())]))
    plog.roll()
    upper = plog.active_segment.base_offset
    before = sealed_bytes(plog)
    expected = run_kafka(kafka_filter, before, params(plog, clock(), end, upper), tmp_path)
    clean(plog, cleaner, first_dirty=end)
    assert len(plog.segments) == 2  # one group
    compare(sealed_bytes(plog), expected)
    plog.close()

"""Thousands of hostile frames, mutated from what real clients send (tests/integration/fuzz_frames.py):
the broker stays up, logs no traceback, keeps its memory bounded and acknowledged records intact,
and a well-behaved client is served throughout.

`FUZZ_SEED` and `FUZZ_FRAMES` (environment) pick another run; a failure names the seed.
Topic auto-creation is off: with it on, made-up topic names create topics, which is what
`auto.create.topics.enable=true` means, not a fault.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compat_tests.brokers import BrokerProcess
from rdmalog.store.records import Record, build_batch, decode_all
from tests.integration.fuzz_frames import (
    Flood,
    Mutator,
    Watcher,
    broker_tracebacks,
    capture_corpus,
)
from tests.integration.rawkafka import RawClient, list_offset, produce

SEED = int(os.environ.get("FUZZ_SEED", "20"))
FRAMES = int(os.environ.get("FUZZ_FRAMES", "4000"))
PEAK_RSS_LIMIT = 300 * 1024 * 1024


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    frames = capture_corpus(tmp_path_factory.mktemp("fuzz-capture"))
    assert len({f[4:8] for f in frames}) >= 20, "the clients sent too few kinds of request"
    return frames


def _fetch_all(c: RawClient, topic: str) -> list[bytes]:
    body = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 24,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 24,
        }]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    records = c.call(1, 12, body)["responses"][0]["partitions"][0]["records"]
    return [r.value for r in decode_all(bytes(records))]


def _vm(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def test_fuzzed_frames(corpus: list[bytes], tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", overrides={"auto.create.topics.enable": "false"}, log_dir=tmp_path
    )
    broker.start()
    try:
        address = (broker.host, broker.port)
        values = [b"intact-%d" % i for i in range(200)]
        with RawClient(broker.bootstrap) as c:
            body = {"topics": [{"name": "intact", "num_partitions": 1, "replication_factor": 1}]}
            assert c.call(19, 7, {**body, "timeout_ms": 30000})["topics"][0]["error_code"] == 0
            batch = build_batch([Record(None, v) for v in values])
            assert produce(c, "intact", 0, bytes(batch))["error_code"] == 0

        watcher = Watcher(address)
        watcher.start()
        stats = Flood(address, Mutator(corpus, SEED), FRAMES, connections=4).run()
        watcher.stop()

        assert broker.running, f"seed {SEED}: the broker died"
        assert stats.frames == FRAMES and stats.closed_by_broker > 0
        assert not watcher.failures, f"seed {SEED}: the well-behaved client failed"
        assert watcher.latencies, "the well-behaved client was never answered"
        peak = _vm(broker.proc.pid, "VmHWM")
        assert peak < PEAK_RSS_LIMIT, f"seed {SEED}: peak RSS {peak >> 20} MiB"
        with RawClient(broker.bootstrap) as c:
            assert list_offset(c, "intact", 0, -2)["offset"] == 0
            assert _fetch_all(c, "intact")[: len(values)] == values
    finally:
        broker.stop()
    tracebacks = broker_tracebacks(broker.stderr_path.read_text())
    assert not tracebacks, f"seed {SEED}: {len(tracebacks)} tracebacks, first: {tracebacks[0]}"

"""A full log directory (issue 20 item 6): Kafka's error codes, deletion frees space, the broker stops
and starts again, and its log says what is full and what to do.

The data dir is a 24 MiB tmpfs this test mounts (skipped, with the reason, where mounting is not
permitted). A filler file takes every free byte after some records are written, so the broker meets
a full disk with topics and data in place.
"""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.brokers import BrokerProcess
from rdmalog.store.records import Record, build_batch
from tests.integration.rawkafka import RawClient, list_offset, produce

KAFKA_STORAGE_ERROR = 56
COORDINATOR_NOT_AVAILABLE = 15
MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"cannot mount a tmpfs here ({exc} {detail.decode(errors='replace')})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def fill(directory: Path) -> Path:
    """A file taking every free byte of `directory`'s file system (down to one page)."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (MIB, 64 * 1024, 4096):
            block = b"\0" * chunk
            while True:
                try:
                    if os.write(fd, block) < chunk:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return path


def _create(c: RawClient, name: str) -> dict:
    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}]}
    return c.call(19, 7, {**body, "timeout_ms": 30000})["topics"][0]


def _batch(n: int = 100) -> bytes:
    return bytes(build_batch([Record(None, os.urandom(2000)) for _ in range(n)]))


def test_full_disk(small_disk: Path) -> None:
    data = small_disk / "data"
    broker = BrokerProcess(
        data,
        overrides={"log.segment.bytes": str(MIB), "log.retention.check.interval.ms": "200"},
        log_dir=small_disk.parent,
    )
    broker.start()
    try:
        with RawClient(broker.bootstrap) as c:
            assert _create(c, "keep")["error_code"] == 0
            assert _create(c, "big")["error_code"] == 0
            for _ in range(3):
                assert produce(c, "keep", 0, _batch())["error_code"] == 0
            for _ in range(20):  # about 4 MiB, five segments
                assert produce(c, "big", 0, _batch())["error_code"] == 0
            keep_end = list_offset(c, "keep", 0, -1)["offset"]
            filler = fill(small_disk)

            res = produce(c, "keep", 0, _batch())
            assert res["error_code"] == KAFKA_STORAGE_ERROR
            created = _create(c, "new")
            assert created["error_code"] == KAFKA_STORAGE_ERROR, created
            assert created["error_message"]
            coordinator = c.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            assert coordinator["coordinators"][0]["error_code"] == COORDINATOR_NOT_AVAILABLE
            pid = c.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                 "producer_id": -1, "producer_epoch": -1})  # fmt: skip
            assert pid["error_code"] == 14  # COORDINATOR_LOAD_IN_PROGRESS: retriable
            records = {
                "topics": [{"name": "big", "partitions": [{"partition_index": 0, "offset": 100}]}]
            }
            (topic,) = c.call(21, 2, {**records, "timeout_ms": 30000})["topics"]  # answered
            assert topic["partitions"][0]["error_code"] in (0, KAFKA_STORAGE_ERROR)

            # Deleting a topic needs no space and frees its space at once.
            free_before = os.statvfs(small_disk).f_bavail
            deleted = c.call(20, 6, {"topics": [{"name": "big", "topic_id": uuid.UUID(int=0)}],
                                     "timeout_ms": 30000})["responses"][0]  # fmt: skip
            assert deleted["error_code"] == 0, deleted
            assert os.statvfs(small_disk).f_bavail > free_before
            filler.unlink()
            filler = fill(small_disk)  # full again, for the shutdown
        assert broker.stop() == 0

        broker.start()  # a full disk does not keep the broker from starting
        with RawClient(broker.bootstrap) as c:
            assert list_offset(c, "keep", 0, -1)["offset"] == keep_end
            assert [t["name"] for t in c.call(3, 12, {"topics": None})["topics"]] == ["keep"]
            assert produce(c, "keep", 0, _batch())["error_code"] == KAFKA_STORAGE_ERROR
            filler.unlink()  # space again: writes work again
            assert produce(c, "keep", 0, _batch())["error_code"] == 0
        assert broker.stop() == 0
    finally:
        broker.stop()
    log = broker.stderr_path.read_text()
    assert "Traceback" not in log
    assert "broker failed to start" not in log
    assert "is full" in log and "Free space: delete topics or records" in log
    assert "writes to" in log and "succeed again" in log

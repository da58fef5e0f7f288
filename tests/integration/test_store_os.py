"""The store against real OS parts: a process killed (SIGKILL) mid-append recovers to a batch
boundary; a log's file slice goes through a socket's sendfile after its segment was deleted."""

from __future__ import annotations

from pathlib import Path

from rdmalog.store import checkpoints as ck
from rdmalog.store.records import decode_all
from tests.unit.store.helpers import batch, open_log, open_store


def test_file_slice_goes_through_sock_sendfile_after_deletion(tmp_path: Path) -> None:
    import asyncio
    import socket

    plog = open_log(tmp_path / "t-0", segment_bytes=1000)
    for _ in range(12):
        plog.append(batch(2, size=100))
    s = plog.read(0, 1 << 20)
    expected = s.read()
    plog.delete_records(plog.high_watermark)
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()

    async def send() -> bytes:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            sent = await loop.sock_sendfile(a, s.file, s.position, s.length)
            assert sent == s.length
            got = b""
            while len(got) < s.length:
                got += await loop.sock_recv(b, 65536)
            return got
        finally:
            a.close()
            b.close()

    assert asyncio.run(send()) == expected
    plog.close()


CHILD = r"""
import sys
from pathlib import Path
from rdmalog.config import BrokerConfig
from rdmalog.store.log_manager import Store
from rdmalog.store.records import Record, build_batch

store = Store(Path(sys.argv[1]), BrokerConfig.from_sources(None, {"log.segment.bytes": "20000"}))
store.open(start_maintenance=False)
store.create_topic("k", 1, {})
plog = store.partition("k", 0)
for i in range(200_000):  # bounded; the parent kills the process long before the end
    plog.append(build_batch([Record(b"%d" % i, b"v" * 100)] * 3))
    if i == 300:
        print("acked", plog.log_end_offset, flush=True)
"""


def test_sigkill_mid_append_recovers_to_a_batch_boundary(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("acked"), line
        acked = int(line.split()[1])
        proc.kill()  # SIGKILL: no close, no trim, no clean-shutdown marker
    finally:
        proc.wait(timeout=60)
    assert not (tmp_path / ck.CLEAN_SHUTDOWN_FILE).exists()
    store = open_store(tmp_path)
    plog = store.partition("k", 0)
    assert plog.log_end_offset >= acked and plog.log_end_offset % 3 == 0
    pos, seen = 0, 0
    while (s := plog.read(pos, 1 << 20)) is not None:
        recs = decode_all(s.read())
        assert [r.offset for r in recs] == list(range(pos, pos + len(recs)))
        seen += len(recs)
        pos += len(recs)
    assert seen == plog.log_end_offset
    store.close()

"""One request of 1 MiB costs bounded memory and does not stall other clients (issue 20 item 2).

Each request is built to cost the most per byte: arrays of the smallest elements (empty keys, empty
topics), names repeated to amplify the answer. The broker's peak RSS (VmHWM, reset before each
request through /proc/<pid>/clear_refs) may grow by at most 64 MiB, and another client's ApiVersions,
sent once the big request is in, is answered before the big request's answer begins: the event loop
serves others while it works. Answered or refused (connection closed), the broker stays up.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.protocol import encode_request
from gateway.protocol.primitives import encode_uvarint as uv

MIB = 1 << 20
RSS_GROWTH_LIMIT_MIB = 64


def _frame(api_key: int, version: int, body: bytes, flexible: bool) -> bytes:
    head = struct.pack(">hhih", api_key, version, 7, 1) + b"x" + (b"\0" if flexible else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


def _heavy_requests() -> Iterator[tuple[str, bytes]]:
    n = MIB - 64
    # FindCoordinator v4: key_type, a compact array of n empty compact strings, tags
    yield (
        "FindCoordinator v4 empty keys",
        _frame(10, 4, b"\0" + uv(n + 1) + b"\1" * n + b"\0", True),
    )
    k = n // 2
    yield "DescribeGroups v0 empty ids", _frame(15, 0, struct.pack(">i", k) + b"\0\0" * k, False)
    yield "Metadata v1 empty names", _frame(3, 1, struct.pack(">i", k) + b"\0\0" * k, False)
    k = n // 6  # names that cannot be auto-created: each is answered INVALID_TOPIC_EXCEPTION
    names = b"".join(struct.pack(">h", 4) + b"!%03x" % (i % 4096) for i in range(k))
    yield "Metadata v1 names", _frame(3, 1, struct.pack(">i", k) + names, False)
    k = n // 3  # group "g", generation -1, member "", no instance id, k topics {"", [], tags}
    body = uv(2) + b"g" + struct.pack(">i", -1) + uv(1) + uv(0) + uv(k + 1) + b"\1\1\0" * k
    yield "OffsetCommit v8 empty topics", _frame(8, 8, body + b"\0", True)
    k = n // 12
    parts = struct.pack(">iq", 0, -1) * k
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", k) + parts
    yield "ListOffsets v1 partitions", _frame(2, 1, body, False)
    k = n // 5  # DescribeConfigs v4: the topic "t" k times (each copy would be ~40 configs)
    res = b"\2" + uv(2) + b"t" + b"\0" + b"\0"
    yield "DescribeConfigs v4 one topic", _frame(32, 4, uv(k + 1) + res * k + b"\0\0\0", True)


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _broker_read_all(sock: socket.socket, broker_port: int) -> None:
    """Wait until the broker's end of `sock` has nothing left in its receive queue."""
    ours = sock.getsockname()[1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, queues = fields[1], fields[2], fields[4]
            if (
                int(local.split(":")[1], 16) == broker_port
                and int(remote.split(":")[1], 16) == ours
            ):
                if int(queues.split(":")[1], 16) == 0:
                    return
        time.sleep(0.01)
    raise AssertionError("the broker did not read the request")


def _read_frame_start(sock: socket.socket) -> bytes:
    """The first bytes of the next answer ('' when the broker closed the connection)."""
    try:
        return sock.recv(4)
    except ConnectionResetError:
        return b""


def _drain(sock: socket.socket) -> str:
    """Read one whole answer: 'answered' or 'closed'."""
    head = b""
    while len(head) < 4:
        chunk = _read_frame_start(sock)
        if not chunk:
            return "closed"
        head += chunk
    left = struct.unpack(">i", head[:4])[0] - (len(head) - 4)
    while left > 0:
        chunk = sock.recv(min(left, MIB))
        if not chunk:
            return "closed"
        left -= len(chunk)
    return "answered"


def _api_versions(sock: socket.socket) -> None:
    sock.sendall(encode_request(18, 0, 1, {}))
    assert _drain(sock) == "answered"


@pytest.fixture(scope="module")
def heavy_broker(tmp_path_factory: pytest.TempPathFactory):
    from compat_tests.brokers import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("heavy") / "data")
    broker.start()
    yield broker
    broker.stop()


@pytest.mark.parametrize("name,frame", list(_heavy_requests()), ids=lambda v: str(v)[:40])
def test_one_large_request_bounded(heavy_broker, name: str, frame: bytes) -> None:
    pid = heavy_broker.proc.pid
    addr = (heavy_broker.host, heavy_broker.port)
    with (
        socket.create_connection(addr, timeout=120) as other,
        socket.create_connection(addr, timeout=120) as big,
    ):
        _api_versions(other)  # connected and served before the big request
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _status(pid, "VmRSS")
        big.sendall(frame)
        _broker_read_all(big, heavy_broker.port)
        _api_versions(other)
        # The other client's answer came while the big request is still being worked on (or
        # after the broker refused it: then its connection is closed).
        ready, _, _ = select.select([big], [], [], 0)
        if ready:
            assert big.recv(1, socket.MSG_PEEK) == b"", f"{name}: ApiVersions waited for it"
        outcome = _drain(big)
        growth = _status(pid, "VmHWM") - before
        assert growth <= RSS_GROWTH_LIMIT_MIB * MIB, (
            f"{name} ({outcome}) grew the broker by {growth / MIB:.0f} MiB"
        )
        _api_versions(other)  # still up

"""Hostile and careless clients at the connection level, against `rdmalog serve` on 127.0.0.1 (issue 20,
items 1, 3 and 8): memory taken as a frame's bytes arrive and bounded across connections
(`queued.max.request.bytes`), stalled frames and idle connections closed, `max.connections` and
`max.connections.per.ip`, running out of descriptors, and repeated log lines rate-limited per client.

Memory is the broker process's resident set (VmRSS of /proc/PID/status). Every wait is bounded; the
waits that check something does *not* happen are short and can only let a broken broker pass, never
fail a working one.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

import pytest

from compat_tests.brokers import BrokerProcess
from gateway.protocol import decode_response, encode_request

MiB = 1 << 20
WAIT_S = 20.0  # bound on anything that must happen
QUIET_S = 1.0  # how long something that must not happen is watched for


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(WAIT_S)
    sock.connect(("127.0.0.1", port))
    return sock


def _api_versions(corr: int = 1) -> bytes:
    return encode_request(18, 0, corr, {})


def _produce(corr: int, size: int) -> bytes:
    """A Produce v3 frame of exactly `size` bytes (size prefix excluded) to a topic that does not
    exist: the broker answers it UNKNOWN_TOPIC_OR_PARTITION without looking at the records."""

    def frame(records: int) -> bytes:
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout": 5000,
            "topic_data": [
                {"name": "nope", "partition_data": [{"index": 0, "records": b"r" * records}]}
            ],
        }
        return encode_request(0, 3, corr, body)

    overhead = len(frame(0)) - 4
    data = frame(size - overhead)
    assert len(data) == size + 4
    return data


def _read_frame(sock: socket.socket, timeout: float = WAIT_S) -> bytes | None:
    """One response frame, or None when nothing arrives within `timeout` (raises on a close)."""
    sock.settimeout(timeout)
    try:
        head = sock.recv(4, socket.MSG_WAITALL)
    except TimeoutError:
        return None
    finally:
        sock.settimeout(WAIT_S)
    if len(head) < 4:
        raise ConnectionError("closed by the broker")
    (size,) = struct.unpack(">i", head)
    body = sock.recv(size, socket.MSG_WAITALL)
    assert len(body) == size
    return body


def _round_trip(sock: socket.socket, corr: int = 1) -> None:
    sock.sendall(_api_versions(corr))
    body = _read_frame(sock)
    assert body is not None, "no ApiVersions answer"
    got, resp = decode_response(18, 0, body)
    assert got == corr and resp["error_code"] == 0


def _closed_by_broker(sock: socket.socket, timeout: float = WAIT_S, trickle: bool = False) -> bool:
    """True when the broker closes `sock` within `timeout` (with `trickle`, one byte is sent every
    200 ms meanwhile, so the connection is not idle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trickle:
            try:
                sock.send(b"t")
            except OSError:
                return True
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                if sock.recv(65536) == b"":
                    return True
            except OSError:
                return True
    return False


@pytest.fixture
def serve(broker_factory):
    """`serve(**overrides)`: a fresh local `rdmalog serve`, waited until it answers."""

    def start(**overrides: str) -> BrokerProcess:
        broker = broker_factory(overrides=overrides, local=True)
        probe = _connect(broker.port)
        _round_trip(probe)
        probe.close()
        return broker

    return start


def _closing(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


# --- item 1: memory from the size prefix ----------------------------------------------------------


def test_a_size_prefix_alone_does_not_take_the_frames_memory(serve):
    broker = serve()
    pid = broker.proc.pid
    before = _rss(pid)
    socks = [_connect(broker.port) for _ in range(4)]
    try:
        for s in socks:
            s.sendall(struct.pack(">i", 60 * MiB) + b"x")  # 60 MiB announced, one byte sent
        check = _connect(broker.port)
        _round_trip(check)  # the broker has read the prefixes by now
        check.close()
        grown = _rss(pid) - before
        assert grown < 32 * MiB, f"4 prefixes of 60 MiB grew the broker by {grown / MiB:.0f} MiB"
    finally:
        _closing(socks)


def test_frames_wait_for_queued_max_request_bytes(serve):
    frame = 8 * MiB
    broker = serve(
        **{"socket.request.max.bytes": str(frame), "queued.max.request.bytes": str(2 * frame)}
    )
    first, second, third = (_connect(broker.port) for _ in range(3))
    socks = [first, second, third]
    try:
        heads = [_produce(1, frame), _produce(2, frame)]
        first.sendall(heads[0][:1000])
        second.sendall(heads[1][:1000])
        check = _connect(broker.port)
        socks.append(check)
        _round_trip(check)  # both reservations are taken: 16 MiB, the limit

        sender = threading.Thread(target=third.sendall, args=(_produce(3, frame),), daemon=True)
        sender.start()
        assert _read_frame(third, QUIET_S) is None, "read while the budget was spent"
        _round_trip(check, 2)  # small frames are not held up

        first.sendall(heads[0][1000:])  # completes: its 8 MiB go back, the third frame may come
        for sock, corr in ((first, 1), (third, 3)):
            body = _read_frame(sock)
            assert body is not None
            got, resp = decode_response(0, 3, body)
            assert got == corr
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 3
        sender.join(WAIT_S)
    finally:
        _closing(socks)


def test_a_stalled_frame_is_closed_at_its_deadline(serve):
    broker = serve(**{"request.receive.timeout.ms": "1000"})
    stalled = _connect(broker.port)
    try:
        stalled.sendall(struct.pack(">i", 100_000) + b"x" * 10)
        assert _closed_by_broker(stalled, trickle=True)
    finally:
        stalled.close()


# --- item 3: connection limits, idle connections, descriptors ---------------------------------------


def test_an_idle_connection_costs_a_few_kib(serve):
    broker = serve()
    pid = broker.proc.pid
    before = _rss(pid)
    socks = []
    try:
        for i in range(300):
            socks.append(_connect(broker.port))
            if i % 2:
                _round_trip(socks[-1])  # one request answered, then idle
        check = _connect(broker.port)
        socks.append(check)
        _round_trip(check)
        grown = _rss(pid) - before
        assert grown < 30 * MiB, f"300 idle connections grew the broker by {grown / MiB:.1f} MiB"
    finally:
        _closing(socks)


def test_idle_connections_are_closed(serve):
    broker = serve(**{"connections.max.idle.ms": "1000"})
    idle, busy = _connect(broker.port), _connect(broker.port)
    try:
        _round_trip(idle)
        deadline = time.monotonic() + WAIT_S
        corr = 1
        closed = False
        while not closed and time.monotonic() < deadline:
            corr += 1
            _round_trip(busy, corr)  # a connection in use stays open
            closed = _closed_by_broker(idle, timeout=0.3)
        assert closed, "an idle connection was left open"
    finally:
        _closing([idle, busy])


def test_max_connections_holds_new_connections_until_one_closes(serve):
    broker = serve(**{"max.connections": "4"})
    socks = [_connect(broker.port) for _ in range(4)]
    try:
        for s in socks:
            _round_trip(s)
        waiting = _connect(broker.port)  # completes in the listen backlog
        socks.append(waiting)
        waiting.sendall(_api_versions(9))
        assert _read_frame(waiting, QUIET_S) is None, "a fifth connection was served"
        socks.pop(0).close()
        body = _read_frame(waiting)
        assert body is not None and decode_response(18, 0, body)[0] == 9
    finally:
        _closing(socks)


def test_max_connections_per_ip_closes_the_extra_connection(serve):
    broker = serve(**{"max.connections.per.ip": "3"})
    socks = [_connect(broker.port, "127.0.0.2") for _ in range(3)]
    try:
        for s in socks:
            _round_trip(s)
        extra = _connect(broker.port, "127.0.0.2")
        socks.append(extra)
        assert _closed_by_broker(extra), "a fourth connection from one address was kept"
        other = _connect(broker.port, "127.0.0.3")  # another address is not affected
        socks.append(other)
        _round_trip(other)
        assert "rejected connection from 127.0.0.2" in broker.stderr_tail()
    finally:
        _closing(socks)


def test_max_connections_per_ip_changed_at_run_time(serve):
    """A dynamic broker config (IncrementalAlterConfigs on BROKER "0") lowers the limit live."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    broker = serve()
    res = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("max.connections.per.ip", "2", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    admin.incremental_alter_configs([res])[res].result(timeout=WAIT_S)
    socks = [_connect(broker.port, "127.0.0.2") for _ in range(2)]
    try:
        for s in socks:
            _round_trip(s)
        extra = _connect(broker.port, "127.0.0.2")
        socks.append(extra)
        assert _closed_by_broker(extra), "a third connection from one address was kept"
    finally:
        _closing(socks)


class _FewDescriptors(BrokerProcess):
    """`rdmalog serve` with a low descriptor limit it cannot raise."""

    NOFILE = 128

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.NOFILE}:{self.NOFILE}", "--", *super().command()]


def test_out_of_descriptors_backs_off_and_logs_once_in_a_while(tmp_path):
    broker = _FewDescriptors(tmp_path / "data", log_dir=tmp_path)
    broker.start()
    socks: list[socket.socket] = []
    try:
        for _ in range(_FewDescriptors.NOFILE + 72):
            socks.append(_connect(broker.port))  # the last ones wait in the backlog
        time.sleep(2.0)  # let the broker hit the limit for a while
        log = broker.stderr_tail(100_000)
        lines = [line for line in log.splitlines() if "accept" in line]
        assert 1 <= len(lines) <= 3, f"{len(lines)} accept lines:\n" + "\n".join(lines[:10])
        assert "Traceback" not in log
        _closing(socks)
        socks = [_connect(broker.port)]
        _round_trip(socks[0])  # accepting resumed once descriptors were free
    finally:
        _closing(socks)
        broker.close()


# --- item 8: repeated log lines ---------------------------------------------------------------------


def test_warnings_are_rate_limited_per_client(serve):
    broker = serve()
    for _ in range(100):
        bad = _connect(broker.port, "127.0.0.2")
        bad.sendall(struct.pack(">i", -1))
        assert _closed_by_broker(bad)
        bad.close()
    other = _connect(broker.port, "127.0.0.3")
    other.sendall(struct.pack(">i", -1))
    assert _closed_by_broker(other)
    other.close()
    check = _connect(broker.port)
    _round_trip(check)
    check.close()
    lines = [line for line in broker.stderr_tail(10_000).splitlines() if "request frame of" in line]
    flood = [line for line in lines if "127.0.0.2" in line]
    assert 1 <= len(flood) <= 10, f"{len(flood)} lines for 100 bad frames"
    assert any("127.0.0.3" in line for line in lines), "another client's line was held back"

"""Peers that misbehave: bad control requests, bad connection requests, hostile or stalled tcp
engine peers."""

from __future__ import annotations

import socket
import time

import pytest

from rdmalog.rdma import Producer
from rdmalog.rdma.client.endpoint import Endpoint
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport import tcp
from rdmalog.rdma.transport.interface import Access, RemoteRegion, Status
from tests.integration.native.helpers import store_records, wait_for


def test_bad_control_requests_are_answered_and_the_service_stays_up(broker, caplog):
    """Malformed lines, requests that are not objects, missing or mistyped fields (a float
    partition is not partition 0) get invalid_request naming the problem, logged as the client's
    mistake rather than a failure; a line over the limit is answered and its connection closed."""
    import json
    import logging

    from rdmalog.rdma.control import MAX_LINE

    st, svc = broker
    st.create_topic("c", 1)
    caplog.set_level(logging.INFO, "rdmalog.rdma.control")
    host, _, port = svc.control_address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        f = raw.makefile("rb")
        for line in (b"not json", b"[1, 2]", b"\xff\xfe", b'{"op": 7}'):
            raw.sendall(line + b"\n")
            assert json.loads(f.readline())["error"] == "invalid_request"
        raw.sendall(b"x" * (MAX_LINE + 10) + b"\n")
        assert json.loads(f.readline())["message"] == "request too large"
        assert f.readline() == b""  # then closed
    p = Producer(svc.control_address)  # an attached session reaches the field checks
    for req, says in (
        ({"topic": "c"}, "'produce_access' needs 'partition'"),
        ({"topic": "c", "partition": 0.0}, "'partition' must be int, not float"),
        ({"topic": None, "partition": 0}, "'topic' must be str, not NoneType"),
        ({"topic": "c", "partition": 0, "mode": 1}, "'mode' must be str, not int"),
    ):
        with pytest.raises(ControlError) as e:
            p.control("produce_access", **req)
        assert (e.value.code, e.value.message) == ("invalid_request", says)
    with pytest.raises(ControlError, match="must be int"):
        p.control("read_access", topic="c", partition=0, offset="0")
    assert p.produce("c", 0, b"still served") == (0, 0)
    p.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


@pytest.mark.parametrize("request_bytes", [b"not json\n", b'{"qp": 1}'])
def test_bad_connection_requests_do_not_stop_later_clients(broker, kind, request_bytes):
    """A garbage or abandoned connection request is dropped; the next client still connects."""
    st, svc = broker
    st.create_topic("after-bad", 1, {})
    address = svc.rdma_address
    if kind == "shm":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
    else:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
    sock.sendall(request_bytes)
    sock.close()  # gone before (or while) the service sets the queue pair up
    producer = Producer(svc.control_address, kind)
    base, _ = producer.produce("after-bad", 0, b"still served")
    producer.close()
    assert base == 0
    assert [r.value for r in store_records(st, "after-bad")] == [b"still served"]


def _raw_tcp_peer(svc) -> socket.socket:
    """A queue pair to the broker's tcp engine whose frames the test writes by hand."""
    host, port = svc.rdma_address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(b'{"qp": 1}\n')
    while not sock.recv(1).endswith(b"\n"):  # the broker's setup line
        pass
    return sock


def _bad_status_to_an_ack(sock: socket.socket) -> None:
    """A WRITE_WITH_IMM into no grant gets a REVOKED acknowledgement (a SEND); its response
    frame carries a status no RNIC has."""
    sock.sendall(tcp.FRAME.pack(tcp.OP_WRITE_IMM, 0, 0, 0, 1, 0, 0, 5 << 16, 0, 0))
    got = b""
    while len(got) < 2 * tcp.HDR:  # the WRITE's response, then the acknowledgement
        got += sock.recv(tcp.HDR)
    sock.sendall(tcp.FRAME.pack(tcp.OP_SEND | tcp.RESP, 200, 0, 0, 0, 0, 0, 0, 0, 0))


@pytest.mark.parametrize("kind", ["tcp"])
@pytest.mark.parametrize(
    "hostile",
    [
        "status", "unknown op", "huge send", "write without payload", "half a header",
    ],
)  # fmt: skip
def test_a_hostile_tcp_peer_does_not_stop_the_engine(broker, hostile, caplog):
    """One engine thread executes every tcp queue pair's frames. A frame it could not take
    (a response status no RNIC has) used to end that thread, and every tcp client with it; a
    peer that stopped mid-frame (a WRITE whose payload never came) held it for 10 s; a SEND
    claiming 4 GiB was allocated. Now a bad frame closes its connection with a log line, a
    stalled one waits alone, and the next client is served at once."""
    import logging

    st, svc = broker
    st.create_topic("hostile", 1)
    caplog.set_level(logging.INFO, "rdmalog.rdma.transport.tcp")
    sock = _raw_tcp_peer(svc)
    pack = tcp.FRAME.pack
    if hostile == "status":
        _bad_status_to_an_ack(sock)
    elif hostile == "unknown op":
        sock.sendall(pack(42, 0, 0, 0, 1, 0, 0, 0, 0, 0))
    elif hostile == "huge send":
        sock.sendall(pack(tcp.OP_SEND, 0, 0, 0, 1, 0, 0xFFFFFFF0, 0, 0, 0))
    elif hostile == "write without payload":
        sock.sendall(pack(tcp.OP_WRITE, 0, 0, 7, 1, 7 << 32, 100, 0, 0, 0) + b"only a part")
    else:
        sock.sendall(pack(tcp.OP_WRITE, 0, 0, 0, 1, 0, 0, 0, 0, 0)[:20])
    time.sleep(0.1)  # the engine takes the frame before the next client arrives
    t0 = time.monotonic()
    p = Producer(svc.control_address, timeout=5)
    assert p.produce("hostile", 0, b"still served") == (0, 0)
    assert time.monotonic() - t0 < 2
    p.close()
    if hostile in ("status", "unknown op", "huge send"):  # closed, and the broker says why
        sock.settimeout(5)
        while sock.recv(4096):
            pass
        assert any("closed" in r.getMessage() for r in caplog.records if r.name.endswith("tcp"))
    sock.close()


@pytest.mark.parametrize("kind", ["tcp"])
def test_a_tcp_peer_that_does_not_read_its_answers_holds_up_only_itself(broker):
    """The engine sent READ responses (and the service its acknowledgements) with blocking
    sends: a client that posted READs and did not poll for a while (busy, stopped in a debugger)
    filled its socket, and the engine waited in a send for as long, serving no other queue pair.
    Now what the peer has no room for waits in its queue pair's outbox, the engine takes no
    more of its frames meanwhile, and serves the others."""
    st, svc = broker
    st.create_topic("slow", 1)
    reader = Endpoint(svc.control_address, "tcp")
    g = reader.ctl.request("read_access", topic="slow", partition=0, offset=-2)
    region = RemoteRegion.from_dict(g["region"])
    local = reader.device.alloc_mr(1 << 20, Access.LOCAL_WRITE)
    n = 64  # 64 MiB of answers: far more than the sockets hold
    for i in range(n):
        reader.qp.post_read(i, local, 0, 1 << 20, region.addr, region.rkey)
    time.sleep(0.2)  # the engine has sent what fits, and the rest waits for the reader
    t0 = time.monotonic()
    p = Producer(svc.control_address, timeout=3)
    assert p.produce("slow", 0, b"still served") == (0, 0)
    assert time.monotonic() - t0 < 2
    got = []
    for _ in range(200):  # the reader polls at last: every answer, in order
        got += reader.cq.wait(1.0, 64)
        if len(got) == n:
            break
    assert [(w.wr_id, w.status) for w in got] == [(i, Status.SUCCESS) for i in range(n)]
    p.close()
    reader.close()


@pytest.mark.parametrize("kind", ["tcp"])
def test_a_queue_pair_that_never_said_hello_is_dropped_when_it_closes(broker):
    """A connection that never binds to a control session (a client that died in between, a
    stray peer) has no session end to clean up after it: its flushed receives now do."""
    st, svc = broker
    sock = _raw_tcp_peer(svc)
    assert wait_for(lambda: svc.stats()["qps"] == 1)
    sock.close()
    assert wait_for(lambda: svc.stats()["qps"] == 0 and len(svc.device._mrs) == 0)

"""Client sessions ending, cleanly or not: what they held (descriptors, regions, slots, buffers) is
given back."""

from __future__ import annotations

import gc
import multiprocessing
import os
from pathlib import Path

import pytest

from rdmalog.rdma import Consumer, Producer
from tests.integration.native.helpers import consume, wait_for


def test_closing_twice_does_nothing_more(broker):
    """close() of a closed consumer or producer returns; on tcp it used to raise AttributeError
    from the transport device closed the first time (e.g. a `with` block after an explicit
    close)."""
    st, svc = broker
    st.create_topic("cc", 1)
    with Producer(svc.control_address) as p, Consumer(svc.control_address) as c:
        p.produce("cc", 0, b"v")
        c.assign([("cc", 0)])
        assert [r.value for r in consume(c, 1)] == [b"v"]
        c.close()
        p.close()
    c.close()
    p.close()
    assert wait_for(lambda: svc.stats()["qps"] == 0)


def _open_fds() -> int:
    gc.collect()  # what only the garbage holds is given back with it
    return len(os.listdir("/proc/self/fd"))


def test_closed_and_reconnected_clients_give_back_their_descriptors(broker):
    """A client's completion queue was never closed, by close() or by reconnect(): on tcp its
    eventfd (a bare descriptor, which no garbage collection closes) leaked with every client and
    every reconnect, so a process that makes clients (a Spark executor's tasks) or rides broker
    restarts ran out of descriptors."""
    st, svc = broker
    st.create_topic("fd", 1)

    def clients(reconnects: int) -> None:
        with Producer(svc.control_address) as p, Consumer(svc.control_address) as c:
            c.assign([("fd", 0)])
            for _ in range(reconnects):
                p.reconnect(5)
                c.reconnect(5)
            p.produce("fd", 0, b"v")
            assert consume(c, 1)[-1].value == b"v"

    clients(0)  # what stays for the process (imports, the service's own sessions) is there
    assert wait_for(lambda: svc.stats()["qps"] == 0, timeout=30)
    before = _open_fds()
    for _ in range(3):
        clients(3)
    assert wait_for(lambda: _open_fds() <= before, timeout=30)  # the broker closes a little later


def test_reassigning_partitions_gives_their_buffers_back(broker):
    """A partition taken out of the assignment gives back its receive buffer: it was kept, one
    registered region per change, and on shm (1024 regions per device) a consumer whose
    assignment changed ~1000 times failed with "region table full"."""
    st, svc = broker
    st.create_topic("ra", 2)
    p = Producer(svc.control_address)
    p.produce("ra", 1, b"one")
    c = Consumer(svc.control_address)
    c.assign([("ra", 0)])
    regions = len(c.device._mrs)
    for i in range(1, 1100):
        c.assign([("ra", i % 2)])
    assert len(c.device._mrs) == regions and c.assignment() == [("ra", 1)]
    assert [r.value for r in consume(c, 1)] == [b"one"]
    c.close()
    p.close()


def _consume_and_die(addr: str, kind: str, q) -> None:
    c = Consumer(addr, kind)
    c.assign([("d", 0), ("d", 1)])
    q.put(len(consume(c, 2)))
    q.close()
    q.join_thread()
    os._exit(0)  # no release, no close: the broker sees the session drop


_FORKS_AND_READS_ON = """
import os, sys
from rdmalog.rdma import Consumer

c = Consumer(sys.argv[1])
c.assign([("fk", 0)])
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: the exit handlers the child inherited run
os.waitpid(pid, 0)
c.assign([("fk", 0), ("fk", 1)])  # a new region: a new file in the device's directory
got = []
for _ in range(100):
    got += [r.value for r in c.poll(0.05)]
    if len(got) == 2:
        break
print(sorted(got))
c.close()
"""


@pytest.mark.parametrize("kind", ["shm"])
def test_a_forked_child_exiting_leaves_its_parents_devices_alone(broker, tmp_path):
    """A process with a native client forks, and the child exits normally: the exit handler of
    each shm device the child inherited removed the parent's /dev/shm directory, so the parent's
    next region (a partition assigned, a buffer registered) failed with FileNotFoundError and the
    broker could not ring its doorbells. Only the process that made a device removes it now."""
    import subprocess
    import sys

    st, svc = broker
    st.create_topic("fk", 2)
    p = Producer(svc.control_address)
    p.produce("fk", 0, b"zero")
    p.produce("fk", 1, b"one")
    p.close()
    script = tmp_path / "forks.py"
    script.write_text(_FORKS_AND_READS_ON)
    run = subprocess.run(
        [sys.executable, str(script), svc.control_address],
        capture_output=True, text=True, timeout=60,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[b'one', b'zero']"


def test_consumer_that_dies_frees_its_slots(broker, kind):
    st, svc = broker
    st.create_topic("d", 2)
    p = Producer(svc.control_address)
    p.produce("d", 0, b"a")
    p.produce("d", 1, b"b")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    pr = ctx.Process(target=_consume_and_die, args=(svc.control_address, kind, q))
    pr.start()
    assert q.get(timeout=60) == 2
    pr.join(30)
    assert wait_for(lambda: svc.stats()["slots"] == 0 and svc.stats()["readers"] == 0)
    p.close()


def test_client_sessions_give_back_their_regions(broker):
    """Each client queue pair's receive and acknowledgement buffers were registered and never
    deregistered: on shm (1024 regions per device) a broker refused new clients after ~500
    sessions over its life ("region table full"). A session's end now gives its region back."""
    st, svc = broker
    st.create_topic("rg", 1)
    base = len(svc.device._mrs)
    for _ in range(5):
        with Producer(svc.control_address) as p:
            p.produce("rg", 0, b"x")
        with Consumer(svc.control_address) as c:
            c.assign([("rg", 0)])
            c.poll(0.01)
    assert wait_for(lambda: svc.stats()["qps"] == 0)
    assert wait_for(lambda: len(svc.device._mrs) == base)


def test_a_closed_client_says_so(broker):
    """Every operation of a closed producer or consumer raises ClientClosedError, as Kafka
    clients refuse everything after close: assign() raised an unrelated TypeError on shm and
    BrokerDisconnected ("the broker went away") on tcp, and reconnect() opened a session that
    nothing released."""
    from rdmalog.rdma import ClientClosedError

    st, svc = broker
    st.create_topic("closed", 1)
    p, c = Producer(svc.control_address), Consumer(svc.control_address)
    p.close()
    c.close()
    for op in (
        lambda: p.send("closed", 0, b"x"),
        lambda: p.produce("closed", 0, b"x"),
        lambda: c.assign([("closed", 0)]),
        lambda: c.poll(0.01),
        lambda: c.reconnect(timeout=1),
        lambda: p.reconnect(timeout=1),
    ):
        with pytest.raises(ClientClosedError, match="is closed"):
            op()
    assert wait_for(lambda: svc.stats()["qps"] == 0)

"""The verbs transport's mapping, without an RDMA device: work-request bookkeeping (no I/O) and,
where Debian's pyverbs imports, that the values and objects it hands to libibverbs are right."""

from __future__ import annotations

import socket

import pytest

from rdmalog.rdma.transport.interface import Access, Opcode, Status, TransportError
from rdmalog.rdma.transport.verbs import (
    ACCESS_ON_DEMAND,
    MAX_SEND_BYTES,
    SIGNAL_EVERY,
    WrTracker,
    file_region_flags,
    send_wr,
    wc_status,
)

GARBAGE = 0x7F  # libibverbs leaves an error completion's opcode undefined


def test_ids_are_unique_on_the_device_even_when_the_application_reuses_them():
    t = WrTracker()
    r = t.recv(3)  # a receive and a write with the same application id
    w, signaled = t.send(3, Opcode.WRITE, True)
    assert r != w and signaled
    assert t.complete(w, Status.SUCCESS, Opcode.WRITE) == (3, Opcode.WRITE)
    assert t.complete(r, Status.SUCCESS, Opcode.RECV_RDMA_WITH_IMM) == (
        3,
        Opcode.RECV_RDMA_WITH_IMM,
    )


def test_error_completions_get_the_posted_opcode():
    t = WrTracker()
    faa, _ = t.send(1, Opcode.FETCH_AND_ADD, True)
    imm, _ = t.send(9, Opcode.WRITE_WITH_IMM, False)
    rcv = t.recv(1)
    assert t.complete(faa, Status.REM_ACCESS_ERR, GARBAGE) == (1, Opcode.FETCH_AND_ADD)
    # the queue pair is in error now: the rest flush, unsignaled ones included
    assert t.complete(imm, Status.WR_FLUSH_ERR, GARBAGE) == (9, Opcode.WRITE)
    assert t.complete(rcv, Status.WR_FLUSH_ERR, GARBAGE) == (1, Opcode.RECV)
    assert t.complete(12345, Status.WR_FLUSH_ERR, GARBAGE) is None  # never posted


def test_unsignaled_sends_are_signaled_now_and_then_and_their_completions_swallowed():
    t = WrTracker()
    signaled_on_device = []
    for i in range(10 * SIGNAL_EVERY):
        dev, signaled = t.send(i, Opcode.WRITE_WITH_IMM, False)
        if signaled:  # the device reports these: the application never sees them
            signaled_on_device.append(dev)
            assert t.complete(dev, Status.SUCCESS, Opcode.WRITE) is None
        assert len(t._sends) <= SIGNAL_EVERY  # retired in order: the send queue is reclaimed
    assert len(signaled_on_device) == 10
    dev, signaled = t.send(77, Opcode.READ, True)  # an application-signaled one is reported
    assert signaled and t.complete(dev, Status.SUCCESS, Opcode.READ) == (77, Opcode.READ)


def test_writable_file_regions_use_on_demand_paging_where_the_device_has_it():
    head = Access.LOCAL_WRITE | Access.REMOTE_WRITE  # a producer's head segment
    write, read = 1 << 2, 1 << 3  # IBV_ODP_SUPPORT_WRITE / _READ
    assert file_region_flags(head, write | read) == int(head) | ACCESS_ON_DEMAND
    assert file_region_flags(head, read) == int(head)  # no ODP writes: a plain pin (old kernels)
    assert file_region_flags(head | Access.REMOTE_ATOMIC, write) == int(head | Access.REMOTE_ATOMIC)
    # consumers' regions are read-only: a plain pin, which kernels allow on file mappings
    assert file_region_flags(Access.REMOTE_READ, 0) == int(Access.REMOTE_READ)


def test_unknown_device_statuses_do_not_crash_the_poller():
    assert wc_status(5) is Status.WR_FLUSH_ERR
    assert wc_status(22) is Status.GENERAL_ERR  # IBV_WC_TM_ERR and anything newer


@pytest.fixture(scope="module")
def pyverbs_enums():
    from rdmalog.rdma.transport.verbs import _import_pyverbs

    try:
        _import_pyverbs()
        import pyverbs.enums as e
    except ImportError:
        pytest.skip("pyverbs is not installed (apt-get install python3-pyverbs)")
    return e


def test_values_match_libibverbs(pyverbs_enums):
    e = pyverbs_enums
    for st in Status:
        assert int(getattr(e, f"IBV_WC_{st.name}")) == st.value
    wc = {"SEND": "SEND", "WRITE": "RDMA_WRITE", "READ": "RDMA_READ", "CMP_AND_SWAP": "COMP_SWAP"}
    wc |= {"FETCH_AND_ADD": "FETCH_ADD", "RECV": "RECV", "RECV_RDMA_WITH_IMM": "RECV_RDMA_WITH_IMM"}
    for ours, theirs in wc.items():
        assert int(getattr(e, f"IBV_WC_{theirs}")) == Opcode[ours].value
    for acc in Access:
        assert int(getattr(e, f"IBV_ACCESS_{acc.name}")) == acc.value
    assert int(e.IBV_ACCESS_ON_DEMAND) == ACCESS_ON_DEMAND
    odp = {Access.REMOTE_WRITE: e.IBV_ODP_SUPPORT_WRITE, Access.REMOTE_READ: e.IBV_ODP_SUPPORT_READ}
    odp[Access.REMOTE_ATOMIC] = e.IBV_ODP_SUPPORT_ATOMIC
    for acc, bit in odp.items():  # each kind of access asks the device for its own ODP bit
        assert file_region_flags(Access.LOCAL_WRITE | acc, int(bit)) & ACCESS_ON_DEMAND
        others = sum(int(b) for a, b in odp.items() if a != acc)
        assert not file_region_flags(Access.LOCAL_WRITE | acc, others) & ACCESS_ON_DEMAND


def test_work_requests_as_libibverbs_gets_them(pyverbs_enums):
    e = pyverbs_enums
    wr = send_wr(5, Opcode.WRITE_WITH_IMM, 0x1000, 64, 7, False, imm=0x00010002)
    assert (wr.wr_id, wr.opcode, wr.send_flags) == (5, e.IBV_WR_RDMA_WRITE_WITH_IMM, 0)
    assert wr.imm_data == socket.htonl(0x00010002)  # network byte order on the wire
    wr.set_wr_rdma(9, 0x2000)
    faa = send_wr(6, Opcode.FETCH_AND_ADD, 0x1000, 8, 7, True)
    assert faa.opcode == e.IBV_WR_ATOMIC_FETCH_AND_ADD and faa.send_flags == e.IBV_SEND_SIGNALED
    faa.set_wr_atomic(9, 0x2008, 5, 0)
    for op, want in (
        (Opcode.WRITE, e.IBV_WR_RDMA_WRITE),
        (Opcode.READ, e.IBV_WR_RDMA_READ),
        (Opcode.CMP_AND_SWAP, e.IBV_WR_ATOMIC_CMP_AND_SWP),
        (Opcode.SEND, e.IBV_WR_SEND),
    ):
        assert send_wr(1, op, 0x1000, 8, 7, True).opcode == want


def test_sends_go_inline(pyverbs_enums):
    """The broker rewrites its acknowledgement buffer for every SEND; inline, the device has
    copied the payload when the post returns (unsignaled, it would read the buffer later)."""
    e = pyverbs_enums
    wr = send_wr(1, Opcode.SEND, 0x1000, MAX_SEND_BYTES, 7, False)
    assert wr.send_flags == e.IBV_SEND_INLINE
    assert not send_wr(1, Opcode.WRITE, 0x1000, 64, 7, False).send_flags & e.IBV_SEND_INLINE
    with pytest.raises(TransportError):
        send_wr(1, Opcode.SEND, 0x1000, MAX_SEND_BYTES + 1, 7, False)

"""What the software transports enforce for security, on shm and tcp: memory windows bound to one
queue pair and range, keys that are random and recognised once withdrawn, and (shm) device
files that only their user can reach."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from rdmalog.rdma.transport.devices import open_device
from rdmalog.rdma.transport.interface import Access, Status, TransportError
from rdmalog.rdma.transport.shm import ShmDevice
from tests.integration.test_rdma_transport import KINDS, Pair


@pytest.fixture(params=KINDS)
def pair(request):
    p = Pair(request.param)
    yield p
    p.close()


def _second_client(p: Pair):
    """Another client queue pair to the same server device."""
    import threading

    cli = open_device(p.kind)
    cq = cli.create_cq()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("qp", p.listener.accept(p.scq, timeout=5)))
    t.start()
    qp = cli.connect(p.listener.address, cq)
    t.join(5)
    return cli, cq, qp, got["qp"], cli.alloc_mr(64, Access.LOCAL_WRITE)


def test_a_window_reaches_its_range_through_its_queue_pair_only(pair):
    p = pair
    w = p.sqp.bind_window(p.region, 1024, 2048, Access.REMOTE_WRITE | Access.REMOTE_READ)
    r = w.remote()
    assert r.rkey not in (0, p.rr.rkey)
    p.local.buf[:4] = b"okay"
    p.cqp.post_write(1, p.local, 0, 4, r.addr + 1024, r.rkey)
    assert p.one(p.ccq).status == Status.SUCCESS
    assert bytes(p.region.buf[1024:1028]) == b"okay"
    w.narrow(1028)  # what it wrote is handed over
    p.cqp.post_write(2, p.local, 0, 4, r.addr + 1024, r.rkey)
    assert p.one(p.ccq).status == Status.REM_ACCESS_ERR
    p.cqp.post_read(3, p.local, 0, 4, r.addr + 2048, r.rkey)
    assert p.one(p.ccq).status == Status.WR_FLUSH_ERR  # the queue pair is in error now
    assert bytes(p.region.buf[1024:1028]) == b"okay"


def test_a_window_is_refused_to_another_queue_pair(pair):
    p = pair
    w = pair.sqp.bind_window(p.region, 0, 4096, Access.REMOTE_READ)
    p.region.buf[:4] = b"mine"
    cli, cq, qp, sqp, local = _second_client(p)
    try:
        r = w.remote()
        qp.post_read(1, local, 0, 4, r.addr, r.rkey)
        wc = cq.wait(5.0)[0]
        assert wc.status == Status.REM_ACCESS_ERR and bytes(local.buf[:4]) == bytes(4)
        assert p.cqp.read_now(p.local, 0, 4, r.addr, r.rkey) == Status.SUCCESS  # its own: fine
        assert bytes(p.local.buf[:4]) == b"mine"
    finally:
        qp.close()
        sqp.close()
        cli.close()


def test_withdrawn_keys_are_refused_and_new_keys_are_random(pair):
    p = pair
    w = p.sqp.bind_window(p.region, 0, 4096, Access.REMOTE_READ)
    r = w.remote()
    w.invalidate()
    assert p.cqp.read_now(p.local, 0, 8, r.addr, r.rkey) == Status.REM_ACCESS_ERR
    # a key it held: refused, its queue pair goes on
    assert p.cqp.read_now(p.local, 0, 8, p.rr.addr, p.rr.rkey) == Status.SUCCESS
    keys = {p.srv.alloc_mr(8, Access.REMOTE_READ).rkey for _ in range(64)}
    assert len(keys) == 64 and 0 not in keys
    assert max(keys) - min(keys) > 1 << 24  # spread over the 32 bits, not counted up


def test_a_window_dies_with_its_region(pair):
    p = pair
    mr = p.srv.alloc_mr(4096, Access.LOCAL_WRITE | Access.REMOTE_READ)
    w = p.sqp.bind_window(mr, 0, 4096, Access.REMOTE_READ)
    r = w.remote()
    assert p.cqp.read_now(p.local, 0, 8, r.addr, r.rkey) == Status.SUCCESS
    w.invalidate()
    mr.deregister()
    assert p.cqp.read_now(p.local, 0, 8, r.addr, r.rkey) == Status.REM_ACCESS_ERR


# -- shm device files -------------------------------------------------------------------------------
def test_shm_device_files_are_owner_only(tmp_path):
    dev = ShmDevice(root=str(tmp_path))
    try:
        dev.create_cq()
        dev.alloc_mr(64, Access.REMOTE_READ)
        assert stat.S_IMODE(os.stat(dev.dir).st_mode) == 0o700
        for name in os.listdir(dev.dir):
            st = os.lstat(os.path.join(dev.dir, name))
            if stat.S_ISREG(st.st_mode):
                assert stat.S_IMODE(st.st_mode) == 0o600, name
    finally:
        dev.close()


def test_shm_refuses_a_device_directory_others_can_reach(tmp_path):
    srv = ShmDevice(root=str(tmp_path))
    cli = ShmDevice(root=str(tmp_path))
    lst = srv.listen()
    try:
        os.chmod(srv.dir, 0o750)  # a listener in a directory the group can enter
        with pytest.raises(TransportError, match="group/other permissions"):
            cli.connect(lst.address, cli.create_cq())
        os.chmod(srv.dir, 0o700)
        os.chmod(cli.dir, 0o755)  # a peer whose own directory is readable by others
        import threading

        errors = []

        def accept():
            try:
                lst.accept(srv.create_cq(), timeout=5)
            except TransportError as e:
                errors.append(e)

        t = threading.Thread(target=accept)
        t.start()
        with pytest.raises(TransportError):
            cli.connect(lst.address, cli.create_cq())
        t.join(5)
        assert errors and "group/other permissions" in str(errors[0])
    finally:
        os.chmod(cli.dir, 0o700)
        lst.close()
        cli.close()
        srv.close()


def test_shm_refuses_ring_paths_outside_the_peers_directory(tmp_path):
    from rdmalog.rdma.transport.shm_files import inside

    with pytest.raises(TransportError):
        inside(str(tmp_path), "/etc/passwd")
    with pytest.raises(TransportError):
        inside(str(tmp_path), str(tmp_path / "sub" / "cq-1"))
    os.symlink("/etc/hostname", tmp_path / "cq-1")
    with pytest.raises(TransportError):
        inside(str(tmp_path), str(tmp_path / "cq-1"))


def test_listening_beyond_loopback_warns_about_tls(caplog):
    from rdmalog.rdma.broker.service import _warn_if_exposed

    with caplog.at_level(logging.WARNING, logger="rdmalog.rdma.broker.service"):
        _warn_if_exposed("tcp", "127.0.0.1", False)
        _warn_if_exposed("shm", "localhost", False)
        assert not caplog.records
        _warn_if_exposed("tcp", "10.1.2.3", True)
    assert "without TLS" in caplog.text and "tcp datapaths" in caplog.text

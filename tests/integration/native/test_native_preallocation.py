"""Preallocated head files (`preallocate`): resident when granted, the next one ready before the
roll."""

from __future__ import annotations

import os
from pathlib import Path

from rdmalog.rdma import Producer
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import store_records, wait_for


def resident_fraction(path: Path, length: int | None = None) -> float:
    """The share of a file's pages (its first `length` bytes) in the page cache (mincore on a
    fresh mapping; reads nothing)."""
    import ctypes
    import mmap

    from rdmalog.rdma.broker.prefault import address_of

    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    if length is not None:
        size = min(size, length)
    if size == 0:  # created, not sized yet (a standby file being made)
        return 0.0
    vec = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), size) as mm:
        rc = libc.mincore(ctypes.c_void_p(address_of(mm)), ctypes.c_size_t(size), vec)
    assert rc == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec) / len(vec)


def test_preallocated_head_is_resident_when_granted(broker):
    """With `preallocate` (KafkaDirect's setup) a produce grant makes the whole head file resident,
    as registering it with an RNIC pins it: the first megabytes before the grant is answered, the
    rest in the background, so the datapath never allocates a page and no producer waits for a
    whole file. Without it the head stays sparse. Both get a writable lead ahead of the writes."""
    from rdmalog.rdma.broker.prefault import MIN_AHEAD

    st, svc = broker
    seg_bytes = 32 << 20
    svc.prefault.grant_resident = 4 << 20
    st.create_topic("pre", 1, {"segment.bytes": str(seg_bytes), "preallocate": "true"})
    st.create_topic("sparse", 1, {"segment.bytes": str(seg_bytes)})
    p = Producer(svc.control_address)
    for topic in ("pre", "sparse"):
        assert p.produce(topic, 0, b"v") == (0, 0)
    pre, sparse = (st.partition(t, 0).active_segment.path for t in ("pre", "sparse"))
    assert os.stat(pre).st_blocks * 512 >= seg_bytes
    assert resident_fraction(pre, 4 << 20) > 0.99  # before the grant was answered
    assert wait_for(lambda: resident_fraction(pre) > 0.99)
    assert resident_fraction(sparse) < 0.5
    # The resident head is filled for reading (clean pages, nothing written back); both heads
    # get the prefaulter's writable lead, a few hundred KiB past what was written, not more.
    grants = {t: svc.parts[(t, 0)].produce for t in ("pre", "sparse")}
    assert grants["pre"].resident and not grants["sparse"].resident
    assert grants["sparse"].file_id not in svc.prefault._fills
    for g in grants.values():
        lead = svc.prefault._leads[g.file_id]
        assert wait_for(lambda lead=lead: lead[1] == lead[2])
        assert 0 < lead[2] <= MIN_AHEAD + 4096
    assert p.produce("pre", 0, b"w") == (1, 1)
    p.close()


def test_preallocated_next_head_is_ready_before_the_roll(broker):
    """While a preallocated head file fills, the service has the next one allocated and made
    resident in the background; the roll renames it into place, so the new grant finds it
    resident and nothing is allocated on the datapath; the new head gets its own successor."""
    st, svc = broker
    seg_bytes = 4 << 20
    st.create_topic("nx", 1, {"segment.bytes": str(seg_bytes), "preallocate": "true"})
    plog = st.partition("nx", 0)
    p = Producer(svc.control_address)
    big = build_batch([(None, b"x" * 1000) for _ in range(500)])  # ~0.5 MiB
    for _ in range(5):  # more than a quarter of the file
        p.send_batch("nx", 0, big)
    p.flush()
    standby = plog.dir / "standby.log.tmp"
    assert wait_for(lambda: standby.exists() and resident_fraction(standby) > 0.99)
    inode = os.stat(standby).st_ino
    for _ in range(5):  # fills the file: the producer asks for the next one, the log rolls
        p.send_batch("nx", 0, big)
    p.flush()
    assert len(plog.segments) == 2
    head = plog.active_segment.path
    assert os.stat(head).st_ino == inode and resident_fraction(head) > 0.99
    for _ in range(3):  # a quarter into the new head: its own successor is made
        p.send_batch("nx", 0, big)
    p.flush()
    assert wait_for(lambda: standby.exists() and os.stat(standby).st_ino != inode)
    assert len(store_records(st, "nx")) == 13 * 500
    p.close()

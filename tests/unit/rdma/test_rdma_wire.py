"""The shared bit layouts of the RDMA datapaths (immediate, reservation word, slots, acks)."""

from __future__ import annotations

import mmap

from rdmalog.rdma.transport._atomic64 import compare_swap, copy, fetch_add, load, store
from rdmalog.rdma.wire import (
    ACK,
    ACK_SIZE,
    LRB_MASK,
    SLOT_MUTABLE,
    SLOT_VALID,
    AckStatus,
    imm_decode,
    imm_encode,
    reservation_add,
    slot_word,
    word_decode,
    word_encode,
)


def test_immediate_is_file_id_and_order():
    assert imm_encode(0xABCD, 0x1234) == 0xABCD1234
    assert imm_decode(0xABCD1234) == (0xABCD, 0x1234)
    assert imm_decode(imm_encode(7, 0x10001)) == (7, 1)  # order wraps at 16 bits


def test_reservation_word_fetch_and_add():
    buf = mmap.mmap(-1, 64)
    store(buf, 8, word_encode(0, 1000))
    olds = [fetch_add(buf, 8, reservation_add(n)) for n in (100, 50, 7)]
    assert [word_decode(o) for o in olds] == [(0, 1000), (1, 1100), (2, 1150)]
    assert word_decode(load(buf, 8)) == (3, 1157)
    store(buf, 8, word_encode(0xFFFF, 5))
    fetch_add(buf, 8, reservation_add(1))
    assert word_decode(load(buf, 8)) == (0, 6)  # the order wraps, the position is untouched


def test_slot_word_and_ack_layout():
    w = slot_word(123456, True)
    assert w & LRB_MASK == 123456 and w & SLOT_VALID and w & SLOT_MUTABLE
    assert not slot_word(5, False) & SLOT_MUTABLE
    raw = ACK.pack(3, 9, AckStatus.FULL, -1, -1, 0)
    assert len(raw) == ACK_SIZE and ACK.unpack(raw)[:3] == (3, 9, AckStatus.FULL)


def test_atomics_and_guarded_copy_check_bounds():
    buf = mmap.mmap(-1, 64)
    assert compare_swap(buf, 0, 0, 5) == 0 and load(buf, 0) == 5
    assert compare_swap(buf, 0, 4, 9) == 5 and load(buf, 0) == 5
    for bad in ((buf, 60, 1), (buf, 4, 1), (buf, -8, 1)):
        try:
            fetch_add(*bad)
        except (IndexError, ValueError):
            continue
        raise AssertionError(f"accepted {bad[1:]}")
    src = bytearray(b"abcdef")
    assert copy(buf, 10, src, 1, 4) and bytes(buf[10:14]) == b"bcde"
    try:
        copy(buf, 62, src, 0, 6)
    except IndexError:
        pass
    else:
        raise AssertionError("copy past the end accepted")

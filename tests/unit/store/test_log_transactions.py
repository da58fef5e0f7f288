"""Transactions in the log: markers recognised, the last stable offset, the aborted-transaction index
(`.txnindex`, Kafka's 34-byte entries) written on ABORT markers and rebuilt by recovery."""

from __future__ import annotations

import struct
from pathlib import Path

from rdmalog.store.records import iter_batches
from rdmalog.store.transaction_index import AbortedTxn, read_aborted
from rdmalog.store.transactions import marker_batch, marker_type
from tests.unit.store.helpers import batch, crash, open_log

P1, P2 = 1000, 2000


def txn_batch(pid: int, seq: int, n: int = 2) -> bytearray:
    return batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)


def marker(pid: int, commit: bool, epoch: int = 0) -> bytearray:
    return marker_batch(pid, epoch, commit, coordinator_epoch=3, timestamp_ms=1)


def test_marker_is_kafkas_control_batch() -> None:
    buf = marker(P1, commit=False)
    (b,) = list(iter_batches(buf))
    assert b.is_control and b.is_transactional and b.producer_id == P1 and b.base_sequence == -1
    (rec,) = b.records()
    assert rec.key == struct.pack(">hh", 0, 0)
    assert rec.value == struct.pack(">hi", 0, 3)
    assert marker_type(buf) == 0 and marker_type(marker(P1, commit=True)) == 1


def test_last_stable_offset_and_aborted_index(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(batch(1))  # 0
    plog.append(txn_batch(P1, 0))  # 1-2: P1's transaction opens at 1
    assert plog.last_stable_offset == 1 and plog.high_watermark == 3
    plog.append(txn_batch(P2, 0))  # 3-4
    plog.append(marker(P1, commit=False), allow_control=True)  # 5: abort P1
    assert plog.last_stable_offset == 3  # P2 still open
    plog.append(marker(P2, commit=True), allow_control=True)  # 6: commit P2
    assert plog.last_stable_offset == plog.high_watermark == 7
    expected = [AbortedTxn(P1, 1, 5, 3)]
    assert plog.aborted_transactions(0, 7) == expected
    assert plog.aborted_transactions(6, 7) == []  # its marker lies before the fetch
    plog.flush()
    assert read_aborted(tmp_path / "t-0" / "00000000000000000000.txnindex") == expected
    raw = (tmp_path / "t-0" / "00000000000000000000.txnindex").read_bytes()
    assert raw == struct.pack(">hqqqq", 0, P1, 1, 5, 3)
    plog.close()

    again = open_log(tmp_path / "t-0", clean=True)  # the snapshot and the file
    assert again.aborted_transactions(0, 7) == expected
    assert again.last_stable_offset == 7
    again.close()


def test_open_transaction_survives_restart_and_crash(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(batch(2))
    plog.append(txn_batch(P1, 0))  # 2-3
    plog.close()
    plog = open_log(tmp_path / "t-0", clean=True)
    assert plog.last_stable_offset == 2
    plog.append(marker(P1, commit=False), allow_control=True)  # 4
    crash(plog)
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()  # lost with the crash
    plog = open_log(tmp_path / "t-0")  # recovery rebuilds it from the markers
    assert plog.last_stable_offset == plog.high_watermark == 5
    assert plog.aborted_transactions(0, 5) == [AbortedTxn(P1, 2, 4, 5)]
    assert read_aborted(tmp_path / "t-0" / "00000000000000000000.txnindex") == [
        AbortedTxn(P1, 2, 4, 5)
    ]
    plog.append(txn_batch(P1, 2))  # 5-6: a new transaction after a crash
    assert plog.last_stable_offset == 5
    plog.close()


def test_index_entry_goes_to_the_markers_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(txn_batch(P1, 0))  # 0-1
    plog.roll()
    plog.append(marker(P1, commit=False), allow_control=True)  # 2
    plog.flush()
    assert not (tmp_path / "t-0" / "00000000000000000000.txnindex").exists()
    assert read_aborted(tmp_path / "t-0" / "00000000000000000002.txnindex") == [
        AbortedTxn(P1, 0, 2, 3)
    ]
    plog.truncate_to(2)
    assert plog.aborted_transactions(0, 10) == [] and plog.last_stable_offset == 0
    plog.close()


def test_fenced_epoch_after_marker(tmp_path: Path) -> None:
    """A marker at a bumped epoch fences the producer's older epoch (a zombie's late write)."""
    import pytest

    from rdmalog.errors import InvalidProducerEpochError

    plog = open_log(tmp_path / "t-0")
    plog.append(txn_batch(P1, 0))
    plog.append(marker(P1, commit=False, epoch=1), allow_control=True)
    with pytest.raises(InvalidProducerEpochError):
        plog.append(txn_batch(P1, 2))
    plog.close()

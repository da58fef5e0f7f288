"""Idempotent-producer sequence rules (rdmalog.store.producer_state), as Kafka applies them per partition."""

from __future__ import annotations

import pytest

from rdmalog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from rdmalog.store.log import PartitionLog
from rdmalog.store.producer_state import ProducerStateTable
from tests.unit.store.helpers import T0, batch, broker_config, topic_config


def _append(table: ProducerStateTable, pid, epoch, seq, count, offset) -> None:
    assert table.check(pid, epoch, seq, count) is None
    table.update(pid, epoch, seq, count, offset, offset + count - 1, 0)


def test_in_order_batches_are_accepted_and_a_retry_is_a_duplicate() -> None:
    table = ProducerStateTable()
    _append(table, 7, 0, 0, 3, 100)
    _append(table, 7, 0, 3, 2, 103)
    dup = table.check(7, 0, 0, 3)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 102)
    assert table.check(7, 0, 3, 2).first_offset == 103


def test_only_the_last_five_batches_are_remembered() -> None:
    table = ProducerStateTable()
    for i in range(6):
        _append(table, 1, 0, i, 1, i)
    assert table.check(1, 0, 5, 1) is not None
    with pytest.raises(OutOfOrderSequenceError):
        table.check(1, 0, 0, 1)  # fell out of the cache: now a gap, not a duplicate


def test_gap_and_old_epoch_are_refused() -> None:
    table = ProducerStateTable()
    _append(table, 1, 2, 0, 1, 0)
    with pytest.raises(OutOfOrderSequenceError):
        table.check(1, 2, 5, 1)
    with pytest.raises(InvalidProducerEpochError):
        table.check(1, 1, 1, 1)


def test_new_epoch_must_start_at_zero() -> None:
    table = ProducerStateTable()
    _append(table, 1, 0, 0, 4, 0)
    with pytest.raises(OutOfOrderSequenceError):
        table.check(1, 1, 4, 1)
    _append(table, 1, 1, 0, 1, 4)
    assert table.producers[1].epoch == 1


def test_unknown_producer_may_start_anywhere_and_sequences_wrap() -> None:
    table = ProducerStateTable()
    _append(table, 9, 0, 2**31 - 2, 2, 0)  # last sequence is 2**31 - 1
    _append(table, 9, 0, 0, 1, 2)
    assert table.check(-1, -1, -1, 5) is None  # non-idempotent batches are not checked


def test_truncation_and_snapshot_round_trip(tmp_path) -> None:
    table = ProducerStateTable()
    _append(table, 1, 0, 0, 2, 0)
    _append(table, 2, 0, 0, 2, 2)
    path = tmp_path / "00000000000000000004.snapshot"
    table.snapshot(path, 4)
    restored, end = ProducerStateTable.restore(path)
    assert end == 4 and restored.check(2, 0, 0, 2).first_offset == 2
    restored.truncate_after(2)
    assert list(restored.producers) == [1]
    restored.truncate_after(0)
    assert restored.producers == {}
    path.write_text("not json")
    assert ProducerStateTable.restore(path) is None


def test_idle_producers_expire() -> None:
    table = ProducerStateTable()
    table.update(1, 0, 0, 1, 0, 0, 1_000)
    table.update(2, 0, 0, 1, 1, 1, 5_000)
    assert table.expire(now=10_999, max_age_ms=10_000) == 0
    assert table.expire(now=11_000, max_age_ms=10_000) == 1
    assert list(table.producers) == [2]


def test_the_log_expires_producers_idle_for_producer_id_expiration_ms(tmp_path, clock) -> None:
    config = topic_config(broker_config(producer_id_expiration_ms=60_000))
    plog = PartitionLog(tmp_path / "t-0", "t", 0, config, clock=clock).open()
    plog.append(batch(2, ts=T0, producer_id=3, producer_epoch=0, base_sequence=0))
    clock.advance(600_000)  # the check interval; the batch is now 10 minutes old
    assert 3 in plog.producer_state.producers
    plog.maintain(clock.now, retention=False)
    assert plog.producer_state.producers == {}
    # an expired producer is unknown again: its next batch is accepted at any sequence
    res = plog.append(batch(1, ts=clock.now, producer_id=3, producer_epoch=0, base_sequence=9))
    assert res.base_offset == 2
    plog.close()


def test_delete_records_and_a_restart_keep_producer_state(tmp_path, clock) -> None:
    """The log start moving past a producer's batches forgot the producer (and a clean restart's
    snapshot was cut the same way): a retry of its deleted batch was appended again."""
    config = topic_config(broker_config())
    plog = PartitionLog(tmp_path / "t-0", "t", 0, config, clock=clock).open()
    plog.append(batch(2, ts=T0, producer_id=4, producer_epoch=0, base_sequence=0))
    plog.append(batch(1, ts=T0))
    plog.delete_records(-1)
    retry = plog.append(batch(2, ts=T0, producer_id=4, producer_epoch=0, base_sequence=0))
    assert (retry.base_offset, retry.last_offset, plog.log_end_offset) == (0, 1, 3)
    plog.close()
    plog = PartitionLog(
        tmp_path / "t-0", "t", 0, config, log_start_offset=3, recovery_point=3,
        clean_shutdown=True, clock=clock,
    ).open()  # fmt: skip
    retry = plog.append(batch(2, ts=T0, producer_id=4, producer_epoch=0, base_sequence=0))
    assert (retry.base_offset, plog.log_end_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(batch(1, ts=T0, producer_id=4, producer_epoch=0, base_sequence=7))
    plog.close()

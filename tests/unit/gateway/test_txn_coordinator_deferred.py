"""The transaction coordinator as a cluster runs it (`defer_markers`, `coordinator_error`): ending a
transaction leaves it preparing until its markers are reported written, a fencing InitProducerId
aborts and asks the producer to retry, ids of partitions led elsewhere are refused, and a
coordinator taking over a partition resumes what was prepared (on a real store's
`__transaction_state`)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gateway.transactions.coordinator import TransactionCoordinator, TxnError
from gateway.transactions.model import CONCURRENT_TRANSACTIONS, TxnConfig, TxnState
from gateway.transactions.schema import partition_for
from gateway.transactions.state_topic import TransactionStateTopic
from rdmalog import errors as E
from tests.unit.store.helpers import open_store

PARTITIONS = 4


def _coordinator(store, deferred: list) -> TransactionCoordinator:
    topic = TransactionStateTopic(store, PARTITIONS, 1 << 20)
    topic.ensure()
    ids = itertools.count(100)
    c = TransactionCoordinator(
        topic, TxnConfig(), lambda: next(ids), lambda *a: None, lambda: 1_000
    )
    c.defer_markers = lambda meta, commit: deferred.append((meta.transactional_id, commit))
    return c


def test_end_waits_for_the_markers(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    deferred: list = []
    c = _coordinator(store, deferred)
    pid, epoch = c.init_producer_id("t", 10_000)
    c.add_partitions("t", pid, epoch, [("a", 0), ("b", 1)])
    c.end("t", pid, epoch, commit=True)
    assert deferred == [("t", True)] and c.describe("t").state == TxnState.PREPARE_COMMIT
    with pytest.raises(TxnError) as busy:
        c.add_partitions("t", pid, epoch, [("a", 0)])
    assert busy.value.code == CONCURRENT_TRANSACTIONS
    assert c.markers_written("t", pid, epoch)
    assert c.describe("t").state == TxnState.COMPLETE_COMMIT and not c.describe("t").partitions
    assert not c.markers_written("t", pid, epoch)  # nothing left to complete
    c.end("t", pid, epoch, commit=True)  # a retry of the completed end succeeds
    store.close()


def test_fencing_init_aborts_then_asks_to_retry(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    deferred: list = []
    c = _coordinator(store, deferred)
    pid, epoch = c.init_producer_id("t", 10_000)
    c.add_partitions("t", pid, epoch, [("a", 0)])
    with pytest.raises(TxnError) as retry:
        c.init_producer_id("t", 10_000)
    assert retry.value.code == CONCURRENT_TRANSACTIONS
    meta = c.describe("t")
    assert meta.state == TxnState.PREPARE_ABORT and meta.producer_epoch == epoch + 1
    assert deferred == [("t", False)]
    assert c.markers_written("t", pid, epoch + 1)
    assert c.init_producer_id("t", 10_000) == (pid, epoch + 2)
    store.close()


def test_ids_led_elsewhere_and_a_takeover(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    first: list = []
    c = _coordinator(store, first)
    pid, epoch = c.init_producer_id("t", 10_000)
    c.add_partitions("t", pid, epoch, [("a", 0)])
    c.end("t", pid, epoch, commit=False)  # prepared, then this coordinator goes
    c.coordinator_error = lambda txn: E.NOT_COORDINATOR
    for call in (
        lambda: c.init_producer_id("t", 10_000),
        lambda: c.add_partitions("t", pid, epoch, [("a", 0)]),
        lambda: c.end("t", pid, epoch, True),
    ):
        with pytest.raises(TxnError) as refused:
            call()
        assert refused.value.code == E.NOT_COORDINATOR
    assert c.unload(lambda txn: True) == 1 and c.describe("t") is None
    resumed: list = []
    successor = _coordinator(store, resumed)
    assert successor.load_partition(partition_for("t", PARTITIONS)) == 1
    assert resumed == [("t", False)]  # the prepared abort's markers are sent again
    assert successor.markers_written("t", pid, epoch)
    assert successor.describe("t").state == TxnState.COMPLETE_ABORT
    store.close()

"""The transaction APIs at every version they register, through the wire codec, in-process against a
real store: producer ids and epochs, partitions and offsets joining a transaction, markers written as
Kafka writes them, transactional offsets applied on commit only, fencing error codes per version,
describe and list, and the coordinator's state reloaded from `__transaction_state`."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.groups.schema import OFFSETS_TOPIC, partition_for
from gateway.transactions.model import TxnMetadata, TxnState
from gateway.transactions.schema import decode_key, decode_value, encode_key, encode_value
from rdmalog.store.records import iter_batches
from tests.unit.gateway.handler_harness import HandlerHarness, versions

INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, PRODUCER_FENCED = 47, 48, 90
OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION = 55, 3


class Harness(HandlerHarness):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, {"offsets.topic.num.partitions": "3",
                               "transaction.state.log.num.partitions": "3"}, {})  # fmt: skip

    def init(self, txn: str, version: int = 4, **extra: int) -> dict:
        body = {"transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1,
                "producer_epoch": -1, **extra}  # fmt: skip
        return self.call(22, version, body)

    def add(self, txn: str, pid: int, epoch: int, parts: list[int], version: int = 3) -> list:
        body = {
            "v3_and_below_transactional_id": txn,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": parts}],
        }
        resp = self.call(24, version, body)
        return [
            p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        ]

    def end(self, txn: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
        body = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                "committed": commit}  # fmt: skip
        return self.call(26, version, body)["error_code"]

    def batches(self, topic: str, partition: int) -> list:
        plog = self.store.topics[topic].partitions[partition]
        sl = plog.read(plog.log_start_offset, 1 << 20)
        return [] if sl is None else list(iter_batches(sl.read()))


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def test_value_schema_round_trip() -> None:
    meta = TxnMetadata("tx", 42, 3, 30000, TxnState.ONGOING, {("a", 1), ("a", 0), ("b", 2)}, 5, 4)
    data = encode_value(meta)
    assert data[:2] == b"\x00\x00"  # TransactionLogValue v0
    assert decode_key(encode_key("tx")) == "tx"
    assert encode_key("tx") == struct.pack(">hh", 0, 2) + b"tx"
    assert decode_value("tx", data) == meta


def test_reads_kafkas_flexible_value_v1() -> None:
    """TransactionLogValue v1 as Kafka 4 writes it (compact strings and arrays, tagged fields
    PreviousProducerId, NextProducerId, ClientTransactionVersion), built from the schema."""
    value = (
        struct.pack(">hqhib", 1, 77, 5, 30000, 1)
        + bytes([2])  # one partitions element (compact: n + 1)
        + bytes([4]) + b"abc"  # compact string "abc"
        + bytes([3]) + struct.pack(">ii", 0, 2)  # two partition ids
        + bytes([0])  # the element's tagged fields
        + struct.pack(">qq", 1000, 900)
        + bytes([3, 0, 8]) + struct.pack(">q", 76)  # tag 0: previous producer id
        + bytes([1, 8]) + struct.pack(">q", -1)  # tag 1: next producer id
        + bytes([2, 2]) + struct.pack(">h", 1)  # tag 2: client transaction version
    )  # fmt: skip
    meta = decode_value("tx", value)
    assert (meta.producer_id, meta.producer_epoch, meta.timeout_ms) == (77, 5, 30000)
    assert meta.state == TxnState.ONGOING and meta.partitions == {("abc", 0), ("abc", 2)}
    assert (meta.last_update_ms, meta.start_ms, meta.last_producer_id) == (1000, 900, 76)


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id_bumps_the_epoch(h: Harness, version: int) -> None:
    first = h.init("tx", version)
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    again = h.init("tx", version)
    assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1)
    if version >= 3:  # KIP-360: a producer that is not the latest is fenced
        stale = h.init("tx", version, producer_id=first["producer_id"], producer_epoch=0)
        assert stale["error_code"] == (PRODUCER_FENCED if version >= 4 else INVALID_PRODUCER_EPOCH)
        pid = first["producer_id"]
        recovered = h.init("tx", version, producer_id=pid, producer_epoch=1)
        assert (recovered["error_code"], recovered["producer_epoch"]) == (0, 2)
        retry = h.init("tx", version, producer_id=pid, producer_epoch=1)  # its answer was lost
        assert (retry["error_code"], retry["producer_epoch"]) == (0, 2)


@pytest.mark.parametrize("version", versions(26))
def test_commit_writes_kafkas_markers(h: Harness, version: int) -> None:
    pid, epoch = (lambda r: (r["producer_id"], r["producer_epoch"]))(h.init("tx"))
    assert h.add("tx", pid, epoch, [0, 1, 7]) == [
        OPERATION_NOT_ATTEMPTED, OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION
    ]  # fmt: skip
    assert h.add("tx", pid, epoch, [0, 1]) == [0, 0]
    assert h.end("tx", pid, epoch + 1, True, version) == (
        PRODUCER_FENCED if version >= 2 else INVALID_PRODUCER_EPOCH
    )
    assert h.end("tx", pid, epoch, True, version) == 0
    assert h.end("tx", pid, epoch, True, version) == 0  # a retry
    assert h.end("tx", pid, epoch, False, version) == INVALID_TXN_STATE
    for partition in (0, 1):
        (marker,) = h.batches("t", partition)
        assert marker.is_control and marker.is_transactional
        assert (marker.producer_id, marker.producer_epoch) == (pid, epoch)
        (rec,) = marker.records()
        assert rec.key == struct.pack(">hh", 0, 1)  # COMMIT
        assert rec.value == struct.pack(">hi", 0, 0)  # coordinator epoch 0


@pytest.mark.parametrize("version", versions(28))
def test_txn_offsets_apply_on_commit_only(h: Harness, version: int) -> None:
    r = h.init("tx")
    pid, epoch = r["producer_id"], r["producer_epoch"]

    def commit_offset(offset: int) -> int:
        assert h.call(25, 3, {"transactional_id": "tx", "producer_id": pid,
                              "producer_epoch": epoch, "group_id": "g"})["error_code"] == 0  # fmt: skip
        body = {
            "transactional_id": "tx", "group_id": "g", "producer_id": pid,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}],
        }  # fmt: skip
        resp = h.call(28, version, body)
        return resp["topics"][0]["partitions"][0]["error_code"]

    def fetched() -> int:
        body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}
        return h.call(9, 7, body)["topics"][0]["partitions"][0]["committed_offset"]

    assert commit_offset(5) == 0
    assert fetched() == -1  # not before the commit
    assert h.end("tx", pid, epoch, False) == 0
    assert fetched() == -1  # aborted: dropped
    assert commit_offset(7) == 0
    assert h.end("tx", pid, epoch, True) == 0
    assert fetched() == 7
    offsets = h.batches(OFFSETS_TOPIC, partition_for("g", 3))
    assert [(b.is_transactional, b.is_control) for b in offsets] == [
        (True, False), (True, True), (True, False), (True, True)
    ]  # fmt: skip


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_batched_and_verified(h: Harness, version: int) -> None:
    r = h.init("tx")
    txn = {"transactional_id": "tx", "producer_id": r["producer_id"],
           "producer_epoch": r["producer_epoch"], "topics": [{"name": "t", "partitions": [1]}]}  # fmt: skip

    def call(verify: bool) -> int:
        resp = h.call(24, version, {"transactions": [{**txn, "verify_only": verify}]})
        assert resp["error_code"] == 0
        (result,) = resp["results_by_transaction"]
        return result["topic_results"][0]["results_by_partition"][0]["partition_error_code"]

    assert call(verify=True) == INVALID_TXN_STATE  # not in the transaction yet
    assert call(verify=False) == 0
    assert call(verify=True) == 0


def test_write_txn_markers_describe_list_and_reload(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        r = h.init("tx")
        pid = r["producer_id"]
        assert h.add("tx", pid, 0, [1]) == [0]
        states = h.call(65, 0, {"transactional_ids": ["tx", "nope"]})["transaction_states"]
        assert [s["error_code"] for s in states] == [0, 105]
        assert states[0]["transaction_state"] == "Ongoing"
        assert states[0]["topics"] == [{"topic": "t", "partitions": [1]}]
        listed = h.call(66, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [],
                                "duration_filter": -1})  # fmt: skip
        assert listed["unknown_state_filters"] == ["Bogus"]
        assert [t["transactional_id"] for t in listed["transaction_states"]] == ["tx"]
        body = {"markers": [{"producer_id": 99, "producer_epoch": 0, "transaction_result": False,
                             "topics": [{"name": "t", "partition_indexes": [0, 5]}],
                             "coordinator_epoch": 0}]}  # fmt: skip
        (answer,) = h.call(27, 1, body)["markers"]
        assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [0, 3]
        (marker,) = h.batches("t", 0)
        assert marker.is_control and marker.producer_id == 99
    finally:
        h.close()
    h = Harness(tmp_path)  # a restarted broker: the coordinator reads __transaction_state
    try:
        (state,) = h.call(65, 0, {"transactional_ids": ["tx"]})["transaction_states"]
        assert (state["transaction_state"], state["producer_id"]) == ("Ongoing", pid)
        assert h.end("tx", pid, 0, False) == 0
        (marker,) = h.batches("t", 1)
        assert marker.records()[0].key == struct.pack(">hh", 0, 0)  # ABORT
    finally:
        h.close()


def test_produce_verifies_the_partition_is_in_the_transaction(h: Harness) -> None:
    from rdmalog.store.records import build_batch

    r = h.init("tx")
    pid, epoch = r["producer_id"], r["producer_epoch"]

    def produce(seq: int, partition: int = 0, epoch: int = epoch) -> int:
        batch = build_batch([(None, b"v")], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)  # fmt: skip
        body = {"transactional_id": "tx", "acks": -1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": partition, "records": bytes(batch)}]}]}  # fmt: skip
        return h.call(0, 9, body)["responses"][0]["partition_responses"][0]["error_code"]

    assert produce(0) == INVALID_TXN_STATE  # not added: refused, nothing written
    assert h.batches("t", 0) == []
    assert h.add("tx", pid, epoch, [0]) == [0]
    assert produce(0) == 0
    assert produce(1, partition=1) == INVALID_TXN_STATE
    assert produce(1, epoch=epoch + 1) == INVALID_PRODUCER_EPOCH  # not the coordinator's epoch
    assert h.end("tx", pid, epoch, False) == 0
    assert produce(1) == INVALID_TXN_STATE  # a late write after the abort
    assert h.store.topics["t"].partitions[0].last_stable_offset == 2


def test_a_failed_state_write_changes_nothing(h: Harness) -> None:
    """A `__transaction_state` write that fails (here its partition is closed, as after a storage
    error) is answered COORDINATOR_NOT_AVAILABLE, retriable, and the id keeps its state."""
    r = h.init("tx")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert h.add("tx", pid, epoch, [0]) == [0]
    state_log = h.broker.transactions.topic.log_of("tx")
    state_log.close()
    assert h.end("tx", pid, epoch, True) == 15
    assert h.init("tx")["error_code"] == 15
    (state,) = h.call(65, 0, {"transactional_ids": ["tx"]})["transaction_states"]
    assert (state["transaction_state"], state["producer_epoch"]) == ("Ongoing", epoch)
    assert state["topics"] == [{"topic": "t", "partitions": [0]}]
    assert h.batches("t", 0) == []  # no marker was written

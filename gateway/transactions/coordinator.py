"""The transaction coordinator's state machine, following Kafka's TransactionCoordinator (transaction
version 1: the epoch is bumped by InitProducerId, by fencing and by timeouts).

Inputs are the transactional APIs (InitProducerId with an id, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, DescribeTransactions, ListTransactions), the periodic checks (timed-out transactions aborted,
idle ids expired) and the metadata replayed from `__transaction_state`. Every change of an id's state
is written to its `__transaction_state` partition before it is answered. Ending a transaction writes
PrepareCommit/PrepareAbort, the markers on every partition of the transaction (`MarkerWriter`), then
CompleteCommit/CompleteAbort. On one broker markers are written here and now, so an id is never left
preparing except by a crash, after which the load finishes what was prepared. In a cluster
(`defer_markers` set) the markers go to other brokers: the id stays preparing (requests on it get
CONCURRENT_TRANSACTIONS, as Kafka answers) until `markers_written` completes it; `coordinator_error`
refuses ids whose `__transaction_state` partition another broker leads (NOT_COORDINATOR).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from gateway.transactions.model import (
    COMPLETE,
    CONCURRENT_TRANSACTIONS,
    INVALID_TRANSACTION_TIMEOUT,
    MAX_EPOCH,
    NO_EPOCH,
    NO_PRODUCER_ID,
    PREPARING,
    TxnConfig,
    TxnMetadata,
    TxnState,
)
from gateway.transactions.state_topic import TransactionStateTopic
from rdmalog import errors as E

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class MarkerWriter(Protocol):
    """Writes a transaction's markers to its partitions."""

    def __call__(
        self, producer_id: int, epoch: int, commit: bool, partitions: Iterable[TopicPartition]
    ) -> None: ...


class TxnError(Exception):
    """A request refused with a Kafka error code."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or str(code))
        self.code = code


class TransactionCoordinator:
    """Every transactional id of this broker."""

    def __init__(
        self,
        topic: TransactionStateTopic,
        config: TxnConfig,
        allocate_producer_id: Callable[[], int],
        write_markers: MarkerWriter,
        now_ms: Callable[[], int],
    ) -> None:
        self.topic = topic
        self.config = config
        self.allocate_producer_id = allocate_producer_id
        self.write_markers = write_markers
        self.now_ms = now_ms
        self.txns: dict[str, TxnMetadata] = {}
        # cluster mode: the error for an id coordinated elsewhere (0 when here), and who sends
        # a prepared transaction's markers (then `markers_written` completes it)
        self.coordinator_error: Callable[[str], int] | None = None
        self.defer_markers: Callable[[TxnMetadata, bool], None] | None = None

    def _here(self, transactional_id: str) -> None:
        """Raise NOT_COORDINATOR (or why not) for an id this broker does not coordinate."""
        if self.coordinator_error is not None:
            code = self.coordinator_error(transactional_id)
            if code:
                raise TxnError(code)

    # --- persistence -------------------------------------------------------------------------------

    def _store(self, meta: TxnMetadata) -> None:
        meta.last_update_ms = self.now_ms()
        self.topic.write(meta, meta.last_update_ms)

    @contextmanager
    def _written(self, meta: TxnMetadata) -> Iterator[None]:
        """Changes made to `meta` in the block stand only if their records were written: a failed
        write (a full disk) restores it and is answered COORDINATOR_NOT_AVAILABLE, so the client
        retries (markers written meanwhile are written again: a partition takes a repeated
        marker as a no-op)."""
        before = dataclasses.replace(meta, partitions=set(meta.partitions))
        try:
            yield
        except BaseException as exc:
            for f in dataclasses.fields(meta):
                setattr(meta, f.name, getattr(before, f.name))
            if isinstance(exc, TxnError) or not isinstance(exc, Exception):
                raise
            log.error("transactional id %s: %s", meta.transactional_id, exc)
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc

    def load(self) -> int:
        """Rebuild every id from `__transaction_state`; transactions a crash left preparing are
        completed (their markers written again: a partition takes a repeated marker as a no-op)."""
        self.txns = self.topic.replay()
        self._resume(self.txns.values())
        return len(self.txns)

    def load_partition(self, partition: int) -> int:
        """Cluster mode: take over the ids of one `__transaction_state` partition (this broker
        leads it now); prepared transactions are resumed (their markers sent again)."""
        found = self.topic.replay_partition(partition)
        self.txns.update(found)
        self._resume(found.values())
        return len(found)

    def unload(self, moved: Callable[[str], bool]) -> int:
        """Forget the ids `moved(id)` selects (their partition led elsewhere now); nothing is
        written. Returns how many went."""
        gone = [t for t in self.txns if moved(t)]
        for t in gone:
            del self.txns[t]
        return len(gone)

    def _resume(self, metas: Iterable[TxnMetadata]) -> None:
        for meta in list(metas):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete(meta, meta.state == TxnState.PREPARE_COMMIT)
            elif meta.state == TxnState.PREPARE_EPOCH_FENCE:
                self._complete(meta, False)

    # --- InitProducerId ----------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_EPOCH,
        fresh_id: int | None = None,
    ) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer starting (or recovering, KIP-360: with
        the id and epoch it had). An ongoing transaction of the id is aborted first (fencing the
        producer that had it). `fresh_id`: a producer id allocated ahead, used for a new id.
        Raises TxnError."""
        if not transactional_id:
            raise TxnError(E.INVALID_REQUEST, "the transactional id must not be empty")
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise TxnError(
                INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {timeout_ms} is not in (0, {self.config.max_timeout_ms}]",
            )
        self._here(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None:
            pid = self.allocate_producer_id() if fresh_id is None else fresh_id
            meta = TxnMetadata(transactional_id, pid, 0, timeout_ms)
            meta.state = TxnState.EMPTY
            with self._written(meta):
                self._store(meta)
            self.txns[transactional_id] = meta
            return meta.producer_id, meta.producer_epoch
        if meta.state in PREPARING:
            raise TxnError(CONCURRENT_TRANSACTIONS)
        if producer_id != NO_PRODUCER_ID:  # KIP-360: a producer recovering with what it had
            if producer_id not in (meta.producer_id, meta.last_producer_id):
                raise TxnError(E.PRODUCER_FENCED, f"producer id {producer_id} is not the latest")
            if producer_epoch != meta.producer_epoch:
                if producer_epoch == meta.last_producer_epoch and meta.state != TxnState.ONGOING:
                    # a retry of the init that bumped it, or after the coordinator's own bump
                    # (a timeout): the current epoch, no bump
                    return meta.producer_id, meta.producer_epoch
                raise TxnError(E.PRODUCER_FENCED, f"epoch {producer_epoch} is not the latest")
        if meta.state == TxnState.ONGOING and self.defer_markers is not None:
            # abort at a bumped epoch (fencing its producer); its markers go to other brokers:
            # the producer retries until the abort is complete (Kafka's answer)
            with self._written(meta):
                self._bump_epoch(meta)
                self._end(meta, commit=False)
            raise TxnError(CONCURRENT_TRANSACTIONS)
        with self._written(meta):
            if meta.state == TxnState.ONGOING:  # abort at a bumped epoch (fencing its producer)
                self._bump_epoch(meta)
                self._end(meta, commit=False)
            self._bump_epoch(meta)
            if producer_id == NO_PRODUCER_ID:  # a new producer: no retry of an older epoch
                meta.last_producer_epoch = NO_EPOCH
            meta.timeout_ms = timeout_ms
            meta.state = TxnState.EMPTY
            meta.partitions = set()
            meta.start_ms = -1
            self._store(meta)
        return meta.producer_id, meta.producer_epoch

    def _bump_epoch(self, meta: TxnMetadata) -> None:
        """The next epoch; a new producer id when the epoch would run out."""
        meta.last_producer_epoch = meta.producer_epoch
        if meta.producer_epoch + 1 >= MAX_EPOCH - 1:
            meta.last_producer_id = meta.producer_id
            meta.producer_id = self.allocate_producer_id()
            meta.producer_epoch = 0
        else:
            meta.producer_epoch += 1

    # --- the transaction ---------------------------------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        self._here(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(E.INVALID_PRODUCER_ID_MAPPING)
        if epoch != meta.producer_epoch:
            raise TxnError(E.PRODUCER_FENCED, f"epoch {epoch} is not {meta.producer_epoch}")
        if meta.state in PREPARING:
            raise TxnError(CONCURRENT_TRANSACTIONS)
        return meta

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        verify_only: bool = False,
    ) -> None:
        """Add partitions to the id's transaction (starting one if none is ongoing); with
        `verify_only`, only check they are in it. Raises TxnError."""
        meta = self._check_producer(transactional_id, producer_id, epoch)
        wanted = set(partitions)
        if verify_only:
            if not wanted <= meta.partitions or meta.state != TxnState.ONGOING:
                raise TxnError(E.INVALID_TXN_STATE, "the partitions are not in the transaction")
            return
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return
        with self._written(meta):
            if meta.state != TxnState.ONGOING:
                meta.partitions = set()
                meta.start_ms = self.now_ms()
            meta.partitions |= wanted
            meta.state = TxnState.ONGOING
            self._store(meta)

    def end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort the ongoing transaction (a retry of a completed end succeeds).
        Raises TxnError."""
        self._here(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(E.INVALID_PRODUCER_ID_MAPPING)
        if epoch != meta.producer_epoch:
            # an end the coordinator completed itself (timeout) at a bumped epoch: fenced
            raise TxnError(E.PRODUCER_FENCED, f"epoch {epoch} is not {meta.producer_epoch}")
        if meta.state == TxnState.ONGOING:
            with self._written(meta):
                self._end(meta, commit)
            return
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.state == done:
            return  # a retry
        if meta.state in PREPARING:
            raise TxnError(CONCURRENT_TRANSACTIONS)
        raise TxnError(E.INVALID_TXN_STATE, f"cannot end a transaction in state {meta.state.name}")

    def _end(self, meta: TxnMetadata, commit: bool) -> None:
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        self._store(meta)
        self._complete(meta, commit)

    def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        """Write the markers of a prepared transaction, then its completion (in a cluster: have
        them sent; `markers_written` completes it)."""
        if self.defer_markers is not None:
            self.defer_markers(meta, commit)
            return
        self.write_markers(meta.producer_id, meta.producer_epoch, commit, sorted(meta.partitions))
        self._completed(meta, commit)

    def markers_written(self, transactional_id: str, producer_id: int, epoch: int) -> bool:
        """Cluster mode: the markers of the id's prepared transaction (at this producer id and
        epoch) are on every partition: write its completion. False when there was nothing to
        complete (the id moved, or was completed already). Raises TxnError."""
        meta = self.txns.get(transactional_id)
        if (
            meta is None
            or meta.state not in PREPARING
            or (meta.producer_id, meta.producer_epoch) != (producer_id, epoch)
        ):
            return False
        with self._written(meta):
            self._completed(meta, meta.state == TxnState.PREPARE_COMMIT)
        return True

    def _completed(self, meta: TxnMetadata, commit: bool) -> None:
        meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        meta.partitions = set()
        self._store(meta)

    # --- periodic checks ---------------------------------------------------------------------------

    def abort_timed_out(self) -> list[str]:
        """Abort every ongoing transaction older than its timeout, at a bumped epoch (the producer
        is fenced: its next request fails and it must start again). Returns the ids."""
        now = self.now_ms()
        aborted = []
        for meta in list(self.txns.values()):
            if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms:
                log.info(
                    "transaction of %s (producer %d) timed out after %d ms: aborting",
                    meta.transactional_id, meta.producer_id, now - meta.start_ms,
                )  # fmt: skip
                try:
                    with self._written(meta):
                        self._bump_epoch(meta)
                        self._end(meta, commit=False)
                    aborted.append(meta.transactional_id)
                except TxnError:  # logged; the next check tries again
                    pass
        return aborted

    def expire_ids(self) -> list[str]:
        """Forget ids idle (no transaction) for `transactional.id.expiration.ms`: a tombstone each.
        Returns the ids."""
        now = self.now_ms()
        gone = []
        for meta in list(self.txns.values()):
            if meta.state in COMPLETE and now - meta.last_update_ms >= self.config.id_expiration_ms:
                try:
                    with self._written(meta):
                        meta.state = TxnState.DEAD
                        self.topic.write(meta, now, tombstone=True)
                except TxnError:  # logged; the next check tries again
                    continue
                del self.txns[meta.transactional_id]
                gone.append(meta.transactional_id)
        return gone

    # --- describe and list -------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    def list(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
    ) -> list[TxnMetadata]:
        """The ids matching every filter given (Kafka state names, producer ids, the age of the
        ongoing transaction)."""
        states = set(states)
        pids = set(producer_ids)
        now = self.now_ms()
        out = []
        for meta in self.txns.values():
            if states and meta.state.kafka_name not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if min_duration_ms >= 0 and (
                meta.state != TxnState.ONGOING or now - meta.start_ms < min_duration_ms
            ):
                continue
            out.append(meta)
        return out

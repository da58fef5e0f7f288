"""Idempotent producers: per-partition producer state, sequence checks and duplicate detection.

Kafka's rules (ProducerStateManager / ProducerAppendInfo), per partition:
- a batch without a producer id (-1) is not checked;
- an epoch older than the one known for the producer is refused with INVALID_PRODUCER_EPOCH;
- a new (higher) epoch must start at sequence 0 (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise);
- within an epoch, a batch whose sequence range equals one of the producer's last five batches is a
  retry: it is acknowledged again with the offsets it got the first time and not appended;
- otherwise its first sequence must follow the last one (wrapping at 2**31 - 1 to 0);
- a producer the partition has never seen (or that was idle for `producer.id.expiration.ms`) may
  start at any sequence, as Kafka accepts it;
- retention and DeleteRecords do not forget producers (as Kafka since KIP-360): a retry of a batch
  they deleted is still a duplicate; `producer.id.expiration.ms` bounds the table.

Transactions: `ongoing` maps a producer id to the first offset of its open transaction (Kafka's
ongoingTxns); the earliest of them is the partition's first unstable offset, which the last stable
offset stops at. A producer with an open transaction does not expire. A marker (control batch) ends the
transaction and raises the producer's epoch to the marker's, so a fenced producer's late writes fail.

The state is rebuilt at start-up by walking batch headers (no record decoding); `snapshot()` /
`restore()` let the log keep a copy across clean shutdowns in Kafka's `<offset>.snapshot` spirit.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rdmalog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from rdmalog.store.records import CONTROL_BIT, BatchInfo

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
MAX_CACHED_BATCHES = 5  # max.in.flight.requests.per.connection that idempotence allows
_INT32_MAX = 2**31 - 1


class BatchMeta(NamedTuple):
    """Sequence range of one appended batch and the offsets it was given."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    """What a partition remembers of one producer id."""

    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    coordinator_epoch: int = -1  # of the last transaction marker (DescribeProducers reports it)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def _last_seq(first_seq: int, count: int) -> int:
    """Last sequence of a batch of `count` records starting at `first_seq` (wraps like Kafka)."""
    last = first_seq + count - 1
    return last - _INT32_MAX - 1 if last > _INT32_MAX else last


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerStateTable:
    """Producer ids of one partition and their recent batches."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.valid_to: int | None = None  # the offset a restored snapshot was valid to

    # --- transactions -----------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (None when there is none)."""
        return min(self.ongoing.values()) if self.ongoing else None

    def begin_transaction(self, producer_id: int, first_offset: int) -> None:
        """A transactional batch at `first_offset`: the producer's transaction is open from its first
        batch on."""
        self.ongoing.setdefault(producer_id, first_offset)

    def end_transaction(self, producer_id: int, epoch: int) -> int | None:
        """A marker of `producer_id` at `epoch`: the first offset of the transaction it ends (None
        when none was open); the producer's epoch rises to the marker's."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            self.producers[producer_id] = ProducerEntry(epoch)
        return self.ongoing.pop(producer_id, None)

    def stable_offset_after(self, producer_id: int, last_offset: int) -> int:
        """Kafka's lastStableOffset of a completed transaction: the first offset of the earliest
        other open transaction, else the offset after its marker."""
        others = [o for pid, o in self.ongoing.items() if pid != producer_id]
        return min(others) if others else last_offset + 1

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int) -> BatchMeta | None:
        """Validate a batch about to be appended: the cached metadata when it is a duplicate,
        None when it may be appended; raises the Kafka error when it must be refused."""
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current {entry.epoch}"
            )
        last_seq = _last_seq(first_seq, count)
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: new epoch {epoch} must start at sequence 0, "
                    f"got {first_seq}"
                )
            return None
        for meta in entry.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        if entry.batches and not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: expected sequence "
                f"{entry.last_seq + 1}, got {first_seq}"
            )
        return None

    def check_batches(self, infos: list[BatchInfo]) -> BatchMeta | None:
        """Kafka's idempotence checks for the batches of one append (raises on a sequence or epoch
        error); returns the earlier append's metadata when a batch is a retried duplicate."""
        seen: dict[int, int] = {}  # producer id -> last sequence within this append
        for info in infos:
            pid = info.producer_id
            if pid < 0 or info.attributes & CONTROL_BIT:
                continue
            if pid in seen:  # a second batch of the same producer in one request must follow on
                if info.base_sequence != (seen[pid] + 1) % 2**31:
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: batch sequence {info.base_sequence} does not follow {seen[pid]}"
                    )
            else:
                dup = self.check(pid, info.producer_epoch, info.base_sequence, info.count)
                if dup is not None:  # answered as a whole: through its producer's last batch
                    tail = [i for i in infos if i.producer_id == pid][-1]
                    if tail is not info:
                        end = self.check(pid, tail.producer_epoch, tail.base_sequence, tail.count)
                        if end is None:  # part retried, part new: not one earlier append
                            raise OutOfOrderSequenceError(
                                f"producer {pid}: a duplicate batch and new ones in one append"
                            )
                        dup = dup._replace(last_seq=end.last_seq, last_offset=end.last_offset)
                    return dup
            seen[pid] = (info.base_sequence + info.count - 1) % 2**31
        return None

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        count: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        """Record an appended batch (also used while rebuilding from the log)."""
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append(
            BatchMeta(first_seq, _last_seq(first_seq, count), first_offset, last_offset, timestamp)
        )

    def last_records(self) -> dict[int, tuple[int | None, int]]:
        """Kafka's lastRecordsOfActiveProducers: producer id -> (the last offset of its last data
        batch, or None; its epoch). The cleaner keeps those batches (emptied if need be), so the
        state can be rebuilt from the log."""
        return {
            pid: (e.batches[-1].last_offset if e.batches else None, e.epoch)
            for pid, e in self.producers.items()
        }

    def expire(self, now: int, max_age_ms: int) -> int:
        """Forget producers whose last batch's max timestamp is `max_age_ms` old (Kafka's
        `producer.id.expiration.ms`); returns how many went."""
        old = [
            pid
            for pid, e in self.producers.items()
            if pid not in self.ongoing
            and (not e.batches or now - e.batches[-1].timestamp >= max_age_ms)
        ]
        for pid in old:
            del self.producers[pid]
        return len(old)

    def truncate_after(self, offset: int) -> None:
        """Forget batches at or after `offset` (log truncation)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            while entry.batches and entry.batches[-1].last_offset >= offset:
                entry.batches.pop()
            if not entry.batches:
                del self.producers[pid]
        for pid, first in list(self.ongoing.items()):
            if first >= offset:
                del self.ongoing[pid]

    # --- persistence ------------------------------------------------------------------------------

    def snapshot(self, path: Path, end_offset: int) -> None:
        """Write the table, valid up to `end_offset`, atomically to `path`."""
        body = {
            "end_offset": end_offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "batches": [list(b) for b in e.batches],
                    "coordinator_epoch": e.coordinator_epoch,
                }
                for pid, e in self.producers.items()
            },
            "ongoing": {str(pid): first for pid, first in self.ongoing.items()},
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        tmp.replace(path)

    @classmethod
    def restore(cls, path: Path) -> tuple[ProducerStateTable, int] | None:
        """Read a snapshot: (table, end offset it is valid to), or None when absent or unreadable."""
        try:
            body = json.loads(path.read_text())
            table = cls()
            for pid, e in body["producers"].items():
                entry = table.producers[int(pid)] = ProducerEntry(
                    int(e["epoch"]), coordinator_epoch=int(e.get("coordinator_epoch", -1))
                )
                entry.batches.extend(BatchMeta(*map(int, b)) for b in e["batches"])
            table.ongoing = {int(p): int(o) for p, o in body.get("ongoing", {}).items()}
            table.valid_to = int(body["end_offset"])
            return table, table.valid_to
        except (OSError, ValueError, KeyError, TypeError):
            return None

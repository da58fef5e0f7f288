"""Micro-batch stream reader: per-partition offsets as the stream's (checkpointed) offset JSON."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from rdmalog.spark.offsets import (
    OffsetMap,
    OffsetRange,
    discover,
    from_json,
    plan_ranges,
    rate_limit,
    report_data_loss,
    resolve,
    to_json,
)
from rdmalog.spark.options import OffsetSpec, OptionError, ReadOptions, TopicPartition
from rdmalog.spark.reader import check_schema, read_arrow
from rdmalog.spark.transport import open_offsets

try:  # admission control and Trigger.AvailableNow for Python sources: pyspark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - older pyspark
    HAS_ADMISSION_CONTROL = False
    ReadLimit = object  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Placeholder on pyspark < 4.2."""


class RdmalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"topic": {"partition": next offset}}, exactly spark-sql-kafka's JSON."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        check_schema(opts, schema)
        if opts.max_offsets_per_trigger is not None and not HAS_ADMISSION_CONTROL:
            raise OptionError(
                "option 'maxOffsetsPerTrigger' needs pyspark >= 4.2 (admission control for "
                "Python streaming sources)"
            )
        self.opts = opts
        self.schema = schema
        self._target: OffsetMap | None = None  # Trigger.AvailableNow's end
        self._initial: dict | None = None  # startingOffsets as first resolved
        self._client = None

    def __getstate__(self) -> dict:
        """Pickled for executors without the driver's open client."""
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _offsets(self):  # -> transport.Offsets, kept open while the query runs
        if self._client is None:
            self._client = open_offsets(self.opts.conn)
        return self._client

    def _latest(self, begin: OffsetMap | None = None) -> OffsetMap:
        """Latest offsets now, capped by Trigger.AvailableNow's target.

        Spark fixes the target before it asks a new query's initialOffset(), so a start resolved
        later (`latest` under traffic) may be past it: the cap never goes below `begin`, or
        that nothing-to-read would look like offsets going back."""
        client = self._offsets()
        tps = discover(client, self.opts.subscription, check_assigned=False)
        latest = resolve(client, OffsetSpec("latest"), tps, starting=False, fail_on_data_loss=False)
        if self._target is not None:
            floor = begin or {}
            latest = {
                tp: min(off, max(self._target[tp], floor.get(tp, 0)))
                for tp, off in latest.items()
                if tp in self._target
            }
        return latest

    def initialOffset(self) -> dict:
        """A new query starts at startingOffsets (a restarted one at its checkpoint).

        Resolved once: Spark asks again when it plans the first batch, and `latest` must not move
        between the two calls (spark-sql-kafka keeps the first answer too)."""
        if self._initial is None:
            self._initial = self._resolve_initial()
        return self._initial

    def _resolve_initial(self) -> dict:
        client = self._offsets()
        tps = discover(client, self.opts.subscription)
        start = resolve(
            client,
            self.opts.starting,
            tps,
            starting=True,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            timestamp_strategy=self.opts.timestamp_strategy,
        )
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as a row limit."""
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Latest offsets of every partition, capped by the read limit (spark-sql-kafka's split)."""
        if start is None:
            return to_json(self._latest())
        begin = from_json(start)
        latest = self._latest(begin)
        self._start_new_at_earliest(begin, latest)
        if HAS_ADMISSION_CONTROL and isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest)
        return to_json(latest)

    def _start_new_at_earliest(self, begin: dict, seen: Iterable[TopicPartition]) -> None:
        """Partitions in `seen` but not in `begin` appeared while the query runs: spark-sql-kafka
        reads them from their earliest offset."""
        new = [tp for tp in seen if tp not in begin]
        if new:
            begin.update(
                resolve(
                    self._offsets(),
                    OffsetSpec("earliest"),
                    new,
                    starting=True,
                    fail_on_data_loss=False,
                )
            )

    def reportLatestOffset(self) -> dict | None:
        return to_json(self._latest())

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what is in the log now, then stop."""
        self._target = None
        self._target = self._latest()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Runs on the driver: one range per topic-partition that advanced."""
        begin, until = from_json(start), from_json(end)
        gone = [tp for tp in begin if tp not in until]
        if gone:
            names = ", ".join(f"{t}-{p}" for t, p in gone)
            report_data_loss(self.opts.fail_on_data_loss, f"topic-partitions {names} are gone")
        self._start_new_at_earliest(begin, until)
        for tp, off in until.items():
            if off < begin[tp]:
                report_data_loss(
                    self.opts.fail_on_data_loss,
                    f"{tp[0]}-{tp[1]}: offset went back from {begin[tp]} to {off}",
                )
        return plan_ranges(begin, until, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator:
        """Runs on an executor."""
        assert isinstance(partition, OffsetRange)
        return read_arrow(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, never in the broker."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

"""Driver-side offset logic: discover partitions, resolve offset specs, rate-limit, plan ranges."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from rdmalog.spark.interface import Offsets
from rdmalog.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    Subscription,
    TopicPartition,
)

OffsetMap = dict[TopicPartition, int]
log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets the query needs are no longer (or not) in the log, with failOnDataLoss=true."""


def report_data_loss(fail: bool, message: str) -> None:
    """Raise when `fail` (failOnDataLoss=true); otherwise log a warning and the caller carries
    on, as spark-sql-kafka does."""
    if fail:
        raise DataLossError(
            message + ". Some data may have been lost; set option 'failOnDataLoss' to 'false' "
            "to carry on instead."
        )
    log.warning(
        "%s. Some data may have been lost (deleted by retention, DeleteRecords or with its "
        "topic); carrying on because failOnDataLoss is false.",
        message,
    )


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: offsets [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: OffsetMap) -> dict[str, dict[str, int]]:
    """spark-sql-kafka's offset JSON shape: {"topic": {"0": 23}}, topics and partitions sorted."""
    result: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        result.setdefault(topic, {})[str(part)] = int(off)
    return result


def from_json(data: dict) -> OffsetMap:
    """Inverse of `to_json`."""
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


def discover(
    client: Offsets, subscription: Subscription, *, check_assigned: bool = True
) -> list[TopicPartition]:
    """The topic-partitions the subscription covers right now, sorted.

    `check_assigned` (at the start of a query): an `assign`ed partition that does not exist is a
    bad option. Later in a stream it is a partition gone (deleted with its topic), left out here
    so the caller reports data loss, as spark-sql-kafka's AssignStrategy does."""
    if subscription.kind == "assign":
        existing = client.topic_partitions()
        missing = [tp for tp in subscription.assigned if tp[1] not in existing.get(tp[0], [])]
        if missing and check_assigned:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise OptionError(f"option 'assign' names topic-partitions that do not exist: {names}")
        return [tp for tp in subscription.assigned if tp not in missing]
    return sorted(
        (topic, part)
        for topic, parts in client.topic_partitions().items()
        if subscription.matches(topic)
        for part in parts
    )


def _check_covers(spec: OffsetSpec, tps: list[TopicPartition]) -> None:
    given, have = set(spec.offsets), set(tps)
    if given != have:
        missing = ", ".join(f"{t}-{p}" for t, p in sorted(have - given)) or "none"
        extra = ", ".join(f"{t}-{p}" for t, p in sorted(given - have)) or "none"
        raise OptionError(
            f"option '{spec.option}' must specify every topic-partition of the subscription "
            f"(missing: {missing}; not in the subscription: {extra})"
        )


def resolve(
    client: Offsets,
    spec: OffsetSpec,
    tps: list[TopicPartition],
    *,
    starting: bool,
    fail_on_data_loss: bool,
    timestamp_strategy: str = "error",
) -> OffsetMap:
    """Exact offsets for `spec` on `tps`, asked of the broker now."""
    if not tps:
        return {}
    marks = client.watermarks(tps)
    if spec.kind == "earliest":
        return {tp: marks[tp][0] for tp in tps}
    if spec.kind == "latest":
        return {tp: marks[tp][1] for tp in tps}
    if spec.kind == "offsets":
        _check_covers(spec, tps)
        result: OffsetMap = {}
        for tp in tps:
            low, high = marks[tp]
            off = spec.offsets[tp]
            if off == EARLIEST:
                off = low
            elif off == LATEST:
                off = high
            elif off > high:
                raise OptionError(
                    f"option '{spec.option}': offset {off} for {tp[0]}-{tp[1]} is past the "
                    f"latest offset {high}"
                )
            elif off < low and starting:
                report_data_loss(
                    fail_on_data_loss,
                    f"option '{spec.option}': offset {off} for {tp[0]}-{tp[1]} is before the "
                    f"earliest available offset {low}",
                )
                off = low
            result[tp] = off
        return result
    if spec.kind == "timestamps":
        _check_covers(spec, tps)
        stamps = dict(spec.offsets)
    else:
        stamps = {tp: spec.timestamp for tp in tps}
    found = client.offsets_for_times(stamps)
    result = {}
    for tp in tps:
        off = found.get(tp)
        if off is None:
            if starting and timestamp_strategy == "error":
                raise OptionError(
                    f"option '{spec.option}': no record in {tp[0]}-{tp[1]} has a timestamp >= "
                    f"{stamps[tp]}; set 'startingOffsetsByTimestampStrategy' to 'latest' to start "
                    "from the latest offset instead"
                )
            off = marks[tp][1]
        result[tp] = min(max(off, marks[tp][0]), marks[tp][1])
    return result


def rate_limit(limit: int, start: OffsetMap, end: OffsetMap) -> OffsetMap:
    """spark-sql-kafka's maxOffsetsPerTrigger split: `limit` offsets shared by backlog size."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if tp in start and e - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    limited: OffsetMap = {}
    for tp, e in end.items():
        if tp not in sizes:
            limited[tp] = e
            continue
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        limited[tp] = min(e, start[tp] + step)
    return limited


def plan_ranges(start: OffsetMap, end: OffsetMap, min_partitions: int | None) -> list[OffsetRange]:
    """Non-empty ranges, one per topic-partition, split further to reach `minPartitions`.

    As spark-sql-kafka's KafkaOffsetRangeCalculator: ranges too small to split count one
    partition each and are left out of the share the larger ranges split, so a skewed
    backlog gives about `minPartitions` partitions rather than that many plus the small ones.
    """
    ranges = [
        OffsetRange(tp[0], tp[1], start[tp], e)
        for tp, e in sorted(end.items())
        if tp in start and e > start[tp]
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges

    def part_count(size: int, total: int, parts: int) -> int:
        return max(math.floor(size / total * parts + 0.5), 1)  # Scala's Math.round

    total = sum(r.size for r in ranges)
    unsplit = [r for r in ranges if part_count(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    split: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if r in unsplit else part_count(r.size, split_total, split_min)
        remaining, begin = r.size, r.start
        for i in range(parts):
            this = remaining // (parts - i)
            remaining -= this
            stop = min(begin + this, r.end)
            if stop > begin:
                split.append(OffsetRange(r.topic, r.partition, begin, stop))
            begin = stop
    return split

"""Counters the log store keeps for the broker's metrics (gateway/metrics.py exports them): plain
numbers bumped once per flush, never per record. Process-wide, as Kafka's Yammer metrics are."""

from __future__ import annotations

from bisect import bisect_left

# Latency buckets in milliseconds (upper bounds; a last bucket takes the rest).
BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class Histogram:
    """Counts per bucket and a sum; made cumulative only when exported."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_MS) + 1)
        self.total = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(BUCKETS_MS, ms)] += 1
        self.total += ms

    def buckets(self) -> list[tuple[str, float]]:
        """(upper bound, cumulative count) pairs, Prometheus' way, ending with +Inf."""
        out, running = [], 0
        for bound, n in zip((*BUCKETS_MS, None), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound is None else str(bound), running))
        return out


class LogStats:
    """What every PartitionLog of the process reports: fsync times of its flushes."""

    def __init__(self) -> None:
        self.flush = Histogram()


LOG_STATS = LogStats()

"""Kafka's rack-unaware replica assignment (AdminUtils.assignReplicasToBrokersRackUnaware).

Partition p's first replica is broker (p + start) mod n of the sorted broker list; the others follow
at a shift that grows by one every n partitions, so leaders and followers both spread evenly and
no two partitions in a row put their followers on the same brokers. `start` and the shift are random
unless fixed (tests); growing a topic keeps the start of its partition 0.
"""

from __future__ import annotations

import random

from rdmalog.errors import InvalidPartitionsError, InvalidReplicationFactorError


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: list[int],
    *,
    start_index: int = -1,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replicas for partitions `start_partition` .. `start_partition + num_partitions - 1`."""
    if num_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}."
        )
    rng = rng or random.Random()
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    p = max(start_partition, 0)
    for _ in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        replicas += [ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        out[p] = replicas
        p += 1
    return out


def grow_assignment(
    existing: dict[int, list[int]], total: int, brokers: list[int]
) -> dict[int, list[int]]:
    """Replicas for the partitions a topic gains going from len(existing) to `total` partitions
    (CreatePartitions): same replication factor, starting where partition 0 starts."""
    count = len(existing)
    if total <= count:
        raise InvalidPartitionsError(
            f"Topic currently has {count} partitions, {total} would not be an increase."
        )
    rf = len(existing[0])
    ids = sorted(brokers)
    first = existing[0][0]
    start = ids.index(first) if first in ids else 0
    return assign_replicas(total - count, rf, ids, start_index=start, start_partition=count)

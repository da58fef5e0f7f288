"""What the data source needs of a client, whichever `rdmalog.transport` picks: driver-side
offset lookups, executor-side records and writes. `transport.py` picks the implementation
(`kafka_client.py` or `native_client.py`); these types live apart from it so that what the
clients import (`offsets.py` needs `Offsets`) never leads back to the dispatch.
"""

from __future__ import annotations

from typing import Protocol

from rdmalog.spark.options import TopicPartition

# (key, value, offset, timestamp, timestamp type, headers) of one record read
Record = tuple[bytes | None, bytes | None, int, int | None, int, list | None]


class Offsets(Protocol):
    """Driver-side offset lookups."""

    def topic_partitions(self) -> dict[str, list[int]]: ...

    def watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]: ...

    def offsets_for_times(
        self, stamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]: ...

    def close(self) -> None: ...


class Sink(Protocol):
    """Executor-side writer."""

    sent: int

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None: ...

    def close(self) -> None: ...

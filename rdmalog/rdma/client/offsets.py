"""Committed offsets of a native consumer's group, kept by the broker's group coordinator.

Native consumers read one-sidedly, but their progress belongs with Kafka's: offsets are committed
to and fetched from `__consumer_offsets` through the gateway's Kafka protocol (OffsetCommit and
OffsetFetch via kafka-python), so a Kafka consumer of the same group resumes where a native one
committed and the other way round. Commits are "simple" ones (generation -1, no member id), which
the coordinator accepts while the group has no active members, as for Kafka's manual assignment.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class OffsetCommitError(Exception):
    """The coordinator refused a commit or an offset fetch (the Kafka error's text inside;
    `error_code` when the answer was a Kafka error code)."""

    def __init__(self, message: str, error_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code


class GroupOffsets:
    """OffsetCommit / OffsetFetch for `group_id` against the Kafka listener at `bootstrap`."""

    def __init__(self, bootstrap: str, group_id: str, timeout: float = 10.0):
        from kafka import KafkaConsumer

        self.group_id = group_id
        self.timeout_ms = int(timeout * 1000)
        try:
            self._kc = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=group_id,
                enable_auto_commit=False,
                request_timeout_ms=max(self.timeout_ms, 1000) + 500,
            )
        except Exception as e:  # no broker at bootstrap, or it does not speak Kafka
            raise OffsetCommitError(f"group {group_id!r}: cannot reach {bootstrap}: {e}") from e

    def commit(self, offsets: dict[tuple[str, int], int], metadata: str = "") -> None:
        """Store `offsets` ({(topic, partition): next offset to read}) for the group."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        req = {
            TopicPartition(t, p): OffsetAndMetadata(int(o), metadata, -1)
            for (t, p), o in offsets.items()
        }
        if not req:
            return
        try:
            self._kc.commit(req, timeout_ms=self.timeout_ms)
        except Exception as e:
            raise OffsetCommitError(f"group {self.group_id!r}: commit failed: {e}") from e

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of one partition (None: nothing committed)."""
        from kafka import TopicPartition

        try:
            off = self._kc.committed(TopicPartition(topic, partition), timeout_ms=self.timeout_ms)
        except Exception as e:
            raise OffsetCommitError(f"group {self.group_id!r}: offset fetch failed: {e}") from e
        return None if off is None or off < 0 else int(off)

    def close(self) -> None:
        try:
            self._kc.close(autocommit=False)
        except Exception:  # closing must not mask the caller's own error
            log.debug("closing the group offsets client failed", exc_info=True)

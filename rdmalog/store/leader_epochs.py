"""The leader epoch cache of one partition, kept as Kafka keeps it in `leader-epoch-checkpoint`.

Each entry says "epoch E started at offset O". Clients use it through OffsetForLeaderEpoch to detect log
truncation; a log imported from Kafka brings its epochs along (the checkpoint file, or, when that is
missing, the partitionLeaderEpoch fields of its batches), so the broker keeps stamping new batches with
the latest epoch and answers for the old ones exactly.

File format (text): a version line `0`, a count line, then one `epoch start_offset` line per entry.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Sorted (epoch, start offset) entries with Kafka's lookup rules."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than the latest; True if so."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        # an entry starting at or after the new one is stale (it was truncated away)
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: the end of the largest epoch <= `requested`.

        As Kafka's LeaderEpochFileCache.endOffsetFor: the latest epoch ends at the log end; an older
        one ends where the next higher epoch starts; an epoch above all known ones is undefined.
        """
        if requested == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested == self.latest_epoch:
            return requested, log_end_offset
        epochs = [e for e, _ in self.entries]
        higher = bisect_right(epochs, requested)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested, self.entries[0][1]
        return epochs[higher - 1], self.entries[higher][1]

    def epoch_for(self, offset: int) -> int:
        """The epoch whose range holds `offset` (UNDEFINED_EPOCH when none starts at or below it)."""
        i = bisect_right([o for _, o in self.entries], offset)
        return self.entries[i - 1][0] if i else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated there)."""
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """Entries wholly below a new log start offset go; the one spanning it now starts there."""
        keep = [(e, o) for e, o in self.entries if o >= start_offset]
        earlier = [(e, o) for e, o in self.entries if o < start_offset]
        if earlier:
            keep.insert(0, (earlier[-1][0], start_offset))
        self.entries = keep

    # --- the checkpoint file ------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache | None:
        """Read a checkpoint file; None when it is missing or malformed (then rebuild from batches)."""
        cache = cls(path)
        try:
            lines = path.read_text().split("\n")
            if lines[0].strip() != "0":
                return None
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, offset = line.split()
                cache.entries.append((int(epoch), int(offset)))
            if len(cache.entries) != count:
                return None
        except (OSError, ValueError, IndexError):
            return None
        return cache

    def save(self, sync: bool = True) -> None:
        """Write the checkpoint atomically (temp file, fsync unless not `sync`, rename), as Kafka
        does; an unsynced write is synced by the log's next flush."""
        if self.path is None:
            return
        lines = "".join(f"{e} {o}\n" for e, o in self.entries)
        body = f"0\n{len(self.entries)}\n{lines}"
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(body)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a partial file would hold space a full disk has not got
            raise

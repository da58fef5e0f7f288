"""Producer id allocation for InitProducerId: unique across restarts of the broker.

Ids are handed out from blocks (as Kafka's ProducerIdManager does); the end of the current block is
persisted before any id from it is used, so a crash never hands out an id twice.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rdmalog.store.checkpoints import write_atomic
from rdmalog.store.disk import storage_error

FILE_NAME = "rdmalog-producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdAllocator:
    """Allocates producer ids from persisted blocks in `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self._block_end = int(path.read_text().strip())
        except (OSError, ValueError):
            self._block_end = 0
        self._next = self._block_end  # nothing of a previous block is reused

    def reserve_past(self, producer_id: int) -> None:
        """Hand out only ids above `producer_id` from now on: ids in logs copied from another
        cluster (imported, mirrored) must not be handed to new producers, whose sequence numbers
        would collide with what the log holds for them."""
        with self._lock:
            self._next = max(self._next, producer_id + 1)

    def allocate(self) -> int:
        """A producer id no earlier allocation (in this or a previous run) returned."""
        with self._lock:
            if self._next >= self._block_end:
                try:
                    write_atomic(self.path, f"{self._next + BLOCK_SIZE}\n")
                except OSError as e:
                    raise storage_error(e, self.path, "saving a block of producer ids") from e
                self._block_end = self._next + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid

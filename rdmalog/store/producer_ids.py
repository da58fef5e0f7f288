"""Producer id allocation for InitProducerId: unique across restarts of the broker.

Ids are handed out from blocks (as Kafka's ProducerIdManager does); the end of the current block is
persisted before any id from it is used, so a crash never hands out an id twice.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

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

    def allocate(self) -> int:
        """A producer id no earlier allocation (in this or a previous run) returned."""
        with self._lock:
            if self._next >= self._block_end:
                self._block_end = self._next + BLOCK_SIZE
                tmp = self.path.with_name(self.path.name + ".tmp")
                with open(tmp, "w") as f:
                    f.write(f"{self._block_end}\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            pid = self._next
            self._next += 1
            return pid

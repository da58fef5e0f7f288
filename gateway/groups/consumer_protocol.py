"""What the coordinator reads of the "consumer" embedded protocol: a subscription's topic names."""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics in a `ConsumerProtocolSubscription` (any version); None when it does not parse."""
    data = bytes(metadata)
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version < 0:
            return None
        (count,) = struct.unpack_from(">i", data, 2)
        pos, topics = 6, set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topics.add(data[pos : pos + n].decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None

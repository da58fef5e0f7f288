"""What an append to a partition log reports back (its own module: the log's mixins build it
too, and they cannot import the log)."""

from __future__ import annotations

from typing import NamedTuple


class AppendResult(NamedTuple):
    """What an append reports back (offsets are inclusive)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    flush_needed: bool
    duplicate: bool = False  # a retry of a batch the log holds: its first offsets, nothing written

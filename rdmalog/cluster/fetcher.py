"""Followers pull from leaders (Kafka's ReplicaFetcherThread): one fetch loop per leader broker, on the
event loop, over a Kafka-protocol connection the gateway provides (`LeaderConnection`).

For every partition it starts following in a leader epoch, the follower first truncates what the
leader does not have (KIP-101/279): it asks OffsetForLeaderEpoch for its latest epoch and cuts its log
at the returned end offset (or, when the leader knows only an older epoch, at the smaller of the
leader's and its own end of that epoch); then it fetches from its log end offset with its replica
id and the leader epoch, appends the leader's batches as they are (offsets, epochs, bytes), and
takes the leader's high watermark (up to its own log end) and log start offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rdmalog.errors import CorruptRecordError, OffsetOutOfRangeError

log = logging.getLogger(__name__)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
_LEN = struct.Struct(">i")
BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0


class LeaderConnection(Protocol):
    """A connection to a leader broker (the gateway builds it on its Kafka codec)."""

    async def offsets_for_leader_epoch(
        self, replica_id: int, partitions: list[tuple[str, int, int, int]]
    ) -> dict[tuple[str, int], tuple[int, int, int]]:
        """(topic, partition, current leader epoch, epoch asked) -> (error, epoch, end offset)."""

    async def fetch(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partitions: list[tuple[str, int, int, int, int, int]],
    ) -> dict[tuple[str, int], tuple[int, int, int, Any]]:
        """(topic, partition, fetch offset, current leader epoch, log start, max bytes) ->
        (error, high watermark, log start offset, records or None)."""

    def abort(self) -> None:
        """Drop the connection now (a request in flight fails)."""

    async def close(self) -> None: ...


Connect = Callable[[str, int], Awaitable[LeaderConnection]]


def whole_batches(records: Any) -> memoryview:
    """The records up to the last complete batch (a leader may cut the last one short)."""
    mv = memoryview(records)
    pos, end = 0, len(mv)
    while end - pos >= 12:
        size = _LEN.unpack_from(mv, pos + 8)[0] + 12
        if size <= 12 or pos + size > end:
            break
        pos += size
    return mv[:pos]


@dataclass
class Following:
    """One partition a LeaderFetcher pulls."""

    rep: Any  # Replica
    epoch: int
    truncated: bool = False
    retry_at: float = 0.0
    out_of_range: int = 0
    hw_at: float = 0.0  # pushed (its leader writes its head): when to fetch the high watermark


class LeaderFetcher:
    """The fetch loop towards one leader broker."""

    def __init__(self, manager: FetcherManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.parts: dict[tuple[str, int], Following] = {}
        self.changed = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.conn: LeaderConnection | None = None
        self._polling = False  # a Fetch is in flight
        self._cut = False  # ... and was cut on purpose

    def add(self, rep: Any, epoch: int) -> None:
        current = self.parts.get(rep.key)
        if current is not None and current.epoch == epoch and current.rep is rep:
            return
        self.parts[rep.key] = Following(rep, epoch)
        self._changed()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: tuple[str, int]) -> None:
        if self.parts.pop(key, None) is not None:
            self._changed()

    def _changed(self) -> None:
        """Partitions came or went: a long poll in flight is cut (its connection dropped), so the
        next request has them at once instead of after replica.fetch.wait.max.ms."""
        self.changed.set()
        if self._polling and self.conn is not None:
            self._cut = True
            self.conn.abort()

    async def stop(self) -> None:
        self.parts.clear()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        await self._drop_connection()

    async def _drop_connection(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _run(self) -> None:
        backoff = BACKOFF_S
        loop = asyncio.get_running_loop()
        while self.parts:
            if self.conn is None:
                endpoint = self.manager.endpoint(self.leader)
                if endpoint is None:
                    await self._pause(backoff)
                    continue
                try:
                    self.conn = await asyncio.wait_for(self.manager.connect(*endpoint), 5.0)
                except (OSError, TimeoutError) as exc:
                    log.info("cannot reach leader %d at %s:%d: %s", self.leader, *endpoint, exc)
                    await self._pause(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
            try:
                self.changed.clear()
                await self._truncate()
                now = loop.time()
                ready = [
                    f
                    for f in self.parts.values()
                    if f.truncated and f.retry_at <= now and not self._pushed_wait(f, now)
                ]
                if not ready:
                    await self._pause(BACKOFF_S)
                    continue
                self._polling, self._cut = True, False
                try:
                    await self._fetch(ready)
                finally:
                    self._polling = False
                backoff = BACKOFF_S
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._cut:  # our own cut: the partitions changed
                    await self._drop_connection()
                    continue
                log.info("fetching from leader %d failed: %r; reconnecting", self.leader, exc)
                await self._drop_connection()
                await self._pause(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        await self._drop_connection()

    def _pushed_wait(self, f: Following, now: float) -> bool:
        """A pushed partition is fetched only for the leader's high watermark and log start,
        every replica.fetch.wait.max.ms (its leader answers it without records)."""
        if not f.rep.push_grant:
            return False
        if f.hw_at > now:
            return True
        f.hw_at = now + self.manager.max_wait_ms / 1000
        return False

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), seconds)

    def _current(self, key: tuple[str, int], f: Following) -> bool:
        """Still following this partition in this epoch (roles may change while a request runs)."""
        rep = f.rep
        return (
            self.parts.get(key) is f
            and rep.role == "follower"
            and rep.leader_id == self.leader
            and rep.leader_epoch == f.epoch
        )

    async def _truncate(self) -> None:
        todo = []
        now = asyncio.get_running_loop().time()
        for key, f in self.parts.items():
            if f.truncated or f.retry_at > now:
                continue
            plog = f.rep.log
            latest = plog.leader_epochs.latest_epoch
            if latest < 0:  # no epochs in this log: Kafka's fallback is the high watermark
                if plog.log_end_offset > plog.high_watermark:
                    plog.truncate_to(plog.high_watermark)
                f.truncated = True
                continue
            todo.append((key, f, latest))
        if not todo:
            return
        answers = await self.conn.offsets_for_leader_epoch(
            self.manager.broker_id, [(k[0], k[1], f.epoch, latest) for k, f, latest in todo]
        )
        now = asyncio.get_running_loop().time()
        for key, f, latest in todo:
            if not self._current(key, f):
                continue
            error, epoch, end = answers.get(key, (-1, -1, -1))
            if error:
                f.retry_at = now + BACKOFF_S  # the leader has not taken over yet, or moved on
                continue
            plog = f.rep.log
            if epoch < 0 or end < 0:
                target = plog.high_watermark
            elif epoch == latest:
                target = end
            else:
                target = min(end, plog.epoch_end_offset(epoch)[1])
            if 0 <= target < plog.log_end_offset:
                log.info(
                    "%s-%d: truncating to %d (leader %d has epoch %d up to %d; log end was %d)",
                    key[0], key[1], target, self.leader, epoch, end, plog.log_end_offset,
                )  # fmt: skip
                plog.truncate_to(target)
            f.truncated = True

    async def _fetch(self, ready: list[Following]) -> None:
        m = self.manager
        request = [
            (
                f.rep.topic,
                f.rep.partition,
                f.rep.log.log_end_offset,
                f.epoch,
                f.rep.log.log_start_offset,
                m.max_partition_bytes,
            )  # fmt: skip
            for f in ready
        ]
        answers = await self.conn.fetch(
            m.broker_id, m.max_wait_ms, 1, m.max_response_bytes, request
        )
        now = asyncio.get_running_loop().time()
        for f in ready:
            key = f.rep.key
            answer = answers.get(key)
            if answer is None or not self._current(key, f):
                continue
            error, hw, log_start, records = answer
            plog = f.rep.log
            if error == NONE:
                f.out_of_range = 0
                if f.rep.push_grant:  # its leader writes the head: nothing to append here
                    records = None
                if records is not None and len(records):
                    try:
                        plog.append_replicated(whole_batches(records))
                    except CorruptRecordError as exc:
                        log.warning("%s-%d: %s; truncating again", key[0], key[1], exc)
                        f.truncated = False
                        continue
                plog.set_high_watermark(min(hw, plog.log_end_offset))
                if log_start > plog.log_start_offset:
                    with contextlib.suppress(OffsetOutOfRangeError):
                        plog.delete_records(min(log_start, plog.high_watermark))
            elif error == OFFSET_OUT_OF_RANGE:
                self._out_of_range(f, hw, log_start)
            else:
                f.retry_at = now + BACKOFF_S

    def _out_of_range(self, f: Following, hw: int, log_start: int) -> None:
        plog = f.rep.log
        key = f.rep.key
        if plog.log_end_offset < log_start:
            log.info(
                "%s-%d: the leader's log starts at %d, after this log's end %d: starting over there",
                key[0], key[1], log_start, plog.log_end_offset,
            )  # fmt: skip
            plog.reset_to(log_start)
            return
        f.out_of_range += 1
        if f.out_of_range > 1 and 0 <= hw < plog.log_end_offset:
            log.info("%s-%d: ahead of the leader; truncating to its high watermark %d", *key, hw)
            plog.truncate_to(hw)
        f.truncated = False


class FetcherManager:
    """The fetch loops of one broker, one per leader it follows."""

    def __init__(
        self,
        broker_id: int,
        connect: Connect,
        endpoint: Callable[[int], tuple[str, int] | None],
        *,
        max_wait_ms: int = 500,
        max_partition_bytes: int = 1048576,
        max_response_bytes: int = 10485760,
    ) -> None:
        self.broker_id = broker_id
        self.connect = connect
        self.endpoint = endpoint
        self.max_wait_ms = max_wait_ms
        self.max_partition_bytes = max_partition_bytes
        self.max_response_bytes = max_response_bytes
        self.fetchers: dict[int, LeaderFetcher] = {}
        self._following: dict[tuple[str, int], int] = {}  # partition -> leader it is fetched from

    def follow(self, rep: Any, leader: int, epoch: int) -> None:
        key = rep.key
        prev = self._following.get(key)
        if prev is not None and prev != leader:
            self.fetchers[prev].remove(key)
        self._following[key] = leader
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = LeaderFetcher(self, leader)
        fetcher.add(rep, epoch)

    def truncated(self, rep: Any, leader: int, epoch: int) -> bool:
        """Whether rep follows `leader` in `epoch` here and has truncated for it (any thread)."""
        if self._following.get(rep.key) != leader:
            return False
        fetcher = self.fetchers.get(leader)
        f = None if fetcher is None else fetcher.parts.get(rep.key)
        return f is not None and f.rep is rep and f.epoch == epoch and f.truncated

    def wake(self, rep: Any) -> None:
        """rep is pulled again (its leader's push grant ended): fetch it now."""
        leader = self._following.get(rep.key)
        fetcher = None if leader is None else self.fetchers.get(leader)
        if fetcher is not None:
            f = fetcher.parts.get(rep.key)
            if f is not None:
                f.hw_at = 0.0
            fetcher._changed()

    def unfollow(self, rep: Any) -> None:
        leader = self._following.pop(rep.key, None)
        if leader is not None:
            self.fetchers[leader].remove(rep.key)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._following.clear()
        for f in fetchers:
            await f.stop()

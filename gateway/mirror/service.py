"""Mirror topics: topics whose config `rdmalog.mirror.source` names a source cluster's bootstrap
servers are copied from the topic of the same name there, batch by batch with the source's offsets,
as a follower copies its leader (PartitionLog.append_replicated, from the cluster work). Clients
read them as usual; they are read-only (Produce and RDMA produce grants are refused) until the
config is removed (`rdmalog mirror promote`), which stops the copy and makes the topic writable.

One link per source cluster fetches every mirrored partition from its leader at the mirror's log
end offset, whole batches up to the source's high watermark, and appends them unchanged (CRCs
checked); the high watermark follows. A partition that is empty here and starts later at the source
(retention there) starts at the source's log start offset; one whose source is behind it (the
source lost data) is reported and left alone. Every `mirror.offsets.sync.interval.ms` the link copies
the source groups' committed offsets of mirrored topics into the coordinator here (metadata
`rdmalog-mirror`), except for groups that have members here or committed here themselves: those
moved, and their offsets are theirs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from gateway.mirror.source import SourceCluster
from rdmalog.errors import OFFSET_OUT_OF_RANGE
from rdmalog.store.records import iter_batches

if TYPE_CHECKING:
    from gateway.broker import Broker

log = logging.getLogger("gateway.mirror")

SOURCE_CONFIG = "rdmalog.mirror.source"
MIRROR_METADATA = "rdmalog-mirror"  # the metadata of offsets the mirror commits
SCAN_INTERVAL_S = 1.0
METADATA_MAX_AGE_S = 30.0
MAX_WAIT_MS = 500
BACKOFF_S = 1.0


def mirror_source(plog_or_topic: Any) -> str:
    """The source bootstrap of a mirror topic's log or topic ('' when it is not one)."""
    return plog_or_topic.config.rdmalog_mirror_source or ""


def whole_batches(records: Any) -> tuple[memoryview | None, int]:
    """The whole batches at the start of fetched records (a fetch may end inside one), and the
    largest producer id among them (-1: none)."""
    mv = memoryview(records) if records is not None else memoryview(b"")
    end, pid = 0, -1
    for batch in iter_batches(mv):
        end = batch.pos + batch.size
        pid = max(pid, batch.producer_id)
    return (mv[:end] if end else None), pid


class MirrorService:
    """Runs one link per source cluster named by mirror topics; `lag` is what each mirrored
    partition lacks of its source's high watermark (gateway/metrics.py exports it)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sync_interval_s = broker.config.get("mirror.offsets.sync.interval.ms") / 1000
        self.links: dict[str, asyncio.Task] = {}
        self.lag: dict[tuple[str, int], int] = {}
        self.diverged: set[tuple[str, int]] = set()
        self._supervisor: asyncio.Task | None = None

    def start(self) -> MirrorService:
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
        return self

    async def stop(self) -> None:
        tasks = [t for t in (self._supervisor, *self.links.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def mirrored(self) -> dict[str, list[str]]:
        """Source bootstrap -> its mirror topics here."""
        out: dict[str, list[str]] = {}
        for topic in self.broker.topics():
            source = mirror_source(topic)
            if source:
                out.setdefault(source, []).append(topic.name)
        return out

    async def _supervise(self) -> None:
        while True:
            mirrored = self.mirrored()
            names = {name for topics in mirrored.values() for name in topics}
            self.lag = {k: v for k, v in self.lag.items() if k[0] in names}
            for source in mirrored:
                task = self.links.get(source)
                if task is None or task.done():
                    self.links[source] = asyncio.get_running_loop().create_task(self._link(source))
            await asyncio.sleep(SCAN_INTERVAL_S)

    async def _link(self, bootstrap: str) -> None:
        source = SourceCluster(bootstrap)
        log.info("mirror: copying from %s", bootstrap)
        refreshed = synced = 0.0
        failures = 0
        try:
            while True:
                topics = self.mirrored().get(bootstrap)
                if not topics:
                    log.info("mirror: no topic is mirrored from %s any more", bootstrap)
                    return
                try:
                    now = time.monotonic()
                    if now - refreshed > METADATA_MAX_AGE_S or failures:
                        await source.refresh(topics)
                        refreshed = now
                    if now - synced > self.sync_interval_s:
                        await self._sync_offsets(source, set(topics))
                        synced = now
                    await self._fetch_round(source, topics)
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    failures += 1
                    if failures in (1, 10) or failures % 100 == 0:
                        log.warning("mirror: from %s: %s (attempt %d)", bootstrap, e, failures)
                    await asyncio.sleep(min(BACKOFF_S * failures, 10))
        finally:
            await source.close()

    async def _fetch_round(self, source: SourceCluster, topics: list[str]) -> None:
        by_leader: dict[int, list[tuple[str, int, int]]] = {}
        for name in topics:
            topic = self.broker.topic(name)
            if topic is None:
                continue
            for plog in topic.partitions:
                key = (name, plog.partition)
                leader = source.leaders.get(key)
                if leader is None or leader < 0 or key in self.diverged:
                    continue
                by_leader.setdefault(leader, []).append((name, plog.partition, plog.log_end_offset))
        if not by_leader:
            await asyncio.sleep(MAX_WAIT_MS / 1000)
            return
        results = await asyncio.gather(
            *(self._fetch_from(source, node, wants) for node, wants in by_leader.items()),
            return_exceptions=True,
        )
        for node, result in zip(by_leader, results, strict=True):
            if isinstance(result, BaseException):
                source.forget(node)
                raise result

    async def _fetch_from(
        self, source: SourceCluster, node: int, wants: list[tuple[str, int, int]]
    ) -> None:
        answer = await source.fetch(node, wants, MAX_WAIT_MS)
        if answer.get("error_code"):
            raise RuntimeError(f"Fetch from source broker {node}: error {answer['error_code']}")
        out_of_range = []
        stale = False
        for t in answer["responses"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition_index"])
                code = p["error_code"]
                if code == OFFSET_OUT_OF_RANGE:
                    out_of_range.append(key)
                    continue
                if code:
                    stale = True  # a leader moved, or the topic went: refresh metadata
                    continue
                plog = self.broker.partition(*key)
                if isinstance(plog, int):
                    continue
                records, producer_id = whole_batches(p["records"])
                if records is not None:
                    end = plog.append_replicated(records)
                    plog.set_high_watermark(end)
                    if producer_id >= 0:  # new producers here must not get the source's ids
                        self.broker.store.producer_ids.reserve_past(producer_id)
                self.lag[key] = max(p["high_watermark"] - plog.log_end_offset, 0)
        if out_of_range:
            await self._restart_at_source_start(source, node, out_of_range)
        if stale:
            raise RuntimeError("the source's partition leadership changed")

    async def _restart_at_source_start(
        self, source: SourceCluster, node: int, keys: list[tuple[str, int]]
    ) -> None:
        starts = await source.earliest(node, keys)
        for key, (code, start) in starts.items():
            plog = self.broker.partition(*key)
            if code or isinstance(plog, int):
                continue
            if plog.log_end_offset < start:
                log.warning(
                    "mirror: %s-%d starts at %d at the source (records before it are gone "
                    "there); the mirror starts there too",
                    *key, start,
                )  # fmt: skip
                plog.reset_to(start)
            else:
                self.diverged.add(key)
                log.error(
                    "mirror: %s-%d holds offsets up to %d, beyond what the source has: not "
                    "copying it (the source lost records, or it is not this topic's source)",
                    *key, plog.log_end_offset,
                )  # fmt: skip

    async def _sync_offsets(self, source: SourceCluster, topics: set[str]) -> None:
        groups = self.broker.groups
        if groups is None:
            return
        from gateway.groups.model import CommitEntry

        coordinator = groups.coordinator
        for group_id, offsets in (await source.group_offsets(topics)).items():
            here = coordinator.groups.get(group_id)
            if here is not None and (
                here.members or any(v.metadata != MIRROR_METADATA for v in here.offsets.values())
            ):
                continue  # the group moved here: its offsets are its own now
            entries = [
                CommitEntry(t, p, o, -1, MIRROR_METADATA)
                for (t, p), o in sorted(offsets.items())
                if here is None or getattr(here.offsets.get((t, p)), "offset", None) != o
            ]
            if entries:
                errors = coordinator.commit_offsets(group_id, -1, "", entries)
                refused = {k: e for k, e in errors.items() if e}
                if refused:
                    log.warning("mirror: offsets of group %s refused: %s", group_id, refused)

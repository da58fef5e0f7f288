"""A cluster's transaction markers, as Kafka's TransactionMarkerChannelManager sends them: once a
transaction's PrepareCommit/PrepareAbort is replicated, WriteTxnMarkers (v1) goes to the leader of
each of its partitions over the inter-broker listener (a partition led here is marked directly);
partitions whose leader refused (NOT_LEADER_OR_FOLLOWER, a leader change, a lost connection) are
retried with the leader looked up again, until all are marked; then the coordinator writes
CompleteCommit/CompleteAbort. A coordinator that stops leading the id's partition stops sending:
the new one resumes the prepared transaction when it loads it.

`mark_here` is the partition leader's side (WriteTxnMarkers' handler uses it): the marker is
appended and answered once the ISR has it (acks=all), as Kafka's leader appends markers; a marker
whose coordinator epoch is older than the one the producer's last marker carried comes from a
deposed coordinator and is refused TRANSACTION_COORDINATOR_FENCED.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.cluster.link import BrokerLinks
from gateway.transactions.coordinator import TxnError
from gateway.transactions.model import PREPARING, TxnMetadata
from rdmalog import errors as E
from rdmalog.errors import error_code_of

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
BACKOFF_S = (0.05, 1.0)  # first and longest pause between rounds
MARKER_TIMEOUT_S = 30.0  # a partition leader's acks=all wait
TRANSACTION_COORDINATOR_FENCED = 52


async def mark_here(
    broker: Any,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: list[TopicPartition],
) -> dict[TopicPartition, int]:
    """Markers on partitions this broker leads; each one's error code once replicated (a
    partition deleted meanwhile is answered as done: nothing is left to mark)."""
    service = broker.transactions
    replicas = broker.cluster.replicas if broker.cluster is not None else None
    codes: dict[TopicPartition, int] = {}
    waits = []
    for topic, p in partitions:
        plog = broker.partition(topic, p)
        if isinstance(plog, int):
            codes[(topic, p)] = plog
            continue
        entry = plog.producer_state.producers.get(producer_id)
        if entry is not None and entry.coordinator_epoch > coordinator_epoch:
            codes[(topic, p)] = TRANSACTION_COORDINATOR_FENCED  # from a deposed coordinator
            continue
        try:
            last = service.markers.mark(plog, producer_id, epoch, commit, coordinator_epoch)
        except Exception as exc:
            codes[(topic, p)] = error_code_of(exc)
            log.warning("marker on %s-%d failed: %s", topic, p, exc)
            continue
        codes[(topic, p)] = E.NONE
        if replicas is not None:
            waits.append(((topic, p), replicas.wait_replicated(topic, p, last, MARKER_TIMEOUT_S)))
    await service.flushed()
    if waits:
        results = await asyncio.gather(*(w for _, w in waits))
        for (tp, _), code in zip(waits, results, strict=True):
            codes[tp] = code
    return codes


class MarkerSender:
    """Sends the markers of this coordinator's prepared transactions (the coordinator's
    `defer_markers`), and lets EndTxn wait for their completion."""

    def __init__(self, service: Any, node: Any, placement: Any, links: BrokerLinks) -> None:
        self.service = service
        self.node = node
        self.placement = placement
        self.links = links
        self.tasks: set[asyncio.Task] = set()
        self.waiters: dict[str, list[asyncio.Future]] = {}

    def __call__(self, meta: TxnMetadata, commit: bool) -> None:
        """Send the markers of `meta`'s prepared transaction (from now, in the background)."""
        task = self.service.loop.create_task(
            self._run(
                meta.transactional_id,
                meta.producer_id,
                meta.producer_epoch,
                commit,
                sorted(meta.partitions),
            )
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def completed(self, transactional_id: str, timeout_s: float) -> None:
        """Wait (bounded) until the id's transaction is no longer preparing."""
        meta = self.service.coordinator.txns.get(transactional_id)
        if meta is None or meta.state not in PREPARING:
            return
        fut = self.service.loop.create_future()
        self.waiters.setdefault(transactional_id, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass

    def _wake(self, transactional_id: str) -> None:
        for fut in self.waiters.pop(transactional_id, ()):
            if not fut.done():
                fut.set_result(None)

    async def _run(
        self, txn: str, pid: int, epoch: int, commit: bool, partitions: list[TopicPartition]
    ) -> None:
        try:
            await self._send(txn, pid, epoch, commit, partitions)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sending the markers of %s failed", txn)
        finally:
            self._wake(txn)

    def _still_mine(self, txn: str, pid: int, epoch: int) -> bool:
        meta = self.service.coordinator.txns.get(txn)
        return (
            not self.service.coordinator.coordinator_error(txn)
            and meta is not None
            and meta.state in PREPARING
            and (meta.producer_id, meta.producer_epoch) == (pid, epoch)
        )

    async def _send(
        self, txn: str, pid: int, epoch: int, commit: bool, partitions: list[TopicPartition]
    ) -> None:
        pause = BACKOFF_S[0]
        # the prepare first: markers of a transaction the ISR does not know could be undone
        while await self.placement.replicated(txn):
            if not self._still_mine(txn, pid, epoch):
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, BACKOFF_S[1])
        remaining = set(partitions)
        coordinator_epoch = self.placement.coordinator_epoch(txn)
        while remaining:
            if not self._still_mine(txn, pid, epoch):
                log.info("%s moved to another coordinator: it sends the markers", txn)
                return
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self._leader(tp)
                if leader is None:  # the topic is gone: nothing to mark (as Kafka skips it)
                    remaining.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            rounds = [
                self._write(leader, pid, epoch, commit, coordinator_epoch, tps)
                for leader, tps in by_leader.items()
            ]
            for done in await asyncio.gather(*rounds):
                remaining -= done
            if remaining:
                await asyncio.sleep(pause)
                pause = min(pause * 2, BACKOFF_S[1])
        while self._still_mine(txn, pid, epoch):
            try:
                if self.service.coordinator.markers_written(txn, pid, epoch):
                    await self.service.durable(txn)
                return
            except TxnError as exc:
                log.warning("completing %s failed (error %d): retrying", txn, exc.code)
                await asyncio.sleep(pause)
                pause = min(pause * 2, BACKOFF_S[1])

    def _leader(self, tp: TopicPartition) -> int | None:
        """The partition's leader now; None when the topic is gone, -1 while it has none."""
        view = self.node.view
        tv = view.topic(tp[0])
        if tv is None or tp[1] not in tv.assignment.partitions:
            return None
        state = tv.states.get(tp[1])
        if state is None or state.leader not in view.live_brokers():
            return -1
        return state.leader

    async def _write(
        self,
        leader: int,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: list[TopicPartition],
    ) -> set[TopicPartition]:
        """One round to one leader: the partitions marked."""
        try:
            if leader == self.node.broker_id:
                codes = await mark_here(
                    self.service.broker, pid, epoch, commit, coordinator_epoch, partitions
                )
            else:
                link = await self.links.get(leader)
                codes = await link.write_txn_markers(
                    pid, epoch, commit, coordinator_epoch, partitions
                )
        except Exception as exc:
            log.info("markers to broker %d failed (%r): retrying", leader, exc)
            self.links.drop(leader)
            return set()
        done = set()
        for tp, code in codes.items():
            if code == E.NONE:
                done.add(tp)
            elif code == E.UNKNOWN_TOPIC_OR_PARTITION and self._leader(tp) is None:
                done.add(tp)  # deleted meanwhile
            else:
                log.info("marker on %s-%d refused by broker %d: error %d", *tp, leader, code)
        return done

    def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()

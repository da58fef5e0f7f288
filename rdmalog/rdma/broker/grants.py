"""The RDMA service's control requests: grants of head files to producers, files registered for
consumers' READs with their metadata slots, commit slots, and what a session gives back at its end.

Each request `{"op": name, ...}` is answered by `Grants._op_<name>` (the requests: control.py).
A session authenticates first when the service requires it (`access_control.py`, which also
authorizes every grant), then binds its queue pair (`hello`, then `attach`); every other request
needs that. What a session is handed are memory windows bound to its queue pair, never a
region's own key: a producer's reach only from the committed position to the end of the file,
a consumer's the file it asked for.

Lock order: a file's lock, then the service's lock, then the log's lock (the log's
`head_for_writing`, `file_for_reading` and `next_file` hold it for their block).
"""

from __future__ import annotations

import itertools
import threading

from rdmalog.errors import OffsetOutOfRangeError, error_for_code
from rdmalog.rdma.broker.access_control import AccessControl
from rdmalog.rdma.broker.commit_slots import CommitSlots
from rdmalog.rdma.broker.ordered_commits import OrderedCommits
from rdmalog.rdma.broker.partitions import (
    Partitions,
    PartState,
    ProduceFile,
    ReadFile,
    SlotRegion,
    datapath_counters,
)
from rdmalog.rdma.broker.prefault import Prefaulter
from rdmalog.rdma.broker.queue_pairs import QueuePairs
from rdmalog.rdma.broker.replicated_acks import ACKS_ALL, take_acks
from rdmalog.rdma.control import ControlError, Session, arg
from rdmalog.rdma.transport._atomic64 import store
from rdmalog.rdma.transport.interface import Access
from rdmalog.rdma.wire import word_encode
from rdmalog.security.authorizer import Operation
from rdmalog.store.in_place import SegmentFile

MAX_ABORTED = 1000  # aborted transactions per answer: a consumer asks again from where it ends

ATTACH_TIMEOUT = 10.0  # seconds `attach` waits for the session's queue pair to say hello


class Grants:
    """Answers control requests. `files` (id -> ProduceFile) and `lock` are the service's;
    `hello_reply` is what a `hello` is told besides its token (the RDMA address, transport)."""

    def __init__(
        self,
        *,
        store,
        device,
        lock: threading.RLock,
        files: dict[int, ProduceFile],
        partitions: Partitions,
        queue_pairs: QueuePairs,
        ordering: OrderedCommits,
        commit_slots: CommitSlots,
        prefault: Prefaulter,
        slots_per_consumer: int,
        hello_reply: dict,
        access: AccessControl,
        replica_credits: int = 32,
        counters: dict[str, int] | None = None,
    ):
        self.store = store
        self.device = device
        self.lock = lock
        self.files = files
        self.partitions = partitions
        self.queue_pairs = queue_pairs
        self.ordering = ordering
        self.commit_slots = commit_slots
        self.prefault = prefault
        self.slots_per_consumer = slots_per_consumer
        self.hello_reply = hello_reply
        self.access = access
        self.replica_credits = replica_credits  # writes a pushing leader may have outstanding
        self.counters = (
            datapath_counters() if counters is None else counters
        )  # the service's, for metrics
        self._file_ids = itertools.count(1)

    def handle(self, s: Session, req: dict) -> dict:
        """One control request: `_op_<op>(session, request)` answers it."""
        op = req.get("op")
        handler = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
        if handler is None:
            raise ControlError("invalid_request", f"unknown op {op!r:.64}")
        self.access.check_authenticated(s, op)
        if op not in ("authenticate", "hello", "attach") and "qp" not in s.state:
            raise ControlError("not_attached", "attach a queue pair first")
        return handler(s, req)

    # -- the session's principal and queue pair ----------------------------------------------------
    def _op_authenticate(self, s: Session, req: dict) -> dict:
        return self.access.authenticate(s, req)

    def _op_hello(self, s: Session, req: dict) -> dict:
        return {"token": self.queue_pairs.token(s), **self.hello_reply}

    def _op_attach(self, s: Session, req: dict) -> dict:
        if not self.queue_pairs.wait_attached(s, ATTACH_TIMEOUT):
            raise ControlError("no_qp", "no queue pair said hello with this session's token")
        return {"session": s.id}

    # -- requests ----------------------------------------------------------------------------------
    def _op_produce_access(self, s: Session, req: dict) -> dict:
        topic, partition = arg(req, "topic", str), arg(req, "partition", int)
        mode = arg(req, "mode", str, "exclusive")
        if mode == "replica":  # a leader pushing its batches: inter-broker, as Kafka's fetches
            self.access.check_cluster(s, Operation.CLUSTER_ACTION)
            leader = (arg(req, "leader", int), arg(req, "leader_epoch", int))
            return self._produce_access(s, topic, partition, mode, leader)
        self.access.check_topic(s, topic, Operation.WRITE)
        check = self.partitions.isr_check
        if take_acks(s, req) == ACKS_ALL and check is not None:
            code = check(topic, partition)  # Kafka refuses acks=all before the append
            if code:
                raise error_for_code(code)(f"acks=all to {topic}-{partition} refused")
        return self._produce_access(s, topic, partition, mode)

    def _op_release_produce(self, s: Session, req: dict) -> dict:
        """Give back one produce grant (a leader that goes back to pull replication)."""
        fid = arg(req, "file_id", int)
        with self.lock:
            if fid in s.state.get("grants", ()):
                s.state["grants"].discard(fid)
                self._drop_holder(s, fid)
        return {}

    def _op_read_access(self, s: Session, req: dict) -> dict:
        topic, partition = arg(req, "topic", str), arg(req, "partition", int)
        self.access.check_topic(s, topic, Operation.READ)
        if arg(req, "isolation_level", int, 0) == 1:  # the session reads up to the LSO only
            s.state["read_committed"] = True
        return self._read_access(s, topic, partition, arg(req, "offset", int))

    def _op_aborted_transactions(self, s: Session, req: dict) -> dict:
        """A read_committed consumer's look at the aborted transactions from `start` on: those
        below the last stable offset (`upto`), at most MAX_ABORTED of them."""
        topic, partition = arg(req, "topic", str), arg(req, "partition", int)
        self.access.check_topic(s, topic, Operation.READ)
        aborted, upto = self.partitions.get(topic, partition).log.aborted_from(
            arg(req, "start", int), MAX_ABORTED
        )
        return {"aborted": [[t.producer_id, t.first_offset] for t in aborted], "upto": upto}

    def _op_release(self, s: Session, req: dict) -> dict:
        topic, partition = arg(req, "topic", str), arg(req, "partition", int)
        self._release_read(s, topic, partition, arg(req, "base_offset", int))
        return {}

    def _op_commit_slot(self, s: Session, req: dict) -> dict:
        topic, partition = arg(req, "topic", str), arg(req, "partition", int)
        group = arg(req, "group", str, "")
        self.access.check_group(s, group)
        self.access.check_topic(s, topic, Operation.READ)
        self.store.partition(topic, partition)  # raises for an unknown topic or partition
        try:
            return self.commit_slots.slot(s.id, group, topic, partition, s.state["qp"].qp)
        except ValueError as e:
            raise ControlError("invalid_request", str(e)) from e

    def _op_partitions(self, s: Session, req: dict) -> dict:
        """How many partitions a topic has (a native producer's partitioner needs it)."""
        topic = arg(req, "topic", str)
        self.access.check_topic(s, topic, Operation.DESCRIBE)
        return {"partitions": len(self.store.topic(topic).partitions)}

    def _op_producer_id(self, s: Session, req: dict) -> dict:
        """An idempotent native producer's id (Kafka's InitProducerId)."""
        if self.store.producer_ids is None:
            raise ControlError("invalid_request", "this store hands out no producer ids")
        self.access.check_cluster(s, Operation.IDEMPOTENT_WRITE)
        return {"producer_id": self.store.producer_ids.allocate(), "producer_epoch": 0}

    def _op_bye(self, s: Session, req: dict) -> dict:
        """A clean close: release now, so a successor's request never sees it held."""
        self.release_session(s)
        return {}

    def _op_next_file(self, s: Session, req: dict) -> dict:
        topic, partition = arg(req, "topic", str), arg(req, "partition", int)
        self.access.check_topic(s, topic, Operation.WRITE if "file_id" in req else Operation.READ)
        if "file_id" in req:  # producer: the head is full; roll it and grant the new one
            f = self.files.get(arg(req, "file_id", int))
            mode = arg(req, "mode", str, "exclusive")
            leader = None
            if mode == "replica":
                self.access.check_cluster(s, Operation.CLUSTER_ACTION)
                leader = (arg(req, "leader", int), arg(req, "leader_epoch", int))
            if f is not None and s.id in f.sessions:
                with f.lock:
                    self.ordering.revoke(f)
                    f.part.log.roll_head(f.segment)
            return self._produce_access(s, topic, partition, mode, leader)
        base = arg(req, "base_offset", int)  # consumer: the file after `base`
        ps = self.partitions.get(topic, partition)
        rf = ps.readers.get(base)
        if rf is None or s.id not in rf.refs:  # e.g. the topic was deleted and created again
            raise ControlError("file_gone", f"no file {base} of this log is held by the session")
        committed = bool(s.state.get("read_committed"))
        with self.lock, ps.log.next_file(base, committed) as nxt:
            if nxt is None:
                raise ControlError("no_next_file", f"file {base} is not read to its end yet")
            self._release_read(s, topic, partition, base)
            return self._register_reader(s, ps, nxt, 0)

    # -- producers ---------------------------------------------------------------------------------
    def _produce_access(
        self,
        s: Session,
        topic: str,
        partition: int,
        mode: str,
        leader: tuple[int, int] | None = None,
    ) -> dict:
        """A grant of the partition's head file. Mode "replica" (`leader`: its broker id and
        epoch): the follower's own arbitration, as for producers, plus one rule: only the
        leader of the epoch this broker follows gets it, and it supersedes any other holder (a
        deposed leader's grant is revoked before a write of the new one lands)."""
        if mode not in ("exclusive", "shared", "replica"):
            raise ControlError("invalid_request", f"unknown mode {mode!r}")
        ps = self.partitions.get(topic, partition, replica=leader is not None)
        if leader is None and ps.log.config.rdmalog_mirror_source:  # gateway/mirror: read-only
            raise ControlError("invalid_request", f"{topic} is a read-only mirror topic")
        if leader is not None:
            check = self.partitions.replica_check
            if check is None or not check(topic, partition, *leader):
                raise ControlError(
                    "not_follower", f"not following {topic}-{partition} under {leader}"
                )
            with self.lock:
                f = ps.produce
            if f is not None and not f.revoked:  # a request supersedes: one writer, from here
                with f.lock:
                    self.ordering.revoke(f)
        with self.lock:
            f = ps.produce
            if f is not None and not f.revoked:
                others = f.sessions - {s.id}
                if others and (mode == "exclusive" or f.mode == "exclusive"):
                    raise ControlError("busy", "another producer holds this partition")
                if f.mode == mode or not others:
                    if f.mode == mode:
                        f.sessions.add(s.id)
                        s.state.setdefault("grants", set()).add(f.file_id)
                        return self._grant_reply(f, s)
                self.ordering.revoke(f)  # a different mode for the same, sole holder
            plog = ps.log
            with plog.head_for_writing() as (head, position):
                acc = Access.LOCAL_WRITE | Access.REMOTE_WRITE
                mr = self.device.reg_mr(head.mmap, acc, path=str(head.path))
                word = None
                if mode == "shared":
                    word = self.device.alloc_mr(
                        8, Access.LOCAL_WRITE | Access.REMOTE_ATOMIC | Access.REMOTE_READ
                    )
                    store(word.buf, 0, word_encode(0, position))
                elif leader is not None:  # the leader's high watermark, written one-sidedly
                    word = self.device.alloc_mr(8, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
                    store(word.buf, 0, 0)
                f = ProduceFile(
                    self._new_file_id(), ps, head, position, mode, mr, word, self.counters
                )
                if leader is not None:
                    self._as_replica(f, ps, leader)
                end_offset = plog.log_end_offset
            f.sessions.add(s.id)
            self.files[f.file_id] = f
            ps.produce = f
            s.state.setdefault("grants", set()).add(f.file_id)
            reply = self._grant_reply(f, s)
            self.counters["produce_grants"] += 1
            if leader is not None:
                reply["log_end_offset"] = end_offset
                reply["credits"] = self.replica_credits
        # Outside the locks: a preallocated head file is made resident, as registering it with
        # an RNIC would pin it (its first megabytes before the producer hears of it, the rest in
        # the background). Either way the prefaulter keeps a writable lead ahead of the writes
        # (prefault.py: for a resident head it moves ext4's first-write work off the datapath).
        if plog.config.preallocate and self.prefault.populate(
            f.file_id, f.mapping, position, f.capacity
        ):
            f.resident = True
        self.prefault.want(f.file_id, f.mapping, position, f.capacity)
        return reply

    def _as_replica(self, f: ProduceFile, ps: PartState, leader: tuple[int, int]) -> None:
        """Make f a push-replication grant of `leader` (the log's lock is held): its writes are
        committed while `leader` is still current, and the follower's fetcher stands aside for
        as long as f is held."""
        topic, partition = ps.log.topic, ps.log.partition
        check, pushed = self.partitions.replica_check, self.partitions.replica_pushed
        f.replica_of = leader
        f.current = lambda: check is not None and check(topic, partition, *leader)
        if pushed is not None:
            pushed(topic, partition, True)
            f.on_revoke = lambda: pushed(topic, partition, False)

    def _new_file_id(self) -> int:
        for _ in range(1 << 16):
            fid = next(self._file_ids) & 0xFFFF
            if fid and fid not in self.files:
                return fid
        raise ControlError("no_file_id", "all 65535 file ids in use")

    @staticmethod
    def _grant_reply(f: ProduceFile, s: Session) -> dict:
        """What the holder is told: its own windows (bound to its queue pair) over the file and
        the reservation word, addressed as the file is."""
        data, word = f.window_for(s.id, s.state["qp"].qp)
        r = {
            "file_id": f.file_id,
            "mode": f.mode,
            "region": data.remote().to_dict(),
            "length": f.capacity,
            "position": f.expect_pos,
            "base_offset": f.segment.base_offset,
            "order": f.next_order,
        }
        if word is not None:
            r["word"] = word.remote().to_dict()
        return r

    # -- consumers ---------------------------------------------------------------------------------
    def _read_access(self, s: Session, topic: str, partition: int, offset: int) -> dict:
        ps = self.partitions.get(topic, partition)
        try:  # service lock first: the order every path takes
            with self.lock, ps.log.file_for_reading(offset) as at:
                return {**self._register_reader(s, ps, at.file, at.position), "offset": at.offset}
        except OffsetOutOfRangeError as e:
            raise ControlError("offset_out_of_range", str(e)) from e

    def _register_reader(self, s: Session, ps: PartState, seg: SegmentFile, start: int) -> dict:
        """Register `seg` (handed out by the log, whose lock the caller holds) for s to READ."""
        with self.lock:
            key = (ps.log.topic, ps.log.partition, seg.base_offset)
            rf = ps.readers.get(seg.base_offset)
            if rf is not None and rf.segment is not seg:  # a file the cleaner replaced
                rf.withdraw()
            if rf is None or rf.segment is not seg or not rf.mr.rkey:
                # READ access alone: a read-only pin, which kernels allow on a file mapping
                mr = self.device.reg_mr(seg.mmap, Access.REMOTE_READ, path=str(seg.path))
                rf = ps.readers[seg.base_offset] = ReadFile(key, seg, mr)
            rf.refs.add(s.id)
            self.counters["read_grants"] += 1
            committed = bool(s.state.get("read_committed"))
            if committed:
                rf.committed.add(s.id)
            lrb, mutable, to_end = ps.log.readable_end(seg, committed)
            slot = -1
            region = s.state.get("slots")
            if region is not None:
                region.release(key)  # a withdrawn registration of the file this one replaces
            if mutable or not to_end:  # the slot tells when more becomes readable
                if region is None:
                    region = s.state["slots"] = SlotRegion(self.device, self.slots_per_consumer)
                if s.id in rf.slots:
                    slot = rf.slots[s.id][1]
                else:
                    slot = region.take()
                    rf.slots[s.id] = (region, slot)
                region.set(slot, lrb, mutable, seg.base_offset)
                # a roll between the two looks is seen by the slot too
                lrb, mutable, _ = ps.log.readable_end(seg, committed)
            s.state.setdefault("reads", set()).add(key)
            return {
                "region": rf.window_for(s.id, s.state["qp"].qp).remote().to_dict(),
                "base_offset": seg.base_offset,
                "start": start,
                "lrb": lrb,
                "mutable": bool(mutable),
                "slot": slot,
                "slots": region.window_for(s.state["qp"].qp) if region is not None else None,
            }

    def _release_read(self, s: Session, topic: str, partition: int, base: int) -> None:
        with self.lock:
            ps = self.partitions.by_key.get((topic, partition))
            s.state.get("reads", set()).discard((topic, partition, base))
            region = s.state.get("slots")
            if region is not None:
                region.release((topic, partition, base))
            rf = ps.readers.get(base) if ps else None
            if rf is None:
                return
            slot = rf.slots.pop(s.id, None)
            rf.committed.discard(s.id)
            if slot is not None:
                slot[0].clear(slot[1])
            rf.drop_reader(s.id)
            rf.refs.discard(s.id)
            if not rf.refs:
                del ps.readers[base]
                rf.withdraw()

    # -- a session's end ---------------------------------------------------------------------------
    def release_session(self, s: Session) -> None:
        """Give back everything the session holds (its grants, read files and slots); what it
        committed through commit slots goes to the coordinator first."""
        self.commit_slots.close_session(s.id)
        with self.lock:
            for fid in s.state.pop("grants", ()):
                self._drop_holder(s, fid)
            for topic, partition, base in list(s.state.get("reads", ())):
                self._release_read(s, topic, partition, base)
            region = s.state.pop("slots", None)
            if region is not None:
                region.close()

    def _drop_holder(self, s: Session, fid: int) -> None:
        """s gives up produce file fid (service lock held): its windows go; the grant with the
        last holder."""
        f = self.files.get(fid)
        if f is not None and s.id in f.sessions:  # not an id reused by another grant
            f.sessions.discard(s.id)
            f.drop_holder(s.id)
            if not f.sessions:
                self.ordering.revoke(f)
            elif f.word_mr is not None and not f.revoked:
                self.ordering.holder_left(f)  # shared: it may have left a hole

    def recheck(self, s: Session) -> None:
        """The authorizer changed: withdraw what s holds and may no longer have (its windows
        answer REM_ACCESS_ERR from now on; its next request for them is refused)."""
        with self.lock:
            for fid in list(s.state.get("grants", ())):
                f = self.files.get(fid)
                if f is not None and not self.access.may(s, f.part.log.topic, Operation.WRITE):
                    s.state["grants"].discard(fid)
                    self._drop_holder(s, fid)
            for key in list(s.state.get("reads", ())):
                if not self.access.may(s, key[0], Operation.READ):
                    self._revoke_read(s, key)

    def _revoke_read(self, s: Session, key: tuple[str, int, int]) -> None:
        """Withdraw s's READ access to file `key` (service lock held): its window goes and its
        metadata slot says the file is sealed, so the consumer asks for the next file (refused)
        rather than waiting on a cleared slot."""
        s.state["reads"].discard(key)
        ps = self.partitions.by_key.get(key[:2])
        rf = ps.readers.get(key[2]) if ps else None
        if rf is None:
            return
        slot = rf.slots.pop(s.id, None)
        if slot is not None:
            slot[0].retire(slot[1], key, key[2])
        rf.drop_reader(s.id)
        rf.refs.discard(s.id)
        if not rf.refs:
            del ps.readers[key[2]]
            rf.withdraw()

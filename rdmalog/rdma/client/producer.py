"""Native RDMA producer: record batches written straight into the broker's head segment file.

Exclusive mode: the producer owns the head file and tracks the write position itself; each batch
is one WRITE_WITH_IMM (immediate = file id | order). Shared mode: each batch first reserves its
place with one FETCH_AND_ADD on the file's reservation word (order:16 | position:48); a
reservation past the end of the file is reported with a zero-length WRITE_WITH_IMM so nobody waits
for it, and the broker rolls the file. The broker acknowledges each write once the batch is
validated and committed (the acknowledgements of a run committed together share a SEND); writes
pipeline (up to the broker's posted receives).

A WRITE's source must be registered memory. `send_batch(bytes)` copies the batch into the
producer's registered staging area first; an application that builds its batches in a buffer it
registered with `register()` sends them with no copy on the CPU but the WRITE itself (on an RNIC,
none at all): `send_batch(topic, partition, buf[start:end])`.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from rdmalog.errors import (
    CorruptRecordError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from rdmalog.rdma.client.endpoint import (
    BrokerDisconnected,
    ClientClosedError,
    Endpoint,
    SaslCredentials,
)
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport.interface import Access, Opcode, RemoteRegion, Status, TransportError
from rdmalog.rdma.wire import (
    ACK,
    ACK_SIZE,
    ACKS_PER_SEND,
    AckStatus,
    imm_encode,
    reservation_add,
    word_decode,
)
from rdmalog.store.compression import Codec
from rdmalog.store.records import BATCH_OVERHEAD, Record, build_batch, read_header, stamp_producer

try:  # build_batch of uncompressed records in C (setup.py builds it; optional)
    from rdmalog.rdma.client._batch import encode_plain as _c_encode
except ImportError:  # pragma: no cover - a source tree without the extension built
    _c_encode = None

# Enum members read on hot paths, as module constants: attribute access on an Enum class
# costs ~10x a global lookup on Python 3.11.
_SUCCESS = Status.SUCCESS
_RECV = Opcode.RECV
_ACK_OK = AckStatus.OK
_ATOMICS = (Opcode.FETCH_AND_ADD, Opcode.CMP_AND_SWAP)

ACK_RECVS = 128
ACK_BUF = ACKS_PER_SEND * ACK_SIZE  # one receive: the acknowledgements of up to 8 writes
MAX_IN_FLIGHT = 64  # below the broker's posted receives per queue pair
IDEMPOTENT_IN_FLIGHT = 5  # per partition: the batches a log remembers per producer (duplicates)
MAX_ATTEMPTS = 8
PARTITIONS_MAX_AGE_S = 30.0  # a topic's partition count is asked for again after this


def _parse_acks(acks: int | str) -> int:
    """Kafka's `acks` setting for a native producer: "all"/-1 or 1 (acks=0 has no meaning here:
    a write's buffer is reused only once it is answered)."""
    value = {"all": -1, "-1": -1, "1": 1}.get(str(acks).strip().lower())
    if value is None:
        raise ValueError(f"acks must be 'all' (-1) or 1, not {acks!r}")
    return value


class ProduceError(KafkaError):
    """A batch that could not be committed (after retries where retrying was safe)."""


@dataclass
class Grant:
    topic: str
    partition: int
    file_id: int
    mode: str
    region: RemoteRegion
    length: int
    position: int  # exclusive: where the next batch goes
    order: int
    base_offset: int
    word: RemoteRegion | None


class RegisteredBuffer:
    """Application memory registered for zero-copy sends (`Producer.register`). Build batches in
    `view`; `buf[start:end]` names the batch between those positions for `send_batch`. Its bytes
    must stay unchanged until that batch's Delivery is done (the broker may ask for a resend).
    `close()` (or leaving a `with` block) unregisters it once its batches are answered."""

    def __init__(self, producer: Producer, buf):
        self.view = memoryview(buf).cast("B")
        if self.view.readonly:
            raise ValueError("a registered buffer must be writable (bytearray, mmap, ...)")
        self._producer = producer
        self.mr = producer.device.reg_mr(self.view, Access.LOCAL_WRITE)

    @property
    def closed(self) -> bool:
        return self.mr is None

    def close(self, timeout: float | None = None) -> None:
        """`Producer.unregister(self)`: waits for its batches in flight, then deregisters."""
        self._producer.unregister(self, timeout)

    def __enter__(self) -> RegisteredBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, s: slice) -> RegisteredSlice:
        if self.mr is None:
            raise ValueError("the buffer was unregistered")
        if not isinstance(s, slice):
            raise TypeError("name a batch with a slice: buf[start:end]")
        start, stop, step = s.indices(len(self.view))
        if step != 1 or stop <= start:
            raise ValueError("a batch is a non-empty contiguous range of the buffer")
        return RegisteredSlice(self, start, stop - start)

    def __len__(self) -> int:
        return len(self.view)


@dataclass(frozen=True, slots=True)
class RegisteredSlice:
    """Bytes [offset, offset+length) of a registered buffer: one or more whole batches."""

    source: RegisteredBuffer
    offset: int
    length: int


@dataclass(slots=True)  # made per batch: slots make it and its reads cheaper
class Delivery:
    """One batch in flight; `wait()` returns (base_offset, last_offset)."""

    topic: str
    partition: int
    source_offset: int  # where the batch starts in its source: staging area or registered buffer
    length: int
    source: RegisteredBuffer | None = None  # None: the producer's staging area
    attempts: int = 0
    key: tuple[int, int] | None = None  # (file id, order) of the current attempt
    wr: int = 0
    seq: int = 0
    epoch: int = -1  # idempotent: the producer epoch it was stamped under (-1: not stamped)
    result: tuple[int, int] | None = None
    error: Exception | None = None
    saved: bytes | None = None  # idempotent: staged bytes kept over a reconnect
    _producer: Producer | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def _done(self) -> bool:  # `done` as a method: what `wait` polls, one call per look
        return self.result is not None or self.error is not None

    def wait(self, timeout: float | None = None) -> tuple[int, int]:
        self._producer._drive(self._done, timeout)
        if self.error is not None:
            raise self.error
        if self.result is None:
            raise TimeoutError("produce not acknowledged in time")
        return self.result


class Producer(Endpoint):
    """`send(topic, partition, value, key=...)` or `send_batch(topic, partition, batch_bytes)`.

    `idempotent=True` is Kafka's idempotent producer: the broker hands out a producer id, every
    batch carries it and its partition's next sequence numbers (stamped into the header of
    batches given to `send_batch`, in place for registered memory), at most 5 batches of a
    partition are in flight, and when the broker goes away unanswered batches are kept: `reconnect()` sends them
    again, and the log answers those it already holds with their original offsets, so a restart
    neither loses nor duplicates them."""

    def __init__(
        self,
        control_address: str,
        transport: str | None = None,
        mode: str = "exclusive",
        staging_bytes: int = 8 << 20,
        timeout: float = 10.0,
        compression: int = Codec.NONE,
        idempotent: bool = False,
        sasl: SaslCredentials | None = None,
        acks: int | str = "all",
        request_timeout_ms: int | None = None,
    ):
        """`acks` as Kafka's producer: "all" (-1, the default as in Kafka 3.x: in a cluster a
        batch is answered once the ISR holds it) or 1 (at the leader's commit);
        `request_timeout_ms`: how long the leader waits for the ISR before answering
        REQUEST_TIMED_OUT (default: `timeout`)."""
        self.required_acks = _parse_acks(acks)
        self.request_timeout_ms = (
            int(timeout * 1000) if request_timeout_ms is None else int(request_timeout_ms)
        )
        super().__init__(control_address, transport, timeout, sasl)
        self.idempotent = idempotent
        self.producer_id, self.producer_epoch = -1, -1
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._epoch_spent = False  # a stamped batch failed: the next stamp starts a new epoch
        self._in_doubt: list[Delivery] = []  # idempotent: unanswered when the broker went away
        if idempotent:
            r = self.control("producer_id")
            self.producer_id, self.producer_epoch = r["producer_id"], r["producer_epoch"]
        self.mode = mode
        self.compression = compression
        self.staging_bytes = staging_bytes
        self._register()
        self.grants: dict[tuple[str, int], Grant] = {}
        self.inflight: dict[tuple[int, int], Delivery] = {}
        self._retry: deque[Delivery] = deque()
        self._stage_top = 0
        self._staged: deque[Delivery] = deque()  # deliveries holding staging bytes, oldest first
        self._wr = 0
        self._seq = 0
        self._atomic_done: int | None = None
        self._buffers: list[RegisteredBuffer] = []
        self._partition_counts: dict[str, tuple[int, float]] = {}  # topic -> (count, when)
        self._round_robin = itertools.count(random.randrange(1 << 16))  # records without a key

    def register(self, buf) -> RegisteredBuffer:
        """Register writable application memory (bytearray, mmap, ...) to build batches in and
        send without the copy into the staging area (the WRITE reads them where they are)."""
        rb = RegisteredBuffer(self, buf)
        self._buffers.append(rb)
        return rb

    def unregister(self, rb: RegisteredBuffer, timeout: float | None = None) -> None:
        """Deregister a `register()`ed buffer once no batch of it waits for an answer (a resend
        reads it again); the application may then reuse or free the memory. Idempotent."""
        if rb.mr is None:
            return
        if rb._producer is not self:
            raise ValueError("the buffer was registered with another producer")

        def answered() -> bool:
            return not any(d.source is rb for d in (*self.inflight.values(), *self._retry))

        if self.broken is None and not answered():
            self._drive(answered, timeout or self.timeout)
            if not answered():
                raise TimeoutError("batches of the buffer are still unacknowledged")
        self._buffers.remove(rb)
        mr, rb.mr = rb.mr, None
        try:
            mr.deregister()
        except TransportError:  # the session is gone: so is the registration
            pass

    def _register(self) -> None:
        """Staging area, acknowledgement receives and the atomic result word on this session."""
        self.stage = self.device.alloc_mr(self.staging_bytes, Access.LOCAL_WRITE)
        self.acks = self.device.alloc_mr(ACK_RECVS * ACK_BUF, Access.LOCAL_WRITE)
        self.atom = self.device.alloc_mr(8, Access.LOCAL_WRITE)
        for i in range(ACK_RECVS):
            self.qp.post_recv(i, self.acks, i * ACK_BUF, ACK_BUF)

    def _reconnected(self) -> None:
        self.grants.clear()
        self._stage_top = 0
        self._staged.clear()
        self._register()
        for rb in self._buffers:  # the application's memory is kept; the new device maps it
            rb.mr = self.device.reg_mr(rb.view, Access.LOCAL_WRITE)
        in_doubt, self._in_doubt = sorted(self._in_doubt, key=lambda d: d.seq), []
        for i, d in enumerate(in_doubt):  # idempotent: send again, in order, same sequences
            if d.source is None:
                try:
                    d.source_offset = self._stage_alloc(d.length, (d.topic, d.partition))
                except (BrokerDisconnected, TimeoutError):  # gone again: keep the rest too
                    for rest in in_doubt[i:]:
                        self._keep_in_doubt(rest)
                    raise
                self.stage.buf[d.source_offset : d.source_offset + d.length] = d.saved
                self._staged.append(d)
            d.saved, d.attempts = None, 0
            self._retry.append(d)

    def disconnected(self, why: str) -> BrokerDisconnected | ClientClosedError:
        """Fail every batch not yet acknowledged: its outcome is unknown to us. An idempotent
        producer keeps them instead (their staged bytes copied out) for `reconnect()`."""
        err = super().disconnected(why)
        pending = [d for d in (*self.inflight.values(), *self._retry) if not d.done]
        self.inflight.clear()
        self._retry.clear()
        self.grants.clear()
        if self.idempotent:
            for d in pending:
                self._keep_in_doubt(d)
        else:
            for d in pending:
                d.error = err
        return err

    # -- public API ----------------------------------------------------------------------------------
    def send(
        self,
        topic: str,
        partition: int | None,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        timestamp: int | None = None,
    ) -> Delivery:
        """One record; partition None: `partition_for(topic, key)`, as Kafka producers choose."""
        if partition is None:
            partition = self.partition_for(topic, key)
        if headers is None and timestamp is None:
            return self.send_records(topic, partition, [(key, value)])  # (the builders' plain form)
        return self.send_records(topic, partition, [Record(key, value, headers or [], timestamp)])

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """Kafka's default partitioner: murmur2 of the key modulo the partition count, so keyed
        records land where a Kafka producer puts them; records without a key go round-robin.
        The count is asked for once per topic and again after PARTITIONS_MAX_AGE_S (partitions
        can be added); an unknown topic raises UnknownTopicOrPartitionError."""
        now = time.monotonic()
        known = self._partition_counts.get(topic)
        if known is None or now - known[1] > PARTITIONS_MAX_AGE_S:
            try:
                n = self.control("partitions", topic=topic)["partitions"]
            except ControlError as e:
                if e.code == UnknownTopicOrPartitionError.__name__:
                    raise UnknownTopicOrPartitionError(e.message) from None
                raise
            known = self._partition_counts[topic] = (n, now)
        if key is None:
            return next(self._round_robin) % known[0]
        from kafka.partitioner.default import murmur2  # kafka-python's, the Java client's hash

        return (murmur2(key) & 0x7FFFFFFF) % known[0]

    def send_records(
        self, topic: str, partition: int, records: Iterable[Record | tuple]
    ) -> Delivery:
        if self.compression or _c_encode is None:
            batch = build_batch(records, compression=self.compression)
        else:  # records.build_batch in C: the same bytes
            batch = _c_encode(records, int(time.time() * 1000))
        return self.send_batch(topic, partition, batch)

    def send_batch(self, topic: str, partition: int, batch) -> Delivery:
        """Send ready v2 record batch bytes (one or more whole batches): any bytes-like object
        (copied into the staging area), or a slice of a `register()`ed buffer (not copied)."""
        return self._send(topic, partition, batch, stamp=self.idempotent)

    def _stamp(self, buf: memoryview, start: int, n: int, tp: tuple[str, int]) -> int:
        """Our producer id, epoch and the partition's next sequences into each batch's header
        (once the batch is sure to be sent: a sequence taken and not sent would be a gap).
        Returns the epoch stamped, -1 when nothing was (not a batch)."""
        if self._epoch_spent:
            self._new_epoch()
        pos, end, epoch = start, start + n, -1
        while end - pos >= BATCH_OVERHEAD:
            size = read_header(buf, pos)[1]
            if size < BATCH_OVERHEAD or pos + size > end:
                break  # not a batch: left as it is, for the broker to refuse
            seq = self._next_sequence.get(tp, 0)
            used = stamp_producer(buf, pos, size, self.producer_id, self.producer_epoch, seq)
            self._next_sequence[tp] = (seq + used) & 0x7FFFFFFF
            epoch = self.producer_epoch
            pos += size
        return epoch

    def _new_epoch(self) -> None:
        """Start sequences again from 0 on every partition under the next epoch (a new producer
        id once the epoch is at its limit), as Kafka's idempotent producer bumps its epoch after
        a failed batch: the sequences that batch took are a gap the log would refuse every later
        batch of its partition for (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        if self.producer_epoch < 0x7FFF:
            self.producer_epoch += 1
        else:
            r = self.control("producer_id")
            self.producer_id, self.producer_epoch = r["producer_id"], r["producer_epoch"]
        self._next_sequence.clear()
        self._epoch_spent = False

    def _fail(self, d: Delivery, error: Exception) -> None:
        """Fail a batch (nothing of it was appended); one stamped under the current epoch left
        a gap in its partition's sequence, so the next stamp starts a new epoch."""
        d.error = error
        if d.epoch >= 0 and d.epoch == self.producer_epoch:
            self._epoch_spent = True

    def _wait_unused(self, src: RegisteredBuffer, off: int, n: int) -> None:
        """Until no unanswered batch uses bytes [off, off+n) of `src` (bounded by the timeout)."""

        def unused() -> bool:
            return not any(
                d.source is src and d.source_offset < off + n and off < d.source_offset + d.length
                for d in (*self.inflight.values(), *self._retry, *self._in_doubt)
            )

        if not unused():
            self._drive(unused, self.timeout)
            if not unused():
                raise TimeoutError("an earlier send of these bytes is still unacknowledged")

    def _send(self, topic: str, partition: int, batch, stamp: bool) -> Delivery:
        if self.broken is not None:
            raise self.disconnected(self.broken)
        n = batch.length if type(batch) is RegisteredSlice else len(batch)
        if n < BATCH_OVERHEAD:
            raise ValueError(f"{n} bytes cannot hold a record batch ({BATCH_OVERHEAD} at least)")
        if type(batch) is RegisteredSlice:
            if batch.source._producer is not self:
                raise ValueError("the buffer was registered with another producer")
            if batch.source.mr is None:
                raise ValueError("the buffer was unregistered")
            self._wait_in_flight((topic, partition))
            src, off, n = batch.source, batch.offset, batch.length
            if stamp:  # restamping bytes a batch in flight still needs would change its sequence
                self._wait_unused(src, off, n)
        else:
            src, n = None, len(batch)
            off = self._stage_alloc(n, (topic, partition))
            self.stage.buf[off : off + n] = batch
        epoch = -1
        if stamp:
            buf = self.stage.buf if src is None else src.view
            epoch = self._stamp(buf, off, n, (topic, partition))
        self._seq += 1
        d = Delivery(topic, partition, off, n, src, seq=self._seq, epoch=epoch, _producer=self)
        if src is None:
            self._staged.append(d)
        if self._retry:
            self._retry.append(d)  # keep send order behind batches being resent
        else:
            self._post(d)
        return d

    def produce(self, topic: str, partition: int, value: bytes | None, key: bytes | None = None):
        """Send one record and wait: (base_offset, last_offset)."""
        if partition is None or self.compression or _c_encode is None:
            return self.send(topic, partition, value, key).wait(self.timeout)
        # send() of one plain record, without its three frames: the batch built in C
        batch = _c_encode([(key, value)], int(time.time() * 1000))
        return self._send(topic, partition, batch, self.idempotent).wait(self.timeout)

    def flush(self, timeout: float | None = None) -> None:
        if self.broken is not None:
            raise self.disconnected(self.broken)
        self._drive(lambda: not self.inflight and not self._retry, timeout or self.timeout)
        if self.inflight or self._retry:
            raise TimeoutError(f"{len(self.inflight)} batch(es) still unacknowledged")

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        except (TimeoutError, KafkaError, TransportError):
            pass
        for rb in self._buffers:  # their registrations go with the device: closing one later
            rb.mr = None  # does nothing (it would deregister from the freed device)
        self._buffers.clear()
        super().close()

    # -- staging buffer --------------------------------------------------------------------------------
    def _stage_alloc(self, n: int, tp: tuple[str, int]) -> int:
        """Where in the staging area a batch of n bytes goes: a ring, in send order, whose oldest
        batches are freed as they are acknowledged (or fail), so a producer streaming bytes never
        has to drain its pipeline to reuse the area."""
        size = len(self.stage.buf)
        if n > size:
            raise ProduceError(f"batch of {n} bytes exceeds the {size}-byte staging area")
        if self.inflight or self._retry:  # (nothing in flight: nothing to wait for)
            self._wait_in_flight(tp)
        live = self._staged
        while True:
            while live and live[0].done:
                live.popleft()
            if not live:
                self._stage_top = 0
                break
            top, tail = self._stage_top, live[0].source_offset
            if top >= tail and top + n <= size:
                break
            if top >= tail and n < tail:
                self._stage_top = 0  # wrap; strictly below tail, so full never looks empty
                break
            if top < tail and top + n < tail:
                break
            self._drive(lambda: live[0].done, self.timeout)  # wait for the oldest to be answered
            if not live[0].done:
                raise TimeoutError(f"{len(self.inflight)} batch(es) still unacknowledged")
        off = self._stage_top
        self._stage_top += n
        return off

    def _wait_in_flight(self, tp: tuple[str, int]) -> None:
        """Keep the pipeline full, never drain it: wait only while `_busy(tp)`."""
        if self._busy(tp):
            self._drive(lambda: not self._busy(tp), self.timeout)
            if self._busy(tp):
                raise TimeoutError(f"{len(self.inflight)} batch(es) still unacknowledged")

    def _busy(self, tp: tuple[str, int]) -> bool:
        """MAX_IN_FLIGHT batches await an answer, or (idempotent) IDEMPOTENT_IN_FLIGHT of
        partition `tp`: what a log remembers per producer for duplicate detection."""
        n = len(self.inflight) + len(self._retry)
        if n >= MAX_IN_FLIGHT:
            return True
        if not self.idempotent or n < IDEMPOTENT_IN_FLIGHT:
            return False
        mine = (d for d in (*self.inflight.values(), *self._retry) if (d.topic, d.partition) == tp)
        return sum(1 for _ in mine) >= IDEMPOTENT_IN_FLIGHT

    # -- grants -----------------------------------------------------------------------------------------
    def _grant(self, topic: str, partition: int) -> Grant:
        g = self.grants.get((topic, partition))
        if g is None:
            r = self.control(
                "produce_access", topic=topic, partition=partition, mode=self.mode,
                acks=self.required_acks, request_timeout_ms=self.request_timeout_ms,
            )  # fmt: skip
            g = self._grant_from(topic, partition, r)
        return g

    def _grant_from(self, topic: str, partition: int, r: dict) -> Grant:
        g = Grant(
            topic, partition, r["file_id"], r["mode"], RemoteRegion.from_dict(r["region"]),
            r["length"], r["position"], r["order"], r["base_offset"],
            RemoteRegion.from_dict(r["word"]) if r.get("word") else None,
        )  # fmt: skip
        self.grants[(topic, partition)] = g
        return g

    def _drop_grant(self, file_id: int) -> None:
        for k, g in list(self.grants.items()):
            if g.file_id == file_id:
                del self.grants[k]

    def _next_file(self, g: Grant) -> Grant:
        self.flush()  # everything before the roll must be committed first
        r = self.control(
            "next_file", topic=g.topic, partition=g.partition, file_id=g.file_id, mode=self.mode
        )
        return self._grant_from(g.topic, g.partition, r)

    # -- posting ------------------------------------------------------------------------------------------
    def _post(self, d: Delivery) -> None:
        d.attempts += 1
        if d.attempts > MAX_ATTEMPTS:
            self._fail(d, ProduceError(f"gave up after {MAX_ATTEMPTS} attempts"))
            return
        try:
            self._write(d)
        except BrokerDisconnected:
            if not self.idempotent:
                raise
            self._keep_in_doubt(d)  # its sequence numbers are taken: resent, never dropped

    def _keep_in_doubt(self, d: Delivery) -> None:
        """Idempotent: keep a batch the broker went away under for `reconnect()` to resend."""
        if d.source is None and d.saved is None:  # the staging area goes with the session
            d.saved = bytes(self.stage.buf[d.source_offset : d.source_offset + d.length])
        if not any(x is d for x in self._in_doubt):
            self._in_doubt.append(d)

    def _write(self, d: Delivery) -> None:
        try:
            g = self.grants.get((d.topic, d.partition)) or self._grant(d.topic, d.partition)
        except BrokerDisconnected as e:
            if self.idempotent:
                raise
            self._fail(d, e)
            return
        except (ControlError, KafkaError) as e:  # a Kafka error: the authorizer's refusal
            self._fail(d, e if isinstance(e, KafkaError) else ProduceError(str(e)))
            self._partition_counts.pop(d.topic, None)  # the topic may have changed: ask again
            return
        n = d.length
        if n > g.length:
            self._fail(d, ProduceError(f"batch of {n} bytes is larger than a segment ({g.length})"))
            return
        if g.mode == "exclusive":
            if g.position + n > g.length:
                g = self._next_file(g)
            order, pos = g.order, g.position
            g.order = (g.order + 1) & 0xFFFF
            g.position += n
        else:
            order, pos = self._reserve(g, n)
            if order is None:  # the word is gone: the grant was revoked
                self._drop_grant(g.file_id)
                self._retry.append(d)
                return
            if pos + n > g.length:
                n = pos = 0  # overflow: tell the broker (zero-length write) so it rolls
        d.key = (g.file_id, order)
        self.inflight[d.key] = d
        self._wr += 1
        d.wr = self._wr
        mr = self.stage if d.source is None else d.source.mr
        self.qp.post_write(
            self._wr, mr, d.source_offset, n, g.region.addr + pos, g.region.rkey,
            imm=imm_encode(g.file_id, order), signaled=False,
        )  # fmt: skip

    def _reserve(self, g: Grant, n: int) -> tuple[int | None, int]:
        self._atomic_done = None
        self.qp.post_fetch_add(1, self.atom, 0, g.word.addr, g.word.rkey, reservation_add(n))
        self._drive(lambda: self._atomic_done is not None, self.timeout, retries=False)
        if self._atomic_done != _SUCCESS:
            return None, 0
        return word_decode(int.from_bytes(self.atom.buf[:8], "little"))

    # -- completions ----------------------------------------------------------------------------------
    def _drive(self, until, timeout: float | None, retries: bool = True) -> None:
        """Process completions until `until()`; resends retried batches unless told not to (a
        reservation in progress must not be interleaved with another one)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not until():
            if self.broken is not None:
                raise self.disconnected(self.broken)
            if retries and self._retry and not self.inflight:
                # Resend only once every older write is answered, in the original send order, so
                # a roll or an abort does not reorder a producer's batches.
                pending = sorted(self._retry, key=lambda d: d.seq)
                self._retry.clear()
                for i, d in enumerate(pending):
                    self._post(d)
                    if self._retry:  # it must wait again: nothing newer may overtake it
                        self._retry.extend(pending[i + 1 :])
                        break
                if until():  # (only resending can have made it true since the loop's test)
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            wcs = self.cq.wait(min(left, 0.05), 64)
            for wc in wcs:
                self._completion(wc)
            if not wcs and not self.ctl.alive():  # nothing for a while: is the broker there?
                raise self.disconnected("control connection closed by the broker")

    def _completion(self, wc) -> None:
        if wc.opcode == _RECV:
            if wc.status != _SUCCESS:
                return
            off = wc.wr_id * ACK_BUF
            n = wc.byte_len - wc.byte_len % ACK_SIZE  # whole entries only
            acks = list(ACK.iter_unpack(self.acks.buf[off : off + n]))
            inflight = self.inflight
            for fid, order, status, base, last, _ in acks:
                if status == _ACK_OK:  # the usual answer, without `_ack`'s frame
                    d = inflight.pop((fid, order), None)
                    if d is not None:
                        d.result = (base, last)
                else:  # an int: AckStatus(...) costs ~1 us
                    self._ack(fid, order, status, base, last)
            try:
                self.qp.post_recv(wc.wr_id, self.acks, off, ACK_BUF)
            except TransportError:  # the broker went away right after answering
                raise self.disconnected("the queue pair to the broker is closed") from None
        elif wc.opcode in _ATOMICS:
            self._atomic_done = wc.status
        elif wc.status != _SUCCESS:
            if wc.status == Status.WR_FLUSH_ERR:
                raise self.disconnected("the queue pair to the broker was flushed")
            # A write that never reached the file (a revoked region): the broker will not
            # acknowledge it, so resend it under a fresh grant. Later orders the broker did get
            # wait for it, time out and come back ABORTED, and are resent the same way.
            for key, d in list(self.inflight.items()):
                if d.wr == wc.wr_id:
                    del self.inflight[key]
                    self._drop_grant(key[0])
                    self._retry.append(d)

    def _ack(self, fid: int, order: int, status: int, base: int, last: int) -> None:
        """An answer other than OK (`_completion` takes those) to the write (fid, order)."""
        d = self.inflight.pop((fid, order), None)
        if d is None:
            return
        if status == AckStatus.NOT_REPLICATED:  # committed by the leader, not by the ISR in time
            cls = error_for_code(base)  # (its sequence numbers were used: no new epoch)
            d.error = cls(
                f"the batch (offsets up to {last}) was not replicated: Kafka error {base}"
            )
        elif status == AckStatus.CORRUPT:  # base carries the refusal's Kafka error code
            self._drop_grant(fid)
            code = base if base > 0 else CorruptRecordError.error_code
            cls = error_for_code(code)
            self._fail(d, cls(f"the broker refused the batch: Kafka error {code} ({cls.__name__})"))
        else:  # FULL, ABORTED, REVOKED: nothing was committed; resend under a new grant
            self._drop_grant(fid)
            self._retry.append(d)

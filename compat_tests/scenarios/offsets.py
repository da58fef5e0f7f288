"""ListOffsets through the clients (earliest, latest, by timestamp) and the auto.offset.reset
policy when a consumer seeks past the end of the log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiokafka
import kafka
from confluent_kafka import OFFSET_END, TopicPartition
from confluent_kafka.admin import OffsetSpec

from compat_tests import clients
from compat_tests.common import (
    TIMEOUT_S,
    Deadline,
    Rec,
    admin,
    create_topic,
    now_ms,
    unique_topic,
)
from compat_tests.scenarios import scenario

N = 10  # records 0-4 share one batch, 5-9 are a batch each; record i has timestamp t0 + 1000 * i


def seed(bootstrap: str, tag: str) -> tuple[str, int]:
    topic = unique_topic(f"off-{tag}")
    create_topic(bootstrap, topic, 1)
    t0 = now_ms() - 600_000
    producer = clients.ck_producer(bootstrap, **{"linger.ms": 200})
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(N):
        producer.produce(
            topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=0,
            timestamp=t0 + 1000 * i, on_delivery=on_delivery,
        )  # fmt: skip
        if i >= 4:
            assert producer.flush(TIMEOUT_S) == 0, "records not delivered"
    assert not errors, f"delivery errors {errors}"
    return topic, t0


def expected_by_time(t0: int) -> dict[int, int | None]:
    """target timestamp -> first offset with timestamp >= target (None: no such record)."""
    return {
        t0 - 5000: 0,
        t0: 0,
        t0 + 2000: 2,  # inside the first batch: Kafka answers with the record, not the batch
        t0 + 2500: 3,
        t0 + 4000: 4,
        t0 + 6999: 7,
        t0 + 9000: 9,
        t0 + 9001: None,
    }


@scenario("confluent-offsets-watermarks-and-for-times", "offsets")
def confluent_offsets(bootstrap: str) -> None:
    topic, t0 = seed(bootstrap, "ck")
    consumer = clients.ck_consumer(bootstrap)
    try:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        assert (lo, hi) == (0, N), f"watermarks {(lo, hi)}"
        for ts, want in expected_by_time(t0).items():
            [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT_S)
            assert tp.error is None, f"offsets_for_times({ts - t0:+}): {tp.error}"
            assert tp.offset == (OFFSET_END if want is None else want), (
                f"offsets_for_times(t0{ts - t0:+}) = {tp.offset}, want {want}"
            )
        # seek to the offset found for t0+2500 and read from there
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, t0 + 2500)], timeout=TIMEOUT_S)
        consumer.assign([tp])
        got = clients.ck_poll(consumer, N - 3)
        assert [r.offset for r in got[: N - 3]] == list(range(3, N)), [r.offset for r in got]
        assert [r.timestamp for r in got[: N - 3]] == [t0 + 1000 * i for i in range(3, N)], (
            "timestamps read back differ"
        )
    finally:
        consumer.close()


def admin_list(bootstrap: str, topic: str, spec: OffsetSpec) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    client = admin(bootstrap)  # keep a reference: the futures die with their client
    future = client.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)[tp]
    info = future.result(timeout=TIMEOUT_S)
    return info.offset, info.timestamp


@scenario("confluent-admin-list-offsets", "offsets")
def confluent_admin_list_offsets(bootstrap: str) -> None:
    topic, t0 = seed(bootstrap, "ckadm")
    earliest = admin_list(bootstrap, topic, OffsetSpec.earliest())
    assert earliest[0] == 0, f"earliest -> {earliest}"
    latest = admin_list(bootstrap, topic, OffsetSpec.latest())
    assert latest[0] == N, f"latest -> {latest}"
    for ts, want in expected_by_time(t0).items():
        offset, stamp = admin_list(bootstrap, topic, OffsetSpec.for_timestamp(ts))
        if want is None:
            assert offset == -1, f"for_timestamp(t0{ts - t0:+}) = {offset}, want -1"
        else:
            assert (offset, stamp) == (want, t0 + 1000 * want), (
                f"for_timestamp(t0{ts - t0:+}) = {(offset, stamp)}, want {(want, t0 + 1000 * want)}"
            )


@scenario("confluent-admin-list-offsets-max-timestamp", "offsets")
def confluent_admin_max_timestamp(bootstrap: str) -> None:
    topic, t0 = seed(bootstrap, "ckmax")
    offset, stamp = admin_list(bootstrap, topic, OffsetSpec.max_timestamp())
    assert (offset, stamp) == (N - 1, t0 + 1000 * (N - 1)), f"max_timestamp -> {(offset, stamp)}"


@scenario("kafka-python-offsets-beginning-end-for-times", "offsets")
def kafka_python_offsets(bootstrap: str) -> None:
    topic, t0 = seed(bootstrap, "kp")
    tp = kafka.TopicPartition(topic, 0)
    consumer = clients.kp_consumer(bootstrap)
    try:
        begin = consumer.beginning_offsets([tp], timeout_ms=TIMEOUT_S * 1000)
        assert begin == {tp: 0}, f"beginning_offsets {begin}"
        end = consumer.end_offsets([tp], timeout_ms=TIMEOUT_S * 1000)
        assert end == {tp: N}, f"end_offsets {end}"
        for ts, want in expected_by_time(t0).items():
            res = consumer.offsets_for_times({tp: ts}, timeout_ms=TIMEOUT_S * 1000)[tp]
            if want is None:
                assert res is None, f"offsets_for_times(t0{ts - t0:+}) = {res}, want None"
            else:
                assert res is not None, f"offsets_for_times(t0{ts - t0:+}) = None, want {want}"
                assert (res.offset, res.timestamp) == (want, t0 + 1000 * want), (
                    f"offsets_for_times(t0{ts - t0:+}) = {res}, want {want}"
                )
        consumer.assign([tp])
        consumer.seek(tp, 4)
        got = clients.kp_poll(consumer, N - 4)
        assert [r.offset for r in got[: N - 4]] == list(range(4, N)), [r.offset for r in got]
    finally:
        consumer.close()


@scenario("aiokafka-offsets-beginning-end-for-times", "offsets")
def aiokafka_offsets(bootstrap: str) -> None:
    topic, t0 = seed(bootstrap, "ak")
    tp = aiokafka.TopicPartition(topic, 0)

    async def main() -> None:
        consumer = clients.ak_consumer(bootstrap)
        try:
            await consumer.start()
            begin = await consumer.beginning_offsets([tp])
            assert begin == {tp: 0}, f"beginning_offsets {begin}"
            end = await consumer.end_offsets([tp])
            assert end == {tp: N}, f"end_offsets {end}"
            for ts, want in expected_by_time(t0).items():
                res = (await consumer.offsets_for_times({tp: ts}))[tp]
                if want is None:
                    assert res is None, f"offsets_for_times(t0{ts - t0:+}) = {res}, want None"
                else:
                    assert res is not None and (res.offset, res.timestamp) == (
                        want,
                        t0 + 1000 * want,
                    ), f"offsets_for_times(t0{ts - t0:+}) = {res}, want {want}"
        finally:
            await consumer.stop()

    clients.run(main)


# --- seek past the end: the client's auto.offset.reset policy --------------------------------

SEEDED = 3
PAST_END = 1000


def seed_small(bootstrap: str, tag: str) -> str:
    topic = unique_topic(f"reset-{tag}")
    create_topic(bootstrap, topic, 1)
    recs = [Rec(0, f"k{i}".encode(), f"old-{i}".encode(), (), now_ms()) for i in range(SEEDED)]
    clients.ck_produce(bootstrap, topic, recs)
    return topic


def new_record(bootstrap: str, topic: str, attempt: int) -> None:
    clients.ck_produce(bootstrap, topic, [Rec(0, b"k", f"new-{attempt}".encode(), (), now_ms())])


def poll_until_new(bootstrap: str, topic: str, poll: Callable[[], list[Rec]]) -> list[Rec]:
    """Poll (one bounded call at a time) until something arrives, producing one new record after
    each empty poll: a consumer reset to latest sees only records written after the reset."""
    got: list[Rec] = []
    deadline = Deadline()
    attempt = 0
    while not got and deadline:
        got = poll()
        if not got:
            attempt += 1
            new_record(bootstrap, topic, attempt)
    return got


def check_latest(got: list[Rec]) -> None:
    assert got, "no new record arrived after the reset to latest"
    first = got[0]
    assert first.offset >= SEEDED and first.value.startswith(b"new-"), (
        f"after reset to latest the consumer read offset {first.offset} value {first.value!r}"
    )


def check_earliest(got: list[Rec]) -> None:
    assert [r.offset for r in got[:SEEDED]] == list(range(SEEDED)), [r.offset for r in got]
    assert [r.value for r in got[:SEEDED]] == [f"old-{i}".encode() for i in range(SEEDED)], [
        r.value for r in got
    ]


@scenario("confluent-seek-past-end-reset-earliest", "offsets")
def confluent_reset_earliest(bootstrap: str) -> None:
    topic = seed_small(bootstrap, "ck-e")
    consumer = clients.ck_consumer(bootstrap, reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0, PAST_END)])
        check_earliest(clients.ck_poll(consumer, SEEDED))
    finally:
        consumer.close()


@scenario("confluent-seek-past-end-reset-latest", "offsets")
def confluent_reset_latest(bootstrap: str) -> None:
    topic = seed_small(bootstrap, "ck-l")
    consumer = clients.ck_consumer(bootstrap, reset="latest")
    try:
        consumer.assign([TopicPartition(topic, 0, PAST_END)])

        def poll() -> list[Rec]:
            msgs = consumer.consume(num_messages=10, timeout=1.0)
            return [clients.ck_rec(m) for m in msgs if not m.error()]

        check_latest(poll_until_new(bootstrap, topic, poll))
    finally:
        consumer.close()


@scenario("kafka-python-seek-past-end-reset-earliest", "offsets")
def kafka_python_reset_earliest(bootstrap: str) -> None:
    topic = seed_small(bootstrap, "kp-e")
    tp = kafka.TopicPartition(topic, 0)
    consumer = clients.kp_consumer(bootstrap, reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek(tp, PAST_END)
        check_earliest(clients.kp_poll(consumer, SEEDED))
    finally:
        consumer.close()


@scenario("kafka-python-seek-past-end-reset-latest", "offsets")
def kafka_python_reset_latest(bootstrap: str) -> None:
    topic = seed_small(bootstrap, "kp-l")
    tp = kafka.TopicPartition(topic, 0)
    consumer = clients.kp_consumer(bootstrap, reset="latest")
    try:
        consumer.assign([tp])
        consumer.seek(tp, PAST_END)

        def poll() -> list[Rec]:
            batches = consumer.poll(timeout_ms=1000).values()
            return [clients.kp_rec(r) for records in batches for r in records]

        check_latest(poll_until_new(bootstrap, topic, poll))
    finally:
        consumer.close()


@scenario("aiokafka-seek-past-end-reset-earliest", "offsets")
def aiokafka_reset_earliest(bootstrap: str) -> None:
    topic = seed_small(bootstrap, "ak-e")
    tp = aiokafka.TopicPartition(topic, 0)

    async def main() -> list[Rec]:
        consumer = clients.ak_consumer(bootstrap, reset="earliest")
        try:
            await consumer.start()
            consumer.assign([tp])
            consumer.seek(tp, PAST_END)
            return await clients.ak_poll(consumer, SEEDED)
        finally:
            await consumer.stop()

    check_earliest(clients.run(main))


@scenario("aiokafka-seek-past-end-reset-latest", "offsets")
def aiokafka_reset_latest(bootstrap: str) -> None:
    topic = seed_small(bootstrap, "ak-l")
    tp = aiokafka.TopicPartition(topic, 0)

    async def main() -> list[Rec]:
        consumer = clients.ak_consumer(bootstrap, reset="latest")
        got: list[Rec] = []
        try:
            await consumer.start()
            consumer.assign([tp])
            consumer.seek(tp, PAST_END)
            deadline = Deadline()
            attempt = 0
            while not got and deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend(clients.kp_rec(r) for r in records)
                if not got:
                    attempt += 1
                    await asyncio.to_thread(new_record, bootstrap, topic, attempt)
        finally:
            await consumer.stop()
        return got

    check_latest(clients.run(main))


@scenario("confluent-delete-records", "offsets")
def confluent_delete_records(bootstrap: str) -> None:
    """DeleteRecords moves the log start offset: earliest, watermarks and a consumer reading from
    the beginning all start there; an offset below it is out of range and resets to it."""
    topic, _ = seed(bootstrap, "delrec")
    client = admin(bootstrap)
    tp = TopicPartition(topic, 0, 6)
    deleted = client.delete_records([tp], request_timeout=TIMEOUT_S)
    [future] = deleted.values()
    low = future.result(timeout=TIMEOUT_S).low_watermark
    assert low == 6, f"low watermark after delete_records(6) = {low}"
    earliest = admin_list(bootstrap, topic, OffsetSpec.earliest())
    assert earliest[0] == 6, f"earliest after delete_records(6) = {earliest}"
    consumer = clients.ck_consumer(bootstrap, reset="earliest")
    try:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        assert (lo, hi) == (6, N), f"watermarks {(lo, hi)}"
        consumer.assign([TopicPartition(topic, 0, 2)])  # below the log start: out of range
        got = clients.ck_poll(consumer, N - 6)
        assert [r.offset for r in got] == list(range(6, N)), [r.offset for r in got]
    finally:
        consumer.close()

"""The in-place commit's common case (`InPlaceAccess._commit_plain`, one C call:
`_records.commit_plain`) against its general path: for the same bytes written into the head of two
logs alike, the same file bytes, answer, offsets, index and listeners, or the same error; and the
fast path is taken for what it is for (plain batches with no producer id) and only for that."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.errors import KafkaError
from rdmalog.store import in_place
from rdmalog.store.records import LOG_APPEND_TIME, Codec, Record, build_batch
from tests.unit.store.helpers import T0, Clock, batch, open_log


def _commit(plog, data: bytes, general: bool):
    """Write `data` where the head ends and commit it: through `commit_written` (fast path
    first) or through the general path only (the infos `validate_written` gives skip the fast
    path). Returns the answer or the Kafka error raised."""
    with plog.head_for_writing() as (head, position):
        head.mmap[position : position + len(data)] = data
    end = position + len(data)
    try:
        if general:
            infos = plog.validate_written(head, position, end)
            return plog.commit_written(head, position, end, infos=infos)
        return plog.commit_written(head, position, end)
    except KafkaError as e:
        return (type(e), str(e), getattr(e, "record_errors", None))


def _state(plog) -> tuple:
    """What a commit changes: offsets, high watermark, the head's bytes and index, epochs."""
    seg = plog.segments[-1]
    return (
        plog.log_end_offset, plog.high_watermark, plog._flush_target, list(plog.leader_epochs.entries),
        seg.size, seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp,
        seg.first_batch_timestamp, seg.bytes_since_index, bytes(seg.mmap[: seg.size]),
        [seg.offset_index.lookup(o) for o in range(0, plog.log_end_offset + 1, 7)],
    )  # fmt: skip


def _both(tmp_path: Path, writes: list[bytes], **config: object) -> tuple[list, list]:
    """The answers and states of the writes committed by both paths, on two logs alike."""
    out = []
    for general in (False, True):
        clock = Clock()
        plog = open_log(tmp_path / f"t-{int(general)}", clock=clock, **config)
        hw_calls: list[int] = []
        plog.add_listener(lambda lg, calls=hw_calls: calls.append(lg.high_watermark))
        answers = []
        for data in writes:
            answers.append(_commit(plog, data, general))
            clock.advance(3)
        out.append((answers, _state(plog), hw_calls))
        plog.close()
    return out[0], out[1]


def _plain(n: int, ts: int = T0, **kw: object) -> bytes:
    return bytes(batch(n, ts=ts, **kw))


def _corrupt(data: bytes) -> bytes:
    """`data` with a byte of its first record's value flipped: its CRC fails."""
    b = bytearray(data)
    b[-3] ^= 1
    return bytes(b)


def _stale(n: int) -> bytes:
    """A plain batch whose header's maxTimestamp is not its records' (rewritten at commit)."""
    b = bytearray(batch(n))
    b[35:43] = (T0 - 5).to_bytes(8, "big")
    from rdmalog.store.records import set_crc

    set_crc(b, 0, len(b))
    return bytes(b)


CASES = {
    "plain": ([_plain(1), _plain(3), _plain(1, size=2000)], {}),
    "batches in one write": ([_plain(1) + _plain(5) + _plain(2), _plain(1)], {}),
    "more batches than the C call keeps": ([b"".join(_plain(1 + i % 3) for i in range(70))], {}),
    "stale max timestamp": ([_stale(3), _plain(1)], {}),
    "producer-stamped LogAppendTime": (
        [bytes(batch(2, timestamp_type=LOG_APPEND_TIME)), _plain(1)],
        {},
    ),
    "LogAppendTime topic": ([_plain(2), _plain(1)], {"message_timestamp_type": "LogAppendTime"}),
    "compacted, keys": ([_plain(2), _plain(1, key=None), _plain(1)], {"cleanup_policy": "compact"}),
    "timestamp out of range": (
        [_plain(1), _plain(1, ts=T0 - 10**9), _plain(1)],
        {"message_timestamp_before_max_ms": 1000},
    ),
    "bad CRC": ([_plain(1), _corrupt(_plain(2)), _plain(1) + _corrupt(_plain(1)), _plain(1)], {}),
    "too large": ([_plain(1), _plain(1, size=5000)], {"max_message_bytes": 3000}),
    "flush policy": ([_plain(1), _plain(1), _plain(1)], {"flush_messages": 2}),
    "idempotent": (
        [
            _plain(2, producer_id=7, producer_epoch=0, base_sequence=0),
            _plain(1),
            _plain(1, producer_id=7, producer_epoch=0, base_sequence=2),
            _plain(1, producer_id=7, producer_epoch=0, base_sequence=2),  # a retry: duplicate
            _plain(1, producer_id=7, producer_epoch=0, base_sequence=5),  # a gap: refused
            _plain(1, producer_id=7, producer_epoch=0, base_sequence=3) + _plain(2),
        ],
        {},
    ),
    "transactional": (
        [
            _plain(1),
            _plain(2, producer_id=3, producer_epoch=0, base_sequence=0, transactional=True),
        ],
        {},
    ),
    "gzip": ([bytes(build_batch([(b"k", b"v" * 300)] * 4, compression=Codec.GZIP)), _plain(1)], {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_path_commits_as_the_general_path(tmp_path: Path, case: str) -> None:
    writes, config = CASES[case]
    fast, general = _both(
        tmp_path, writes, segment_bytes=1 << 20, index_interval_bytes=100, **config
    )
    assert fast == general


def test_the_fast_path_takes_plain_batches_only(tmp_path: Path, monkeypatch) -> None:
    """Plain batches without a producer id are committed by the one C call; an idempotent
    producer's are checked by it (their infos as `validate_written` gives them) and committed by
    the general path; a transaction, a compressed batch or bad bytes leave all to the general
    path."""
    taken: list[str] = []
    c_call = in_place._c_commit_plain
    assert c_call is not None, "the _records extension is not built"

    def counted(*args):
        done = c_call(*args)
        if type(done) is list:  # nothing written yet: the bytes validate as they are
            mm, position, end = args[:3]
            assert done == plog.validate_written(plog.segments[-1], position, end)
        taken.append(type(done).__name__)
        return done

    monkeypatch.setattr(in_place, "_c_commit_plain", counted)
    plog = open_log(tmp_path / "t-0", segment_bytes=1 << 20)
    for data in (
        _plain(1) + _plain(2),
        _plain(1, producer_id=7, producer_epoch=0, base_sequence=0),
        _plain(1, producer_id=3, producer_epoch=0, base_sequence=0, transactional=True),
        bytes(build_batch([Record(b"k", b"v")], compression=Codec.GZIP)),
        _corrupt(_plain(1)),
    ):
        _commit(plog, data, general=False)
    plog.close()
    assert taken == ["tuple", "list", "NoneType", "NoneType", "NoneType"]


def _idem(n: int, seq: int) -> bytes:
    return _plain(n, producer_id=7, producer_epoch=0, base_sequence=seq)


def _one_by_one(plog, writes: list[bytes], position: int) -> list:
    """Commit the writes at `position` one by one as the broker does when a run is refused:
    each write's answer (base, last, append time) or error, stopping at the first write not
    committed (a refused or duplicate one: the broker revokes what sits behind it)."""
    answers = []
    for data in writes:
        head = plog.segments[-1]
        end = position + len(data)
        try:
            res = plog.commit_written(head, position, end)
        except KafkaError as e:
            answers.append((type(e), str(e)))
            break
        answers.append((res.base_offset, res.last_offset, res.log_append_time, res.duplicate))
        if res.duplicate:
            break
        position = end
    return answers


def _run(tmp_path: Path, writes: list[bytes], as_run: bool, **config: object) -> tuple:
    """The writes, after a first plain one, committed as a run (`commit_run`, one by one when it
    refuses) or one by one: (how the run went, answers, state, the high watermark the listeners
    saw last: a run tells them once)."""
    plog = open_log(tmp_path / f"r-{int(as_run)}", clock=Clock(), **config)
    hw_calls: list[int] = []
    plog.add_listener(lambda lg: hw_calls.append(lg.high_watermark))
    first = _plain(1)
    with plog.head_for_writing() as (head, position):
        head.mmap[position : position + len(first)] = first
    plog.commit_written(head, position, position + len(first))
    with plog.head_for_writing() as (head, position):
        data = b"".join(writes)
        head.mmap[position : position + len(data)] = data  # all landed before the commit
    how = "one by one"
    if as_run:
        ends = [sum(map(len, writes[: i + 1])) for i in range(len(writes))]
        done = plog.commit_run(head, position, ends)
        if done is not None:
            res, counts = done
            how, answers, base = "run", [], res.base_offset
            for count in counts:
                answers.append((base, base + count - 1, res.log_append_time, False))
                base += count
    if how == "one by one":
        answers = _one_by_one(plog, writes, position)
    state = _state(plog)
    plog.close()
    return how, answers, state, hw_calls[-1]


RUNS = {
    "plain": ([_plain(1), _plain(3), _plain(1, size=2000)], {}, "C"),
    "batches in a write": ([_plain(1) + _plain(5) + _plain(2), _plain(1), _plain(2)], {}, "C"),
    "a 64 KiB write": ([_plain(60, size=1000), _plain(60, size=1000)], {}, "C"),
    "stale max timestamp": ([_stale(3), _plain(1)], {}, "C"),
    "LogAppendTime topic": (
        [_plain(2), _plain(1)],
        {"message_timestamp_type": "LogAppendTime"},
        "C",
    ),
    "flush policy": ([_plain(1), _plain(1), _plain(1)], {"flush_messages": 2}, "C"),
    "bad CRC in the middle": ([_plain(1), _corrupt(_plain(2)), _plain(1)], {}, None),
    "bad batch in the middle of a write": (
        [_plain(1), _plain(1) + _corrupt(_plain(1)) + _plain(1), _plain(1)],
        {},
        None,
    ),
    "timestamp out of range in the middle": (
        [_plain(1), _plain(1, ts=T0 - 10**9), _plain(1)],
        {"message_timestamp_before_max_ms": 1000},
        None,
    ),
    "a batch across two writes": (
        [_plain(1) + _plain(2)[:30], _plain(2)[30:] + _plain(1), _plain(1)],
        {},
        None,
    ),
    "idempotent": ([_idem(2, 0), _idem(1, 2) + _idem(2, 3), _idem(1, 5)], {}, "general"),
    "idempotent retry": ([_idem(2, 0), _idem(2, 0), _idem(1, 2)], {}, None),
    "idempotent gap": ([_idem(2, 0), _idem(1, 4)], {}, None),
    "gzip": (
        [bytes(build_batch([(b"k", b"v" * 300)] * 4, compression=Codec.GZIP)), _plain(1)],
        {},
        "general",
    ),
}


@pytest.mark.parametrize("case", list(RUNS))
def test_a_run_commits_as_its_writes_one_by_one(tmp_path: Path, case: str, monkeypatch) -> None:
    """A run of writes committed together (`commit_run`: the C call with the writes' ends, or
    the general path for what it does not take) leaves the log, answers and listener calls as
    committing the writes one by one does; a run that cannot be committed whole (a bad write or
    batch in the middle, a batch across two writes, an idempotent retry or gap) commits nothing
    and the writes then go one by one: the good writes before the bad one commit. Plain batches
    take the one C call."""
    writes, config, path = RUNS[case]
    taken: list[str] = []
    c_call = in_place._c_commit_plain
    assert c_call is not None, "the _records extension is not built"

    def counted(*args):
        done = c_call(*args)
        if args[-1] is not None:
            taken.append("C" if type(done) is tuple else "general")
        return done

    monkeypatch.setattr(in_place, "_c_commit_plain", counted)
    config = {"segment_bytes": 1 << 20, "index_interval_bytes": 100, **config}
    how, *run = _run(tmp_path, writes, True, **config)
    one_how, *one = _run(tmp_path, writes, False, **config)
    assert run == one
    assert how == ("one by one" if path is None else "run")
    if path is not None:
        assert taken == [path]

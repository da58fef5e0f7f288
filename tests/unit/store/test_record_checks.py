"""Record-level checks of produced batches (Kafka's LogValidator): offset deltas, record structure,
timestamps against the topic's bounds, null keys on compacted topics, maxTimestamp computed from the
records and rewritten in the header; compressed batches checked without being re-encoded."""

from __future__ import annotations

import random
import shutil
import tracemalloc
import zlib
from pathlib import Path

import lz4.frame
import pytest
import zstandard

from rdmalog.errors import InvalidRecordError, InvalidTimestampError, KafkaError
from rdmalog.store import records as records_module
from rdmalog.store._record_scan import CHECK_TIMESTAMPS, KEYS_REQUIRED, RecordScan
from rdmalog.store.compression import Codec, compress, compress_as_kafka
from rdmalog.store.records import (
    BATCH_OVERHEAD,
    CRC_POS,
    HEADER,
    MAX_TIMESTAMP,
    RECORDS,
    BatchInfo,
    Record,
    RecordBatch,
    RecordRules,
    build_batch,
    decode_all,
    encode_record,
    set_crc,
    validate_batches,
)
from tests.unit.store.helpers import T0, open_log

CODECS = list(Codec)
HOUR = 3_600_000


def raw_batch(
    records: list[tuple[bytes | None, int, int]],
    *,
    codec: Codec = Codec.NONE,
    count: int | None = None,
    max_ts: int | None = None,
    base_ts: int = T0,
    attrs: int = 0,
) -> bytearray:
    """A v2 batch whose records are (key, offset delta, timestamp delta) as given, however wrong;
    `count` and `max_ts` are written as given (defaults: the record count, the right max)."""
    body = b"".join(encode_record(Record(k, b"v" * 20), od, td) for k, od, td in records)
    if codec != Codec.NONE:
        body = compress(codec, body)
    n = len(records) if count is None else count
    top = base_ts + max(td for _, _, td in records) if max_ts is None else max_ts
    out = bytearray(BATCH_OVERHEAD + len(body))
    HEADER.pack_into(
        out, 0, 0, len(out) - 12, -1, 2, 0, codec | attrs, n - 1, base_ts, top, -1, -1, -1, n
    )
    out[BATCH_OVERHEAD:] = body
    set_crc(out, 0, len(out))
    return out


def with_records_section(buf: bytearray, section: bytes) -> None:
    """Put `section` (compressed or framed records) after the batch header of `buf`, with the
    batch length and CRC made right for it."""
    buf[BATCH_OVERHEAD:] = section
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    set_crc(buf, 0, len(buf))


def _python_and_checked_verdicts(buf: bytearray, r: RecordRules) -> tuple[object, object]:
    """What the all-Python check and `validate_batches` (C first) make of `buf`: their answers, or
    the type of the error each raised."""
    verdicts: list[object] = []
    for check in (
        lambda: records_module._validate_batches(memoryview(buf), None, True, False, r),
        lambda: validate_batches(memoryview(buf), rules=r),
    ):
        try:
            verdicts.append(check())
        except KafkaError as e:
            verdicts.append(type(e))
    return verdicts[0], verdicts[1]


def rules(**kw) -> RecordRules:
    base = dict(
        now=T0, before_max_ms=2**63 - 1, after_max_ms=2**63 - 1, log_append_time=False,
        keys_required=False, partition="t-0",
    )  # fmt: skip
    base.update(kw)
    return RecordRules(**base)


def check(buf: bytearray, **kw):
    return validate_batches(memoryview(buf), rules=rules(**kw))


@pytest.mark.parametrize("codec", CODECS)
def test_good_batches_pass_with_their_max_timestamp(codec: Codec) -> None:
    recs = [(b"k%d" % i, i, d) for i, d in enumerate([5, 0, 9, 3])]
    (info,) = check(raw_batch(recs, codec=codec))
    assert info.max_timestamp == T0 + 9 and not info.stale_max_timestamp


@pytest.mark.parametrize("codec", CODECS)
def test_offset_deltas_must_run_from_zero(codec: Codec) -> None:
    for deltas in ([0, 2, 3], [1, 2, 3], [0, 0, 1]):
        recs = [(b"k", d, 0) for d in deltas]
        with pytest.raises(InvalidRecordError, match="offset delta"):
            check(raw_batch(recs, codec=codec))


@pytest.mark.parametrize("codec", CODECS)
def test_record_count_must_match_the_records(codec: Codec) -> None:
    recs = [(b"k", i, 0) for i in range(3)]
    two = raw_batch(recs[:2], codec=codec, count=3)  # count 3, lastOffsetDelta 2, two records
    with pytest.raises(InvalidRecordError, match="2 records"):
        check(two)
    four = raw_batch(recs + [(b"k", 3, 0)], codec=codec, count=3)
    with pytest.raises(InvalidRecordError, match="more records than"):
        check(four)


@pytest.mark.parametrize("codec", CODECS)
def test_timestamps_out_of_range_list_each_record(codec: Codec) -> None:
    recs = [(b"k", 0, -2 * HOUR), (b"k", 1, 0), (b"k", 2, 2 * HOUR), (b"k", 3, 10)]
    buf = raw_batch(recs, codec=codec)
    with pytest.raises(InvalidTimestampError) as e:
        check(buf, before_max_ms=HOUR, after_max_ms=HOUR)
    assert e.value.error_code == 32
    assert [i for i, _ in e.value.record_errors] == [0, 2]
    assert (
        f"Timestamp {T0 - 2 * HOUR} of message with offset 0 is out of range"
        in (e.value.record_errors[0][1])
    )
    check(buf, before_max_ms=2 * HOUR, after_max_ms=2 * HOUR)  # the bounds are inclusive
    check(buf, before_max_ms=HOUR, after_max_ms=HOUR, log_append_time=True)  # not checked


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topics_refuse_null_keys(codec: Codec) -> None:
    buf = raw_batch([(b"k", 0, 0), (None, 1, 0), (b"", 2, 0), (None, 3, 0)], codec=codec)
    check(buf)
    with pytest.raises(InvalidRecordError) as e:
        check(buf, keys_required=True)
    assert e.value.error_code == 87
    assert [i for i, _ in e.value.record_errors] == [1, 3]  # an empty key is a key
    assert "Compacted topic cannot accept message without key in topic partition t-0" in str(
        e.value
    )


def test_producer_set_log_append_time_is_refused_where_kafka_refuses_it() -> None:
    buf = raw_batch([(b"k", 0, 0), (b"k", 1, 0)], attrs=0x08)
    with pytest.raises(InvalidTimestampError) as e:
        check(buf, log_append_time=True)
    assert len(e.value.record_errors) == 2
    # CreateTime topic: range-checked as its maxTimestamp, then made a CreateTime batch
    (info,) = check(buf)
    assert info.stale_max_timestamp


@pytest.mark.parametrize("codec", CODECS)
def test_a_wrong_max_timestamp_is_rewritten_on_append_and_found_by_time(
    tmp_path: Path, codec: Codec
) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(raw_batch([(b"a", 0, 0), (b"b", 1, 0)], codec=codec))  # T0
    sent = raw_batch([(b"a", 0, 0), (b"b", 1, 1000), (b"c", 2, 500)], codec=codec, max_ts=-1)
    body = bytes(sent[BATCH_OVERHEAD:])
    plog.append(sent)
    stored = RecordBatch(plog.read(2, 1 << 20).read())
    assert stored.max_timestamp == T0 + 1000 and stored.is_valid()
    assert bytes(stored.bytes()[BATCH_OVERHEAD:]) == body  # records byte for byte as sent
    assert plog.offset_for_timestamp(T0 + 1).offset == 3
    assert tuple(plog.max_timestamp()) == (T0 + 1000, 3)
    assert plog.active_segment.largest_timestamp() == T0 + 1000  # what time retention uses
    plog.close()


def test_a_right_max_timestamp_keeps_the_crc(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    sent = raw_batch([(b"a", 0, 7), (b"b", 1, 3)])
    crc = bytes(sent[CRC_POS : CRC_POS + 4])
    plog.append(sent)
    stored = plog.read(0, 1 << 20).read()
    assert stored[CRC_POS : CRC_POS + 4] == crc
    plog.close()


def test_timestamp_bounds_are_checked_per_record(tmp_path: Path, clock) -> None:
    plog = open_log(
        tmp_path / "t-0",
        clock=clock,
        message_timestamp_before_max_ms=1000,
        message_timestamp_after_max_ms=500,
    )
    # the header's maxTimestamp is in range, a record is not: Kafka checks records
    buf = raw_batch([(b"k", 0, -1001), (b"k", 1, 0)], max_ts=T0)
    with pytest.raises(InvalidTimestampError) as e:
        plog.append(buf)
    assert e.value.record_errors[0][0] == 0
    assert plog.log_end_offset == 0
    plog.close()


def test_compacted_topic_log_refuses_null_keys(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", cleanup_policy="compact,delete")
    plog.append(build_batch([(b"k", b"v")]))
    with pytest.raises(InvalidRecordError):
        plog.append(build_batch([(b"k", b"v"), (None, b"v")]))
    assert [r.key for r in decode_all(plog.read(0, 1 << 20).read())] == [b"k"]
    plog.close()


@pytest.mark.parametrize("codec", CODECS[1:])
def test_a_bomb_is_checked_in_bounded_memory(codec: Codec) -> None:
    """64 MiB of records from a small batch are checked a piece at a time (tracemalloc sees the
    Python objects and the C check's buffers; the codec libraries' contexts are bounded by the
    frame's block or window size, zstd's to 8 MiB)."""
    big = 64 << 20
    body = encode_record(Record(b"k", bytes(big)), 0, 0)
    if codec == Codec.GZIP:
        z = zlib.compressobj(1, zlib.DEFLATED, 31)
        packed = z.compress(body) + z.flush()
    else:  # snappy xerial-framed, as the Java client writes it: 32 KiB blocks
        packed = compress(codec, body)
    out = bytearray(BATCH_OVERHEAD + len(packed))
    HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, codec, 0, T0, T0, -1, -1, -1, 1)
    out[BATCH_OVERHEAD:] = packed
    set_crc(out, 0, len(out))
    del body
    tracemalloc.start()
    try:
        (info,) = check(out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.count == 1
    assert peak < 8 << 20, peak  # 64 MiB of records, checked a piece at a time


def _scan(body: bytes, count: int, pieces: list[int], flags: int = 0):
    s = RecordScan(count, T0, T0 - 10, T0 + 10, flags, 100)
    pos = 0
    for cut in pieces + [len(body)]:
        s.feed(body[pos:cut])
        pos = cut
    return s.finish()


def test_the_scan_does_not_depend_on_how_the_bytes_are_cut() -> None:
    rng = random.Random(7)
    recs = [
        Record(rng.choice([None, b"", b"key" * rng.randrange(50)]), b"x" * rng.randrange(300),
               [(f"h{j}", rng.choice([None, b"hv" * j])) for j in range(rng.randrange(3))])
        for _ in range(40)
    ]  # fmt: skip
    body = b"".join(encode_record(r, i, rng.randrange(-20, 20)) for i, r in enumerate(recs))
    whole = _scan(body, len(recs), [], CHECK_TIMESTAMPS | KEYS_REQUIRED)
    assert whole[1] > 0  # some records fail the checks: those must be the same too
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(body)), rng.randrange(1, 200)))
        assert _scan(body, len(recs), cuts, CHECK_TIMESTAMPS | KEYS_REQUIRED) == whole
    assert _scan(body, len(recs), list(range(1, len(body)))) == _scan(body, len(recs), [])


def test_malformed_records_are_refused_never_overread() -> None:
    rng = random.Random(11)
    good = build_batch([Record(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(20)])
    body = bytes(good[RECORDS:])
    refused = 0
    for _ in range(3000):
        bad = bytearray(body)
        for _ in range(rng.randrange(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        cut = rng.choice([len(bad), rng.randrange(len(bad))])
        try:
            _scan(bytes(bad[:cut]), 20, [])
        except ValueError:
            refused += 1
    assert refused > 1000


def test_whole_batch_validation_refuses_a_corrupted_record_with_a_good_crc() -> None:
    buf = build_batch([Record(b"k", b"v" * 10) for _ in range(3)])
    buf[RECORDS] = 0x7F  # first record's length: far too long
    set_crc(buf, 0, len(buf))
    with pytest.raises(InvalidRecordError):
        check(buf)
    assert validate_batches(memoryview(buf))  # without rules: header checks only


def test_max_timestamp_header_field_position() -> None:
    buf = raw_batch([(b"k", 0, 4)], max_ts=123)
    assert int.from_bytes(buf[MAX_TIMESTAMP : MAX_TIMESTAMP + 8], "big") == 123


def _framings(codec: Codec, data: bytes, rng: random.Random) -> list[bytes]:
    """Records section `data` as the clients frame it, and broken: several frames or members, cut
    or garbled compressed data, trailing bytes."""
    cut = rng.randrange(len(data) + 1)
    if codec == Codec.GZIP:
        whole = compress(codec, data)
        ok = [compress(codec, data[:cut]) + zlib.compress(data[cut:]), zlib.compress(data),
              whole + compress(codec, b"")]  # fmt: skip
    elif codec == Codec.SNAPPY:  # xerial (the Java client), raw (librdkafka)
        whole = compress(codec, data)
        ok = [compress(codec, data, xerial=False), compress(codec, data[:cut])[:16] +
              compress(codec, data[:cut])[16:] + compress(codec, data[cut:])[16:]]  # fmt: skip
    elif codec == Codec.LZ4:  # Kafka's 64 KiB independent blocks; with size and checksums
        whole = compress(codec, data)
        ok = [compress(codec, data[:cut]) + compress(codec, data[cut:]),
              lz4.frame.compress(data, store_size=True, content_checksum=True)]  # fmt: skip
    else:  # zstd with and without the content size, as the Java client streams it
        whole = compress(codec, data)
        ok = [
            compress_as_kafka(codec, data),
            compress(codec, data[:cut]) + compress(codec, data[cut:]),
        ]
    bad = [whole[: rng.randrange(len(whole))], whole + b"\0", whole + whole, whole[:-1],
           bytearray(whole)]  # fmt: skip
    bad[-1][rng.randrange(len(whole))] ^= 1 << rng.randrange(8)
    return ok + [bytes(b) for b in bad]


@pytest.mark.skipif(
    records_module._c_validate_client is None, reason="the C extension is not built"
)
def test_the_one_call_c_check_agrees_with_the_python_one() -> None:
    """validate_batches takes validate_client's infos for a produce request's batches (headers and
    records in one C call, compressed records decompressed as they are scanned): it must pass
    exactly what the Python checks pass, with the same infos (max timestamp from the records, stale
    flag), for every codec, framing and corruption; codecs the build has no library for are left
    to Python (a tuple of header-checked infos)."""
    rng = random.Random(5)
    cases: list[tuple[bytes, dict]] = []
    for _ in range(1000):
        n = rng.randrange(1, 12)
        recs = [
            (rng.choice([b"k", None]) if rng.random() < 0.2 else b"k", i, rng.randrange(-5, 9))
            for i in range(n)
        ]
        if rng.random() < 0.1:  # an offset delta out of place
            k, _, td = recs[-1]
            recs[-1] = (k, n + 1, td)
        codec = rng.choice([Codec.NONE, *CODECS])
        buf = raw_batch(
            recs,
            codec=codec,
            count=n + rng.choice([0, 0, 0, 0, 1, -1]),
            max_ts=rng.choice([None, None, T0 - 1, -1]),
            attrs=rng.choice([0, 0, 0, 0x08]),
        )
        if codec != Codec.NONE and rng.random() < 0.4:  # framings, cut, garbled, trailing bytes
            body = b"".join(encode_record(Record(k, b"v" * 20), od, td) for k, od, td in recs)
            with_records_section(buf, rng.choice(_framings(codec, body, rng)))
        elif rng.random() < 0.3:  # a byte of the records changed, the CRC made right again
            buf[rng.randrange(BATCH_OVERHEAD, len(buf))] = rng.randrange(256)
            set_crc(buf, 0, len(buf))
        kw = rng.choice(
            [{}, {"keys_required": True}, {"log_append_time": True},
             {"before_max_ms": 3, "after_max_ms": 4}, {"now": T0 + 2 * HOUR, "before_max_ms": HOUR}]
        )  # fmt: skip
        cases.append((bytes(buf) * rng.choice([1, 1, 2]), kw))
    passed = {c: 0 for c in Codec}
    for raw, kw in cases:
        r = rules(**kw)
        try:
            want = records_module._validate_batches(memoryview(raw), None, True, False, r)
        except (InvalidRecordError, InvalidTimestampError, KafkaError):
            want = None
        low, high, flags = records_module._record_bounds(r)
        got = records_module._c_validate_client(
            memoryview(raw), -1, False, BatchInfo, low, high, flags, r.log_append_time
        )
        codec = RecordBatch(raw).codec
        if type(got) is tuple:  # a codec without its library in this build: Python checks it
            assert codec not in records_module._C_CHECKED
            assert want is not None and len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                g = g._replace(max_timestamp=w.max_timestamp, stale_max_timestamp=w[9])
                assert g == w
            continue
        assert got == want, (raw[:80], kw)
        passed[codec] += got is not None
    assert sum(passed.values()) < len(cases) - 200  # both outcomes were exercised
    for codec in records_module._C_CHECKED:
        assert passed[codec] > 10, passed


@pytest.mark.skipif(
    records_module._c_validate_client is None, reason="the C extension is not built"
)
def test_a_raw_snappy_block_past_the_bound_is_left_to_python() -> None:
    """A raw snappy block inflates whole into one buffer bounded by max(max.message.bytes, 1 MiB):
    one that says it inflates past that is not taken by C, and the Python check decides as before
    (a bomb of zeros refused as corrupt, one of good records accepted); corrupt raw and xerial
    snappy is refused the same way by both."""
    big = encode_record(Record(b"k", bytes(3 << 20)), 0, 0)
    zeros = bytes(3 << 20)
    good, bomb = (bytearray(raw_batch([(b"k", 0, 0)], codec=Codec.SNAPPY)) for _ in range(2))
    for buf, data in ((good, big), (bomb, zeros)):
        with_records_section(buf, compress(Codec.SNAPPY, data, xerial=False))
        low, high, flags = records_module._record_bounds(rules())
        got = records_module._c_validate_client(
            memoryview(buf), 1 << 20, False, BatchInfo, low, high, flags, False
        )
        assert got is None  # past the bound: Python's turn
    (info,) = validate_batches(memoryview(good), 1 << 20, rules=rules())
    assert info.count == 1
    with pytest.raises(InvalidRecordError):
        validate_batches(memoryview(bomb), 1 << 20, rules=rules())


@pytest.mark.skipif(records_module._c_patch is None, reason="the C extension is not built")
@pytest.mark.parametrize("append_time", [-1, T0 + 7])
def test_the_one_call_c_patch_agrees_with_the_python_one(append_time: int) -> None:
    """patch_batches in C (`_records.patch`) writes the same bytes (offsets, leader epoch, stale or
    LogAppendTime timestamps and their CRCs) and returns what the Python loop returns."""
    rng = random.Random(7)
    for _ in range(100):
        parts = [
            raw_batch(
                [(b"k", i, rng.randrange(0, 9)) for i in range(rng.randrange(1, 6))],
                max_ts=rng.choice([None, T0 - 1]),  # stale headers are rewritten
            )
            for _ in range(rng.randrange(1, 4))
        ]
        raw = b"".join(parts)
        infos = validate_batches(memoryview(raw), rules=rules())
        base, epoch = rng.randrange(0, 2**40), rng.randrange(0, 2**31)
        c_buf, py_buf = bytearray(raw), bytearray(raw)
        got = records_module._c_patch(c_buf, infos, base, epoch, append_time)
        want = records_module._patch_batches(py_buf, infos, base, epoch, append_time)
        assert got == want
        assert c_buf == py_buf
        validate_batches(memoryview(c_buf), from_client=False)  # CRCs right
        batches = list(records_module.iter_batches(c_buf))
        assert [b.base_offset for b in batches] == [
            base + sum(i.count for i in infos[:k]) for k in range(len(infos))
        ]
        assert {b.partition_leader_epoch for b in batches} == {epoch}


def _build_records_ext(out_dir: Path) -> object:
    """_records.c built as setup.py builds it on a machine without liblz4, libzstd and libsnappy
    (zlib only, none of the HAVE_ macros), loaded under its own name."""
    import importlib.util
    import shlex
    import subprocess
    import sysconfig

    src = Path(records_module.__file__).with_name("_records.c")
    so = out_dir / ("_records" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [*shlex.split(sysconfig.get_config_var("LDSHARED")), "-fPIC", "-O2", "-I",
           sysconfig.get_paths()["include"], str(src), "-lz", "-o", str(so)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    spec = importlib.util.spec_from_file_location("_records", so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not shutil.which("gcc"), reason="no C compiler to build the fallback variant")
def test_without_the_codec_libraries_the_python_path_checks_those_codecs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that found none of the codec libraries checks plain and gzip records in C and
    hands snappy, lz4 and zstd batches back (a tuple) for Python to check: validate_batches gives
    what the all-Python check gives, good batches and bad."""
    ext = _build_records_ext(tmp_path)
    assert ext.CHECKED_CODECS == (Codec.NONE, Codec.GZIP)
    monkeypatch.setattr(records_module, "_c_validate_client", ext.validate_client)
    monkeypatch.setattr(records_module, "_c_validate", ext.validate)
    monkeypatch.setattr(records_module, "_C_CHECKED", frozenset(ext.CHECKED_CODECS))
    rng = random.Random(3)
    left = 0
    for codec in CODECS:
        recs = [(b"k", i, i) for i in range(5)]
        body = b"".join(encode_record(Record(k, b"v" * 20), od, td) for k, od, td in recs)
        for framed in [compress(codec, body)] + (_framings(codec, body, rng) if codec else []):
            buf = raw_batch(recs, codec=codec, max_ts=T0 - 1)
            with_records_section(buf, framed)
            r = rules()
            want, got = _python_and_checked_verdicts(buf, r)
            assert got == want, (codec, bytes(framed[:40]))
            low, high, flags = records_module._record_bounds(r)
            c = ext.validate_client(memoryview(buf), -1, False, BatchInfo, low, high, flags, False)
            left += type(c) is tuple
    assert left >= 3  # good snappy, lz4 and zstd batches went to Python


@pytest.mark.skipif(
    records_module._c_validate_client is None, reason="the C extension is not built"
)
@pytest.mark.parametrize("codec", CODECS[1:])
def test_records_that_inflate_past_the_pieces_agree(codec: Codec) -> None:
    """Records that inflate to several of the C check's 64 KiB pieces (and past its 1 MiB whole
    buffer), with records straddling pieces: C checks them itself (a list, within a bound of 4 MiB)
    and agrees with Python, whole, cut short, or with a byte of the compressed data changed."""
    rng = random.Random(int(codec))
    values = [rng.randbytes(rng.randrange(1, 300_000)) + bytes(rng.randrange(200_000)) for _ in range(12)]  # fmt: skip
    body = b"".join(encode_record(Record(b"k", v), i, i) for i, v in enumerate(values))
    assert len(body) > 1 << 20
    framings = [compress(codec, body)]
    if codec == Codec.SNAPPY:
        framings.append(compress(codec, body, xerial=False))
    if codec == Codec.ZSTD:
        framings.append(compress_as_kafka(codec, body))
    for framed in list(framings):
        garbled = bytearray(framed)
        garbled[len(garbled) // 2] ^= 0x10
        framings += [framed[: len(framed) - 100], bytes(garbled)]
    r = rules()
    low, high, flags = records_module._record_bounds(r)
    for i, framed in enumerate(framings):
        buf = raw_batch([(b"k", j, j) for j in range(len(values))], codec=codec)
        with_records_section(buf, framed)
        try:
            want = records_module._validate_batches(memoryview(buf), None, True, False, r)
        except KafkaError:
            want = None
        got = records_module._c_validate_client(
            memoryview(buf), 4 << 20, False, BatchInfo, low, high, flags, False
        )
        assert got == want, (codec, i)
        if i < (2 if codec in (Codec.SNAPPY, Codec.ZSTD) else 1):
            assert type(got) is list and got[0].count == len(values)


def _gzip_member(data: bytes, flg: int = 0, extra: bytes = b"", crc_delta: int = 0,
                 size_delta: int = 0, header_crc_delta: int = 0) -> bytes:  # fmt: skip
    """One gzip member written by hand: header flags `flg` with their fields (FEXTRA, FNAME,
    FHCRC), and a trailer CRC-32 / ISIZE off by the deltas (0: right)."""
    head = b"\x1f\x8b\x08" + bytes([flg]) + bytes(4) + b"\x00\xff"
    if flg & 0x04:
        head += len(extra).to_bytes(2, "little") + extra
    if flg & 0x08:
        head += b"name\x00"
    if flg & 0x02:
        head += ((zlib.crc32(head) + header_crc_delta) & 0xFFFF).to_bytes(2, "little")
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    crc = (zlib.crc32(data) + crc_delta) & 0xFFFFFFFF
    size = (len(data) + size_delta) & 0xFFFFFFFF
    return head + body + crc.to_bytes(4, "little") + size.to_bytes(4, "little")


@pytest.mark.skipif(
    records_module._c_validate_client is None, reason="the C extension is not built"
)
def test_every_gzip_form_gets_the_python_verdict() -> None:
    """The C check inflates gzip's common form (one member, no optional header fields: librdkafka's
    and the Java client's) whole with libdeflate when the build has it, and everything else with
    zlib as it comes: good members of every header form pass, and a wrong CRC-32, a wrong or lying
    ISIZE (smaller or larger than the data: a bomb that says it is small), a bad header CRC,
    reserved flags or trailing bytes are refused, as the Python check (zlib) decides, within the
    1 MiB bound and past it."""
    recs = [(b"k", i, i) for i in range(50)]
    body = b"".join(encode_record(Record(k, b"v" * 20), od, td) for k, od, td in recs)
    big = [(b"k", i, i) for i in range(3)]
    big_body = b"".join(encode_record(Record(b"k", bytes(700_000)), i, i) for i in range(3))
    forms = []
    for data, rs in ((body, recs), (big_body, big)):
        forms += [
            (rs, _gzip_member(data), True),
            (rs, _gzip_member(data, flg=0x02), True),
            (rs, _gzip_member(data, flg=0x0E, extra=b"xy"), True),
            (rs, _gzip_member(data, crc_delta=1), False),
            (rs, _gzip_member(data, size_delta=1), False),
            (rs, _gzip_member(data, size_delta=-1), False),
            (rs, _gzip_member(data, size_delta=-len(data) + 10), False),
            (rs, _gzip_member(data, flg=0x02, header_crc_delta=1), False),
            (rs, _gzip_member(data, flg=0x20), False),
            (rs, _gzip_member(data) + b"\0", False),
            (rs, _gzip_member(data[:7]) + _gzip_member(data[7:]), True),
        ]
    r = rules()
    low, high, flags = records_module._record_bounds(r)
    for i, (rs, framed, ok) in enumerate(forms):
        buf = raw_batch(rs, codec=Codec.GZIP)
        with_records_section(buf, framed)
        try:
            want = records_module._validate_batches(memoryview(buf), None, True, False, r)
        except KafkaError:
            want = None
        assert (want is not None) == ok, i
        for bound in (-1, 4 << 20):
            got = records_module._c_validate_client(
                memoryview(buf), bound, False, BatchInfo, low, high, flags, False
            )
            assert got == want, (i, bound)


@pytest.mark.skipif(Codec.ZSTD not in records_module._C_CHECKED, reason="the build has no libzstd")
def test_every_zstd_frame_form_gets_the_python_verdict() -> None:
    """The C check decodes a lone zstd frame at once when its window is at most 8 MiB and it fits
    1 MiB (its content size said or not: librdkafka's and the Java client's say none), and streams
    every other frame: with and without the content size, under and over 1 MiB, windows of 1 and
    16 MiB, whole, cut, garbled or followed by a byte, validate_batches gives the all-Python
    verdict, and C answers it itself or leaves it to Python (None)."""
    small = b"".join(encode_record(Record(b"k", b"v" * 20), i, i) for i in range(50))
    big = b"".join(encode_record(Record(b"k", bytes(700_000)), i, i) for i in range(3))
    r = rules()
    low, high, flags = records_module._record_bounds(r)
    taken = 0
    for body, n in ((small, 50), (big, 3)):
        for window_log in (20, 24):
            for sized in (True, False):
                params = zstandard.ZstdCompressionParameters.from_level(
                    3, window_log=window_log, write_content_size=sized
                )
                c = zstandard.ZstdCompressor(compression_params=params)
                frame = c.compress(body) if sized else _unsized(c, body)
                garbled = bytearray(frame)
                garbled[len(garbled) // 2] ^= 0x10
                for framed in (frame, frame[:-3], bytes(garbled), frame + b"\0"):
                    buf = raw_batch([(b"k", i, i) for i in range(n)], codec=Codec.ZSTD)
                    with_records_section(buf, framed)
                    want, got = _python_and_checked_verdicts(buf, r)
                    assert got == want, (len(body), window_log, sized, len(framed))
                    c_got = records_module._c_validate_client(
                        memoryview(buf), -1, False, BatchInfo, low, high, flags, False
                    )
                    if c_got is not None:
                        assert c_got == want
                        taken += 1
    assert taken >= 4  # the good frames with small windows were checked in C


def _unsized(c: zstandard.ZstdCompressor, body: bytes) -> bytes:
    """One frame without its content size, as a streaming writer leaves it."""
    o = c.compressobj()
    return o.compress(body) + o.flush()

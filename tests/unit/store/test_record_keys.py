"""Records without a key refused on compacted topics at produce (rdmalog/store/record_keys.py), as
Kafka's LogValidator refuses them: appended or written in place, plain or compressed; delete topics
and the broker's control batches are not concerned."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.errors import InvalidRecordError
from rdmalog.store.compression import Codec
from rdmalog.store.record_keys import require_keys
from rdmalog.store.records import RECORDS, build_batch, validate_batches
from tests.unit.store.cleaner_helpers import compacted, contents, records_batch
from tests.unit.store.helpers import open_log


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_a_batch_holding_a_keyless_record_is_refused_whole(
    tmp_path: Path, clock, codec: Codec
) -> None:
    plog = compacted(tmp_path / "t-0", clock)
    plog.append(records_batch([("a", "1"), ("b", "2")], compression=codec))
    with pytest.raises(InvalidRecordError, match="without key in topic partition t-0"):
        plog.append(records_batch([("c", "3"), (None, "x"), ("d", "4")], compression=codec))
    assert plog.log_end_offset == 2 and contents(plog) == [(0, b"a", b"1"), (1, b"b", b"2")]
    plog.close()


def test_written_in_place_the_same_rule_holds(tmp_path: Path, clock) -> None:
    plog = compacted(tmp_path / "t-0", clock, segment_bytes=1 << 16)
    with plog.head_for_writing() as (head, position):
        pass
    raw = bytes(records_batch([(None, "x")]))
    head.mmap[position : position + len(raw)] = raw  # what a one-sided WRITE does
    with pytest.raises(InvalidRecordError):
        plog.validate_written(head, position, position + len(raw))
    with pytest.raises(InvalidRecordError):
        plog.commit_written(head, position, position + len(raw))
    assert plog.log_end_offset == 0
    plog.close()


def test_delete_topics_and_control_batches_keep_keyless_records(tmp_path: Path, clock) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock)
    plog.append(records_batch([(None, "x")]))
    assert contents(plog) == [(0, None, b"x")]
    plog.close()
    marker = memoryview(build_batch([(None, b"\x00\x00\x00\x00")], control=True, producer_id=7))
    require_keys(marker, validate_batches(marker, allow_control=True), "t-0")  # not checked


def test_records_cut_short_are_invalid_not_read_past(tmp_path: Path) -> None:
    full = build_batch([(b"k", b"v"), (b"k2", b"v2")])
    info = validate_batches(memoryview(full))[0]
    short = memoryview(bytearray(full[: RECORDS + 4]))
    with pytest.raises(InvalidRecordError, match="malformed record"):
        require_keys(short, [info._replace(size=len(short))], "t-0")

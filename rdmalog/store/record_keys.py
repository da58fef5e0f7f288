"""Keys on compacted topics, checked at produce as Kafka's LogValidator checks them: a record
without a key can never be compacted away, so a compacted topic refuses the batch holding it
(INVALID_RECORD). Records are parsed in C (`_cleaner.first_keyless`), one call per batch;
compressed batches are decompressed for the scan and stored as sent."""

from __future__ import annotations

from rdmalog.errors import InvalidRecordError
from rdmalog.store._cleaner import first_keyless
from rdmalog.store.compression import decompress
from rdmalog.store.records import CODEC_MASK, CONTROL_BIT, RECORDS, BatchInfo


def require_keys(mv: memoryview, infos: list[BatchInfo], name: str) -> None:
    """Raise InvalidRecordError when a data batch in `mv` holds a record without a key (control
    batches carry their own keys and are the broker's)."""
    for index, info in enumerate(infos):
        if info.attributes & CONTROL_BIT:
            continue
        records = mv[info.position + RECORDS : info.position + info.size]
        if info.attributes & CODEC_MASK:
            records = decompress(info.attributes & CODEC_MASK, records)
        try:
            keyless = first_keyless(records, info.count)
        except ValueError as exc:
            raise InvalidRecordError(
                f"{name}: batch {index} holds a malformed record: {exc}"
            ) from None
        if keyless >= 0:
            raise InvalidRecordError(
                f"Compacted topic cannot accept message without key in topic partition {name}."
            )

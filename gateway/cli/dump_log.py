"""`rdmalog dump-log`: kafka-dump-log.sh's job on segment (`.log`), offset index (`.index`) and time
index (`.timeindex`) files: every batch's header with its CRC check, `--deep-iteration` each record,
`--print-data-log` keys and values too; index entries checked against their segment. Exits 1 when a
CRC, an index entry or the end of a segment is wrong."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.cli.common import CliError, out
from rdmalog.store.records import decode_records
from rdmalog.store.verify import (
    SegmentCheck,
    base_offset_of,
    check_offset_index,
    check_time_index,
    iter_checked_batches,
    offset_index_entries,
    time_index_entries,
)


def register(sub) -> list[argparse.ArgumentParser]:
    dump = sub.add_parser(
        "dump-log", help="print and check log and index files", description=__doc__
    )
    dump.add_argument("--files", action="append", required=True, metavar="FILE[,FILE]")
    dump.add_argument("--print-data-log", action="store_true", help="records' keys and values")
    dump.add_argument("--deep-iteration", action="store_true", help="every record of each batch")
    dump.add_argument("--verify-index-only", action="store_true", help="only report problems")
    dump.add_argument("--max-bytes", type=int, default=2**31 - 1, help="stop after this position")
    dump.set_defaults(func=run)
    return [dump]


def run(args: argparse.Namespace) -> int:
    files = [Path(f) for item in args.files for f in item.split(",") if f]
    failed = False
    for path in files:
        if not path.is_file():
            raise CliError(f"{path}: no such file")
        out(f"Dumping {path}")
        if path.suffix == ".log":
            failed |= not _dump_log(path, args)
        elif path.suffix == ".index":
            failed |= not _dump_index(path, args)
        elif path.suffix == ".timeindex":
            failed |= not _dump_time_index(path, args)
        else:
            raise CliError(f"{path}: not a .log, .index or .timeindex file")
    if failed:
        print("rdmalog dump-log: problems found (see above)", file=sys.stderr)
    return 1 if failed else 0


def _text(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", "replace")


def _dump_log(path: Path, args: argparse.Namespace) -> bool:
    check = SegmentCheck(path, base_offset_of(path))
    out(f"Log starting offset: {check.base_offset}")
    records_too = args.deep_iteration or args.print_data_log
    for item in iter_checked_batches(path, check):
        if item.position > args.max_bytes:
            break
        b = item.batch
        last_seq = b.base_sequence + b.last_offset_delta if b.base_sequence >= 0 else -1
        ts_kind = "LogAppendTime" if b.timestamp_type else "CreateTime"
        if not args.verify_index_only:
            out(
                f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.count} "
                f"baseSequence: {b.base_sequence} lastSequence: {last_seq} producerId: "
                f"{b.producer_id} producerEpoch: {b.producer_epoch} partitionLeaderEpoch: "
                f"{b.partition_leader_epoch} isTransactional: {str(b.is_transactional).lower()} "
                f"isControl: {str(b.is_control).lower()} position: {item.position} "
                f"{ts_kind}: {b.max_timestamp} size: {b.size} magic: {b.magic} "
                f"compresscodec: {b.codec.name.lower()} crc: {b.crc} "
                f"isvalid: {str(item.valid).lower()}"
            )
        if records_too and item.valid and not args.verify_index_only:
            for r in decode_records(b):
                seq = b.base_sequence + (r.offset - b.base_offset) if b.base_sequence >= 0 else -1
                line = (
                    f"| offset: {r.offset} {ts_kind}: {r.timestamp} keySize: "
                    f"{-1 if r.key is None else len(r.key)} valueSize: "
                    f"{-1 if r.value is None else len(r.value)} sequence: {seq} headerKeys: "
                    f"[{','.join(k for k, _ in r.headers)}]"
                )
                if args.print_data_log:
                    line += f" key: {_text(r.key)} payload: {_text(r.value)}"
                out(line)
        elif not item.valid:
            out(f"Batch at position {item.position} fails its CRC-32C or length check")
    for pos in check.out_of_order:
        out(f"Batch at position {pos} goes back in offsets (previous ended at a later offset)")
    if check.trailing_bytes:
        out(f"Found {check.trailing_bytes} invalid bytes at the end of {path.name}")
    out(
        f"Summary: {check.batches} batches, {check.records} records, offsets "
        f"{check.first_offset}-{(check.next_offset or 1) - 1}, "
        f"{len(check.invalid_batches)} failing their CRC"
    )
    return check.ok


def _dump_index(path: Path, args: argparse.Namespace) -> bool:
    if not args.verify_index_only:
        for offset, position in offset_index_entries(path):
            out(f"offset: {offset} position: {position}")
    problems = check_offset_index(path)
    for p in problems:
        out(p)
    return not problems


def _dump_time_index(path: Path, args: argparse.Namespace) -> bool:
    if not args.verify_index_only:
        for ts, offset in time_index_entries(path):
            out(f"timestamp: {ts} offset: {offset}")
    problems = check_time_index(path)
    for p in problems:
        out(p)
    return not problems

"""What a Kafka log directory holds, read offline for `rdmalog import` and `rdmalog export`: its
partitions with their offsets, record and batch counts and every batch's CRC-32C checked
(rdmalog/store/verify.py), the consumer groups' committed offsets replayed from
`__consumer_offsets`, and topic configs from an operator's file. Progress goes to stderr."""

from __future__ import annotations

import json
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.groups.schema import OFFSETS_TOPIC, OffsetKey, decode_key, decode_offset_value
from rdmalog.store.log import parse_partition_dir
from rdmalog.store.records import decode_records
from rdmalog.store.verify import PartitionCheck, check_partition, data_bytes, iter_checked_batches
from rdmalog.store.verify import segment_files as _segments

SKIPPED_DIRS = ("__cluster_metadata-0",)


class Progress:
    """A progress bar on stderr (a line per tenth when stderr is not a terminal)."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = max(total, 1), label, 0
        self.tty = sys.stderr.isatty()
        self._shown = -1
        self._last = 0.0

    def advance(self, n: int) -> None:
        self.done += n
        pct = min(100, self.done * 100 // self.total)
        now = time.monotonic()
        if self.tty and (now - self._last > 0.1 or pct == 100):
            self._last = now
            bar = "#" * (pct // 4) + "-" * (25 - pct // 4)
            mib = f"{self.done / 2**20:.1f}/{self.total / 2**20:.1f} MiB"
            sys.stderr.write(f"\r{self.label} [{bar}] {pct:3d}% {mib}")
            sys.stderr.flush()
        elif not self.tty and pct // 10 > self._shown:
            self._shown = pct // 10
            sys.stderr.write(f"{self.label}: {pct}% of {self.total / 2**20:.2f} MiB\n")

    def finish(self) -> None:
        if self.tty:
            self.advance(0)
            sys.stderr.write("\n")


@dataclass
class Inventory:
    """A log directory's partitions (checked) and groups' committed offsets."""

    directory: Path
    partitions: dict[tuple[str, int], PartitionCheck] = field(default_factory=dict)
    groups: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            out.setdefault(topic, []).append(partition)
        return out

    @property
    def invalid_batches(self) -> int:
        return sum(p.invalid_batches for p in self.partitions.values())

    @property
    def problems(self) -> list[str]:
        out = []
        for (topic, p), check in sorted(self.partitions.items()):
            for seg in check.segments:
                if seg.invalid_batches:
                    out.append(
                        f"{topic}-{p}/{seg.path.name}: {len(seg.invalid_batches)} batch(es) fail "
                        f"their CRC (first at byte {seg.invalid_batches[0]})"
                    )
                if seg.trailing_bytes:
                    out.append(f"{topic}-{p}/{seg.path.name}: {seg.trailing_bytes} bytes after "
                               "the last whole batch (a torn write: recovery truncates them)")  # fmt: skip
                if seg.out_of_order:
                    out.append(f"{topic}-{p}/{seg.path.name}: offsets go back at byte "
                               f"{seg.out_of_order[0]}")  # fmt: skip
        return out


def partition_dirs(directory: Path) -> list[tuple[Path, str, int]]:
    """(path, topic, partition) of the partition directories of a log dir."""
    out = []
    for d in sorted(Path(directory).iterdir()):
        if not d.is_dir() or d.name in SKIPPED_DIRS:
            continue
        parsed = parse_partition_dir(d.name)
        if parsed is not None:
            out.append((d, *parsed))
    return out


def take_inventory(directory: Path, label: str = "verifying") -> Inventory:
    """Check every partition of `directory` (progress on stderr); replay __consumer_offsets."""
    inv = Inventory(Path(directory))
    dirs = partition_dirs(directory)
    for d in sorted(Path(directory).iterdir()):
        if d.is_dir() and (d.name in SKIPPED_DIRS or parse_partition_dir(d.name) is None):
            inv.skipped.append(d.name)
    progress = Progress(sum(data_bytes(d) for d, _, _ in dirs), label)
    for d, topic, partition in dirs:
        inv.partitions[(topic, partition)] = check_partition(d, progress.advance)
    progress.finish()
    for d, topic, _ in dirs:
        if topic == OFFSETS_TOPIC:
            _replay_offsets(d, inv.groups)
    inv.groups = {g: o for g, o in sorted(inv.groups.items()) if o}
    return inv


def _replay_offsets(directory: Path, groups: dict[str, dict[tuple[str, int], int]]) -> None:
    """Apply the offset commits (and tombstones) of one __consumer_offsets partition."""
    for path in _segments(directory):
        for item in iter_checked_batches(path):
            if not item.valid or item.batch.is_control:
                continue
            for rec in decode_records(item.batch):
                try:
                    key = decode_key(rec.key or b"")
                except (ValueError, IndexError, struct.error):
                    continue
                if not isinstance(key, OffsetKey):
                    continue
                offsets = groups.setdefault(key.group, {})
                if rec.value is None:
                    offsets.pop((key.topic, key.partition), None)
                else:
                    try:
                        value = decode_offset_value(rec.value)
                    except (ValueError, IndexError, struct.error):
                        continue
                    offsets[(key.topic, key.partition)] = value.offset


_HEADER = re.compile(r"(Dynamic|All) configs for topic (\S+) are:")
_ENTRY = re.compile(r"\s+([^=\s]+)=(.*?) sensitive=(?:true|false) synonyms=\{(.*)\}\s*$")


def read_configs_file(path: Path) -> dict[str, dict[str, str]]:
    """Topic config overrides from a file: JSON `{topic: {key: value}}` (what `rdmalog configs
    describe --json` prints), or the text of `kafka-configs.sh --describe --entity-type topics`
    (with `--all`, only the DYNAMIC_TOPIC_CONFIG entries are overrides)."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        data = json.loads(text)
        return {t: {k: str(v) for k, v in (c or {}).items()} for t, c in data.items()}
    out: dict[str, dict[str, str]] = {}
    topic, all_configs = None, False
    for line in text.splitlines():
        header = _HEADER.search(line)
        if header:
            all_configs, topic = header.group(1) == "All", header.group(2)
            out.setdefault(topic, {})
            continue
        entry = _ENTRY.match(line)
        if topic is None or not entry:
            continue
        key, value, synonyms = entry.groups()
        if all_configs and not synonyms.startswith("DYNAMIC_TOPIC_CONFIG:"):
            continue
        out[topic][key] = value
    return out

"""The pure parts of the operator tools: configs files as Kafka's tool prints them, segment checks
(CRC, zero padding, torn tails), index checks, histograms, and the tools' argument handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import build_parser
from gateway.cli.common import CliError, client_settings, parse_key_values
from gateway.migration.inventory import read_configs_file
from rdmalog.store.records import Record, build_batch
from rdmalog.store.stats import Histogram
from rdmalog.store.verify import check_segment, check_time_index, time_index_entries


def test_configs_file_json_and_kafka_configs_text(tmp_path: Path) -> None:
    as_json = tmp_path / "c.json"
    as_json.write_text('{"orders": {"retention.ms": 1000}, "audit": {}}')
    assert read_configs_file(as_json) == {"orders": {"retention.ms": "1000"}, "audit": {}}
    text = tmp_path / "c.txt"
    text.write_text(
        "Dynamic configs for topic orders are:\n"
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.hours=168}\n"
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup"
        ".policy=compact,delete}\n"
        "All configs for topic audit are:\n"
        "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes="
        "1073741824}\n"
        "  max.message.bytes=2000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message."
        "bytes=2000}\n"
    )
    assert read_configs_file(text) == {
        "orders": {"retention.ms": "1000", "cleanup.policy": "compact,delete"},
        "audit": {"max.message.bytes": "2000"},
    }


def _segment(tmp_path: Path, tail: bytes = b"") -> tuple[Path, bytes]:
    a = build_batch([Record(b"k", b"v" * 10)] * 3, base_offset=0)
    b = build_batch([Record(None, b"w")] * 2, base_offset=3)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(a) + bytes(b) + tail)
    return path, bytes(a)


def test_segment_check_counts_and_padding(tmp_path: Path) -> None:
    path, _ = _segment(tmp_path, b"\0" * 4096)  # a preallocated head's zeros are not an error
    check = check_segment(path)
    assert (check.batches, check.records, check.first_offset, check.next_offset) == (2, 5, 0, 5)
    assert check.ok


def test_segment_check_finds_bad_crc_and_torn_tail(tmp_path: Path) -> None:
    path, first = _segment(tmp_path, b"\x01\x02\x03")
    data = bytearray(path.read_bytes())
    data[len(first) - 1] ^= 0xFF  # the first batch's last byte
    path.write_bytes(bytes(data))
    check = check_segment(path)
    assert check.invalid_batches == [0] and check.trailing_bytes == 3 and not check.ok


def test_time_index_check(tmp_path: Path) -> None:
    path, _ = _segment(tmp_path)
    from rdmalog.store.records import RecordBatch

    ts = RecordBatch(path.read_bytes(), 0).max_timestamp
    index = path.with_suffix(".timeindex")
    index.write_bytes(ts.to_bytes(8, "big") + (2).to_bytes(4, "big"))
    assert time_index_entries(index) == [(ts, 2)] and check_time_index(index) == []
    index.write_bytes(ts.to_bytes(8, "big") + (1).to_bytes(4, "big"))  # not a batch's last offset
    assert check_time_index(index)


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram()
    for ms in (0.05, 0.3, 0.3, 7, 20000):
        h.observe(ms)
    buckets = dict(h.buckets())
    assert buckets["0.1"] == 1 and buckets["0.5"] == 3 and buckets["10"] == 4
    assert buckets["+Inf"] == 5 and h.total == pytest.approx(20007.65)


def test_key_values_and_client_properties() -> None:
    assert parse_key_values(["a=1,b=[x,y]", "c=3"], "--add-config") == {
        "a": "1",
        "b": "x,y",
        "c": "3",
    }
    with pytest.raises(CliError):
        parse_key_values(["novalue"], "--config")
    settings = client_settings(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": 'org...ScramLoginModule required username="u" password="p";',
            "ssl.ca.location": "/ca.pem",
        }
    )
    assert settings == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
        "ssl_cafile": "/ca.pem",
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "--bootstrap-server", "h:1", "describe", "t"],
        ["topics", "describe", "t", "--bootstrap-server", "h:1"],
    ],
)
def test_bootstrap_before_or_after_the_action(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.bootstrap_server == "h:1" and args.topic == "t"


def test_serve_takes_log_options_after_the_subcommand() -> None:
    args = build_parser().parse_args(["serve", "--log-level", "DEBUG", "--log-format", "json"])
    assert (args.log_level, args.log_format) == ("DEBUG", "json")


def test_bench_figures_are_png_files(tmp_path: Path) -> None:
    """bench/plots.py draws without a display; a NaN or zero ratio is left out, not drawn."""
    pytest.importorskip("matplotlib", reason="the bench figures need matplotlib (bench extra)")
    from bench.plots import grouped_bars, ratio_chart

    ratios = tmp_path / "ratios.png"
    ratio_chart(ratios, "B / A", [("produce rec/s", 1.02, 0.9, 1.1), ("consume rec/s", 9.0, 0.1, 12.0),
                                  ("broken", float("nan"), 0.0, 0.0), ("none", 0.0, 0.0, 0.0)])  # fmt: skip
    bars = tmp_path / "bars.png"
    grouped_bars(bars, "rec/s", ["produce", "consume"], {"rdmalog": [3.0, 5.0], "tansu": [1.0, 2.0]},
                 "records/s")  # fmt: skip
    for path in (ratios, bars):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, path


def test_bench_docs_sections_keep_hand_written_subsections(tmp_path: Path) -> None:
    """A bench's `--out` replaces its section's generated part (up to the next `##`/`###`
    heading) and keeps the subsections written by hand; a new section is appended once."""
    from bench.docs_section import replace_section

    md = tmp_path / "perf.md"
    md.write_text("# P\n\n## A\n\nold table\n\n### Notes\n\nkept\n\n## B\n\nother\n")
    replace_section(md, "## A", "new table")
    assert md.read_text() == "# P\n\n## A\n\nnew table\n\n### Notes\n\nkept\n\n## B\n\nother\n"
    replace_section(md, "### Notes", "### Notes\n\nrewritten")
    assert "rewritten\n\n## B" in md.read_text() and "kept" not in md.read_text()
    replace_section(md, "## C", "c")
    replace_section(md, "## C", "c2")
    assert md.read_text().endswith("## B\n\nother\n\n## C\n\nc2\n")
    sub = tmp_path / "sub.md"
    sub.write_text("## Z\n\n### A\n\nx\n")  # '## A' is a whole heading line, not a part of '### A'
    replace_section(sub, "## A", "a")
    assert sub.read_text() == "## Z\n\n### A\n\nx\n\n## A\n\na\n"

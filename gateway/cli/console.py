"""`rdmalog produce` and `rdmalog consume`: Kafka's console producer and consumer.

produce: one record per line of stdin; `--property parse.key=true` with `key.separator` (default a
tab) splits each line into key and value. consume: records as lines on stdout, from the committed
offsets of `--group`, from the start (`--from-beginning`), or from `--partition P --offset O`;
`--property print.key=true,print.offset=true,print.partition=true,print.timestamp=true` adds fields;
stops after `--max-messages` or `--timeout-ms` without a record."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.cli.common import CliError, add_connection_options, connection, parse_key_values

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def register(sub) -> list[argparse.ArgumentParser]:
    produce = sub.add_parser("produce", help="records from stdin lines", description=__doc__)
    add_connection_options(produce, top=True)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, help="default: by key (or spread)")
    produce.add_argument("--property", action="append", default=[], metavar="K=V")
    produce.add_argument("--producer-property", action="append", default=[], metavar="K=V")
    produce.add_argument("--compression-codec", choices=COMPRESSION, default="none")
    produce.add_argument("--request-required-acks", default="-1", choices=["-1", "0", "1", "all"])
    produce.set_defaults(func=run_produce)

    consume = sub.add_parser("consume", help="records to stdout lines", description=__doc__)
    add_connection_options(consume, top=True)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--group", help="consume as this group and commit its offsets")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", help="with --partition: earliest, latest or an offset")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int, help="exit when no record came for this long")
    consume.add_argument("--property", action="append", default=[], metavar="K=V")
    consume.add_argument("--consumer-property", action="append", default=[], metavar="K=V")
    consume.add_argument(
        "--isolation-level", choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
    )  # fmt: skip
    consume.set_defaults(func=run_consume)
    return [produce, consume]


def _client_properties(items: list[str], flag: str) -> dict[str, Any]:
    """`--producer-property`/`--consumer-property` (Kafka's names) as kafka-python settings."""
    out: dict[str, Any] = {}
    for key, value in parse_key_values(items, flag).items():
        name = key.replace(".", "_")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _escaped(text: str) -> str:
    return text.encode().decode("unicode_escape")


def run_produce(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer

    props = parse_key_values(args.property, "--property")
    parse_key = props.get("parse.key", "false").lower() == "true"
    separator = _escaped(props.get("key.separator", "\t"))
    acks = "all" if args.request_required_acks in ("-1", "all") else int(args.request_required_acks)
    settings = {
        **connection(args, "rdmalog-console-producer"),
        "acks": acks,
        "compression_type": None if args.compression_codec == "none" else args.compression_codec,
        **_client_properties(args.producer_property, "--producer-property"),
    }
    producer = KafkaProducer(**settings)
    failures: list[BaseException] = []
    sent = 0
    try:
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key = None
            if parse_key:
                key_text, sep, value_text = line.decode().partition(separator)
                if not sep:
                    raise CliError(f"no key separator {separator!r} in line {sent + 1}")
                key, line = key_text.encode(), value_text.encode()
            future = producer.send(args.topic, value=line, key=key, partition=args.partition)
            future.add_errback(failures.append)
            sent += 1
            if failures:
                break
        producer.flush()
    finally:
        producer.close()
    if failures:
        from gateway.cli.common import describe_error

        raise CliError(f"sending to {args.topic}: {describe_error(failures[0])}")
    return 0


def _field(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", "replace")


def _format(record: Any, props: dict[str, str]) -> str:
    sep = _escaped(props.get("key.separator", "\t"))
    on = {k: props.get(f"print.{k}", "false").lower() == "true" for k in _PRINTED}
    parts = []
    if on["timestamp"]:
        kind = "LogAppendTime" if record.timestamp_type == 1 else "CreateTime"
        parts.append(f"{kind}:{record.timestamp}")
    if on["partition"]:
        parts.append(f"Partition:{record.partition}")
    if on["offset"]:
        parts.append(f"Offset:{record.offset}")
    if on["headers"]:
        headers = ",".join(f"{k}:{_field(v)}" for k, v in record.headers or [])
        parts.append(headers or "NO_HEADERS")
    if on["key"]:
        parts.append(_field(record.key))
    if props.get("print.value", "true").lower() == "true":
        parts.append(_field(record.value))
    return sep.join(parts)


_PRINTED = ("timestamp", "partition", "offset", "headers", "key")


def run_consume(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer, TopicPartition

    props = parse_key_values(args.property, "--property")
    settings = {
        **connection(args, "rdmalog-console-consumer"),
        "group_id": args.group,
        "enable_auto_commit": args.group is not None,
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
        "isolation_level": args.isolation_level,
        **_client_properties(args.consumer_property, "--consumer-property"),
    }
    if args.timeout_ms is not None:
        settings["consumer_timeout_ms"] = args.timeout_ms
    consumer = KafkaConsumer(**settings)
    try:
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            consumer.assign([tp])
            _seek(consumer, tp, args.offset, args.from_beginning)
        elif args.offset is not None:
            raise CliError("--offset needs --partition", code=2)
        elif args.group is not None:
            consumer.subscribe([args.topic])
        else:
            parts = consumer.partitions_for_topic(args.topic)
            if not parts:
                raise CliError(f"Topic '{args.topic}' does not exist.")
            assigned = [TopicPartition(args.topic, p) for p in sorted(parts)]
            consumer.assign(assigned)
            if args.from_beginning:
                consumer.seek_to_beginning(*assigned)
            else:
                consumer.seek_to_end(*assigned)
        count = 0
        for record in consumer:
            sys.stdout.write(_format(record, props) + "\n")
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
        sys.stdout.flush()
        if args.group is not None:
            consumer.commit()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    finally:
        consumer.close(autocommit=False)
    return 0


def _seek(consumer: Any, tp: Any, offset: str | None, from_beginning: bool) -> None:
    if offset is None:
        offset = "earliest" if from_beginning else "latest"
    if offset == "earliest":
        consumer.seek_to_beginning(tp)
    elif offset == "latest":
        consumer.seek_to_end(tp)
    else:
        try:
            consumer.seek(tp, int(offset))
        except ValueError:
            raise CliError(
                f"--offset expects earliest, latest or a number, got {offset!r}", 2
            ) from None

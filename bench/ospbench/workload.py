"""OSPBench-style workload: NDW road-sensor flow and speed measurements per lane, as JSON.

Two topics, `ndwflow` and `ndwspeed` (created with message.timestamp.type=LogAppendTime). Each
observation of one sensor lane yields one flow and one speed message with the same key (the
measurement id) and the lane in the body, like Klarrio's generator. `timestamp` in the JSON is the
generation time in epoch milliseconds (float, sub-ms), taken just before the message is handed to
the producer.

Patterns (the rate counts messages over both topics):

- `constant`: `--rate` messages/s, sent in 10 ms ticks.
- `burst`: the same constant stream plus, every 10 s, a burst of `--burst-size` messages
  (default 10 x rate: ten seconds' worth) sent as fast as the producer takes them.

    python bench/ospbench/workload.py --bootstrap 127.0.0.1:9092 --pattern burst --rate 400 \
        --duration 30 [--producer kafka|native --control 127.0.0.1:P --transport shm]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Iterator

FLOW_TOPIC = "ndwflow"
SPEED_TOPIC = "ndwspeed"
TOPICS = (FLOW_TOPIC, SPEED_TOPIC)
BURST_PERIOD_S = 10.0
TICK_S = 0.01
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


class NativeUnavailable(RuntimeError):
    """The native producer (rdmalog.rdma.Producer) cannot be used here."""


def sensors(n: int, seed: int = 7) -> list[dict]:
    """`n` sensor lanes with fixed positions, ids shaped like NDW's measurement site ids."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        lanes = rng.randint(1, 3)
        site = f"RWS01_MONIBAS_{i:04d}hrr{rng.randint(1000, 9999)}ra"
        lat, lon = round(51.3 + rng.random() * 0.2, 5), round(5.38 + rng.random() * 0.2, 5)
        for lane in range(1, lanes + 1):
            out.append({"id": site, "lane": f"lane{lane}", "lat": lat, "long": lon, "n": lanes})
    return out[:n]


def messages(lanes: list[dict], seed: int = 11) -> Iterator[tuple[str, bytes, Callable]]:
    """Endless (topic, key, make_value) triples: flow then speed for each lane in turn."""
    rng = random.Random(seed)
    while True:
        for s in lanes:
            key = s["id"].encode()
            flow = rng.choice(range(60, 2460, 60))
            speed = round(rng.uniform(60, 130), 2)
            base = {"lat": s["lat"], "long": s["long"], "lane": s["lane"]}

            def make_flow(base=base, flow=flow, n=s["n"]) -> bytes:
                body = {**base, "flow": flow, "period": 60, "accuracy": 100}
                body |= {"timestamp": time.time() * 1000.0, "num_lanes": n}
                return json.dumps(body).encode()

            def make_speed(base=base, speed=speed, n=s["n"]) -> bytes:
                body = {**base, "speed": speed, "accuracy": 100}
                body |= {"timestamp": time.time() * 1000.0, "num_lanes": n}
                return json.dumps(body).encode()

            yield FLOW_TOPIC, key, make_flow
            yield SPEED_TOPIC, key, make_speed


def create_topics(bootstrap: str, partitions: int = 1) -> None:
    """Create `ndwflow` and `ndwspeed` with LogAppendTime (existing topics are kept)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, partitions, 1, config=dict(TOPIC_CONFIG)) for t in TOPICS]
    for topic, fut in admin.create_topics(new, request_timeout=15).items():
        try:
            fut.result(20)
        except Exception as exc:  # noqa: BLE001
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"cannot create topic {topic}: {exc}") from exc


class KafkaSender:
    """confluent-kafka producer, linger.ms=0 so a message leaves at once."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.p = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "enable.idempotence": False}
        )
        self.errors = 0

    def _cb(self, err, _msg) -> None:
        if err is not None:
            self.errors += 1

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                self.p.produce(topic, value, key, partition=0, on_delivery=self._cb)
                break
            except BufferError:
                self.p.poll(0.01)
        self.p.poll(0)

    def tick(self) -> None:
        self.p.poll(0)

    def close(self) -> None:
        self.p.flush(30)


class NativeSender:
    """rdmalog.rdma.Producer (exclusive mode, one record per batch)."""

    def __init__(self, control: str | None, transport: str) -> None:
        if not control:
            raise NativeUnavailable("no RDMA control address (the broker runs no RDMA service)")
        try:
            from rdmalog.rdma.client.producer import Producer
        except ImportError as exc:
            raise NativeUnavailable(f"rdmalog.rdma.Producer is not importable: {exc}") from exc
        self.p = Producer(control, transport=transport, timeout=30.0)
        self.pending: list = []
        self.errors = 0

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.pending.append(self.p.send(topic, 0, value, key=key))

    def tick(self) -> None:
        if len(self.pending) >= 32:  # the broker commits on arrival; acks only bound the window
            self.p.flush(30)
            self.errors += sum(1 for d in self.pending if d.error is not None)
            self.pending = []

    def close(self) -> None:
        self.p.flush(30)
        self.errors += sum(1 for d in self.pending if d.error is not None)
        self.p.close()


def run(
    sender,
    pattern: str,
    rate: float,
    duration: float,
    burst_size: int | None = None,
    n_lanes: int = 40,
) -> dict:
    """Publish for `duration` seconds; return counts."""
    if pattern not in ("constant", "burst"):
        raise ValueError(f"unknown pattern {pattern!r}")
    burst = burst_size if burst_size is not None else int(rate * BURST_PERIOD_S)
    gen = messages(sensors(n_lanes))
    start = time.monotonic()
    sent = bursts = 0
    next_burst = start + BURST_PERIOD_S / 2  # first burst mid-way into the first period
    tick = 0
    while True:
        now = time.monotonic()
        if now - start >= duration:
            break
        if pattern == "burst" and now >= next_burst:
            for _ in range(burst):
                topic, key, make = next(gen)
                sender.send(topic, key, make())
            sent += burst
            bursts += 1
            next_burst += BURST_PERIOD_S
        due = int((now - start) * rate)
        while sent - bursts * burst < due:
            topic, key, make = next(gen)
            sender.send(topic, key, make())
            sent += 1
        sender.tick()
        tick += 1
        delay = start + tick * TICK_S - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    sender.close()
    return {"sent": sent, "bursts": bursts, "errors": sender.errors, "seconds": duration}


def main(argv: list[str] | None = None) -> int:
    """Command line: create topics, publish, print one JSON line of counts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--pattern", choices=["constant", "burst"], default="constant")
    ap.add_argument("--rate", type=float, default=400.0, help="messages/s over both topics")
    ap.add_argument("--burst-size", type=int, default=None, help="default: 10 s worth (10 x rate)")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--producer", choices=["kafka", "native"], default="kafka")
    ap.add_argument("--control", help="RDMA control address, for --producer native")
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--no-create", action="store_true", help="topics exist already")
    args = ap.parse_args(argv)
    if not args.no_create:
        create_topics(args.bootstrap)
    if args.producer == "native":
        try:
            sender = NativeSender(args.control, args.transport)
        except NativeUnavailable as exc:
            print(json.dumps({"skipped": "native producer", "reason": str(exc)}), flush=True)
            return 3
    else:
        sender = KafkaSender(args.bootstrap)
    result = run(sender, args.pattern, args.rate, args.duration, args.burst_size)
    print(json.dumps({"pattern": args.pattern, "rate": args.rate, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

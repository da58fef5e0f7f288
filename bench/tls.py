"""TLS against plaintext on one rdmalog broker, produce and fetch, in one run.

One broker serves a PLAINTEXT and an SSL listener (test certificates made at start with
`cryptography`); confluent-kafka produces N records (acks=1) and then consumes them from offset 0
over each listener, alternating PLAINTEXT, SSL, PLAINTEXT, SSL, ... so machine drift cancels. Broker
CPU seconds per step come from /proc. Fetch over TLS cannot use sendfile (the broker encrypts in user
space): the numbers show what that costs. Usage:

    python bench/tls.py [--rounds 3] [--mb 100] [--size 100 1000 10000] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from brokers import RDMALOG_BIN, free_ports, port_open, proc_cpu_seconds  # noqa: E402
from docs_section import replace_section  # noqa: E402

SECTION = "## TLS against plaintext (Kafka protocol)"
MB = 1 << 20


def start_broker(tmp: Path) -> tuple[subprocess.Popen, dict[str, str], Path]:
    from tests.integration.security.certs import TestCA

    ca = TestCA(tmp / "pki")
    server = ca.issue("broker", server=True)
    ports = dict(zip(("PLAINTEXT", "SSL"), free_ports(2), strict=True))
    overrides = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server.keystore),
        "log.segment.bytes": str(256 * MB),
    }
    cmd = [str(RDMALOG_BIN), "--log-level", "WARNING", "serve", "--data-dir", str(tmp / "data")]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / "broker.log", "wb"))
    deadline = time.monotonic() + 30
    while not all(port_open(p) for p in ports.values()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"broker did not start: {(tmp / 'broker.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, {n: f"127.0.0.1:{p}" for n, p in ports.items()}, ca.pem


def client_settings(listener: str, bootstrap: str, ca: Path) -> dict:
    out = {"bootstrap.servers": bootstrap}
    if listener == "SSL":
        out.update({"security.protocol": "SSL", "ssl.ca.location": str(ca)})
    return out


def produce(settings: dict, topic: str, records: int, size: int, pid: int) -> dict:
    from confluent_kafka import Producer

    producer = Producer({**settings, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    value = b"x" * size
    producer.produce(topic, value)  # connected and metadata known before the clock starts
    producer.flush(30)
    cpu0, t0 = proc_cpu_seconds(pid), time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    seconds = time.monotonic() - t0
    return {"mb_s": records * size / MB / seconds, "cpu_s": proc_cpu_seconds(pid) - cpu0}


def consume(settings: dict, topic: str, records: int, size: int, pid: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 * MB, "max.partition.fetch.bytes": 10 * MB})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 1)])
    got = 0
    cpu0, t0 = proc_cpu_seconds(pid), time.monotonic()
    deadline = t0 + 300
    while got < records and time.monotonic() < deadline:
        for m in consumer.consume(10000, 1.0):
            if not m.error():
                got += 1
    seconds = time.monotonic() - t0
    consumer.close()
    assert got >= records, f"consumed {got}/{records}"
    return {"mb_s": records * size / MB / seconds, "cpu_s": proc_cpu_seconds(pid) - cpu0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=int, default=100, help="MiB of record values per step")
    ap.add_argument("--size", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    results: dict[tuple[int, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="rdmalog-tls-bench-") as tmp:
        proc, listeners, ca = start_broker(Path(tmp))
        try:
            admin = AdminClient({"bootstrap.servers": listeners["PLAINTEXT"]})
            for size in args.size:
                records = args.mb * MB // size
                for r in range(args.rounds):
                    for listener in ("PLAINTEXT", "SSL"):  # A B A B: drift cancels
                        topic = f"tls-{size}-{listener.lower()}-{r}"
                        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                        settings = client_settings(listener, listeners[listener], ca)
                        p = produce(settings, topic, records, size, proc.pid)
                        c = consume(settings, topic, records, size, proc.pid)
                        for kind, res in (("produce", p), ("fetch", c)):
                            res["cpu_per_mb"] = res["cpu_s"] / (records * size / MB)
                            results.setdefault((size, kind, listener), []).append(res)
                        print(size, listener, r, p, c, flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    body = report(results, args)
    print(body)
    if args.out:
        replace_section(args.out, SECTION, body)


def report(results: dict, args: argparse.Namespace) -> str:
    import ssl

    lines = [
        SECTION,
        "",
        f"`python bench/tls.py --rounds {args.rounds} --mb {args.mb}` "
        f"({time.strftime('%Y-%m-%d')}; {ssl.OPENSSL_VERSION}, Python "
        f"{sys.version.split()[0]}; one broker, PLAINTEXT and SSL listeners alternating A B A B, "
        "confluent-kafka acks=1 then a consumer from offset 0; medians of the rounds; the "
        "machine (2 cores) was shared with other engineers' work).",
        "",
        "| record size | step | PLAINTEXT MB/s | SSL MB/s | SSL / PLAINTEXT | broker CPU s/MB plain | broker CPU s/MB SSL |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in args.size:
        for kind in ("produce", "fetch"):
            plain = results.get((size, kind, "PLAINTEXT"), [])
            tls = results.get((size, kind, "SSL"), [])
            if not plain or not tls:
                continue
            pm = statistics.median(r["mb_s"] for r in plain)
            tm = statistics.median(r["mb_s"] for r in tls)
            pc = statistics.median(r["cpu_per_mb"] for r in plain)
            tc = statistics.median(r["cpu_per_mb"] for r in tls)
            lines.append(
                f"| {size} B | {kind} | {pm:.1f} | {tm:.1f} | {tm / pm:.2f} | {pc:.4f} | {tc:.4f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

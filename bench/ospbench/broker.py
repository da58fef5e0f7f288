"""A benchmark broker: the Kafka gateway and, when available, the RDMA service over one store.

`rdmalog serve` starts only the gateway, so the native (`shm`/`tcp`) Spark source needs this
process. It prints one JSON line {"bootstrap": "127.0.0.1:P", "control": "127.0.0.1:Q" | null,
"rdma_error": str | null} and serves until stdin closes or SIGTERM.

    python bench/ospbench/broker.py --data-dir /tmp/d [--transport shm|tcp|none]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    """Run gateway + RDMA service until stdin closes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp", "none"])
    args = ap.parse_args(argv)

    from gateway import server
    from rdmalog.config import BrokerConfig

    config = BrokerConfig.from_sources(
        None,
        {
            "log.dirs": args.data_dir,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "offsets.topic.num.partitions": "1",
            "auto.create.topics.enable": "false",
        },
    )
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict = {}

    def run_loop() -> None:
        asyncio.set_event_loop(loop)
        holder["gw"] = loop.run_until_complete(server.start(config, ("127.0.0.1", 0)))
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run_loop, name="gateway", daemon=True)
    thread.start()
    if not started.wait(60):
        print(json.dumps({"error": "gateway did not start"}), flush=True)
        return 1
    gw = holder["gw"]
    rdma, control, rdma_error = None, None, None
    if args.transport != "none":
        try:
            from rdmalog.rdma.service import RdmaService

            rdma = RdmaService(gw.broker.store, args.transport).start()
            control = rdma.control_address
        except Exception as exc:  # noqa: BLE001 - reported to the runner, which skips native
            rdma_error = f"{type(exc).__name__}: {exc}"
    info = {
        "bootstrap": f"127.0.0.1:{gw.address[1]}",
        "control": control,
        "rdma_error": rdma_error,
    }
    print(json.dumps(info), flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    if rdma is not None:
        rdma.stop()
    asyncio.run_coroutine_threadsafe(server.shutdown(gw), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Instructions the native clients execute per operation on shm, counted by callgrind: a measure
the host's load does not change (wall-clock latencies on 2 shared cores move 2x with it).

For the clients' counts a real `rdmalog serve` runs outside valgrind; the client process runs
under it twice per metric, with a short and a long run of the operation, and the difference of the
two totals divided by the difference of the counts is the operation's cost (imports, connection
set-up and close cancel out). For the broker's, `rdmalog serve` runs under callgrind and the
client outside. A wait spent spinning for the other side (`ring_wait`; before it `wait_change`)
is left out. Prints JSON lines as native.py:

  empty_poll_instructions   Consumer.poll(0) with nothing new
  consume_instructions      Consumer.poll(0) returning one preloaded 1 KiB record (its own batch),
                            and reading its value
  produce_instructions      Producer.produce() of one 100-byte record, send to acknowledgement
  broker_produce_instructions   the broker's side of that produce ("mode": exclusive, shared,
                            idempotent): noticing the write, validating and committing it,
                            acknowledging it; `rdmalog serve` itself runs under callgrind

    python bench/instructions.py            # about two minutes; needs valgrind
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from native import REC, REC_1K, Broker, settle

from rdmalog.store.records import build_batch

# The C spins of a completion wait (time, not work): `ring_wait` since the broker-side produce
# work (before: `wait_change`; both are left out, so B's script measures A's commit alike).
SPINS = ("wait_change", "ring_wait")


def client(addr: str, op: str, n: int, fetch: int) -> None:
    """The measured process: `n` operations of `op` after the same set-up for every n."""
    from rdmalog.rdma import Consumer, Producer

    if op == "produce":
        p = Producer(addr, "shm")
        for _ in range(20):
            p.produce("lat", 0, REC)
        for _ in range(n):
            p.produce("lat", 0, REC)
        p.close()
        return
    c = Consumer(addr, "shm", fetch_size=fetch)  # one batch per READ: one record per poll
    c.assign([("klat", 0)], offset=0)
    while not c.poll(0.5):
        pass
    if op == "consume":
        for _ in range(n):
            assert len(c.poll(0)[0].value) == 1024  # the value read (lazy records make it then)
    else:
        for _ in range(20):
            c.poll(0)
        for _ in range(n):
            c.poll(0)
    c.close()


def count(addr: str, op: str, n: int, fetch: int, out: str) -> int:
    """Instructions of one client run under callgrind, less those spent spinning."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         __file__, "--client", addr, op, str(n), str(fetch)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return work(out)


def work(out: str) -> int:
    """The instructions a callgrind output file counts, less those spent spinning."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    total, spins = 0, {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) ", line)
        if not m:
            continue
        value = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = value
        else:
            for name in SPINS:
                if f":{name} [" in line:  # (a function can be listed under two file names)
                    spins[name] = max(spins.get(name, 0), value)
    return total - sum(spins.values())


def client_counts(d: str, n: int) -> None:
    """The clients' instructions per empty poll, consume and produce (see the module docstring)."""
    from rdmalog.rdma import Producer

    fetch = len(build_batch([(None, REC_1K)]))
    b = Broker("shm", os.path.join(d, "data"))
    try:
        p = Producer(b.control, "shm")
        for _ in range(3 * n + 1):  # the consume runs' records, one batch each
            p.produce("klat", 0, REC_1K)
        p.close()
        settle(b.pid)
        for op, short in (("empty_poll", 10 * n), ("consume", n), ("produce", n // 4)):
            counts = [
                count(b.control, op, k, fetch, os.path.join(d, f"{op}-{k}.cg"))
                for k in (short, 3 * short)
            ]
            per_op = (counts[1] - counts[0]) / (2 * short)
            rec = {"transport": "shm", "metric": f"{op}_instructions", "value": round(per_op),
                   "unit": "instr", "runs": [short, 3 * short]}  # fmt: skip
            print(json.dumps(rec), flush=True)
    finally:
        b.stop()


def broker_counts(d: str, n: int) -> None:
    """The broker's instructions per produce: `rdmalog serve` runs under callgrind (its startup
    is not counted: the count is dumped before and after a short and a long run of produces,
    and the difference of the two windows is divided by the difference of their counts). What
    an idle broker executes meanwhile (its 10 ms tick, other threads' timers: ~2M instructions
    per second under valgrind, 1-2% of the count) is measured first and taken off."""
    from rdmalog.rdma import Producer

    out = os.path.join(d, "broker.cg")
    vg = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
    b = Broker("shm", os.path.join(d, "broker-data"), prefix=vg, start_s=300)
    dumps = 0

    def dump() -> str:
        nonlocal dumps
        subprocess.run(["callgrind_control", "-d", str(b.pid)], check=True, capture_output=True)
        dumps += 1
        return f"{out}.{dumps}"

    try:
        time.sleep(1)
        settle(b.pid, limit=60, cpu_s=0.05)
        dump()
        t0 = time.perf_counter()
        time.sleep(2)
        idle_rate = work(dump()) / (time.perf_counter() - t0)  # instructions per second
        for mode in ("exclusive", "shared", "idempotent"):
            idem = mode == "idempotent"
            p = Producer(
                b.control, "shm", mode="exclusive" if idem else mode, idempotent=idem, timeout=60
            )
            topic = {"exclusive": "lat", "shared": "tput", "idempotent": "idem"}[mode]
            for _ in range(20):
                p.produce(topic, 0, REC)
            time.sleep(1)
            settle(b.pid, limit=60, cpu_s=0.05)  # the grant's head made resident meanwhile
            dump()
            windows = []
            for k in (n, 3 * n):
                t0 = time.perf_counter()
                for _ in range(k):
                    p.produce(topic, 0, REC)
                windows.append(work(dump()) - idle_rate * (time.perf_counter() - t0))
            p.close()
            rec = {"transport": "shm", "metric": "broker_produce_instructions", "mode": mode,
                   "value": round((windows[1] - windows[0]) / (2 * n)), "unit": "instr",
                   "runs": [n, 3 * n]}  # fmt: skip
            print(json.dumps(rec), flush=True)
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="operations in the short run (long: 3x)")
    ap.add_argument("--only", choices=["clients", "broker"], help="one side's counts only")
    ap.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        addr, op, n, fetch = args.client
        client(addr, op, int(n), int(fetch))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    n = args.n
    with tempfile.TemporaryDirectory(prefix="rdmalog-instr-") as d:
        if args.only != "broker":
            client_counts(d, n)
        if args.only != "clients":
            broker_counts(d, max(n // 4, 50))


if __name__ == "__main__":
    main()

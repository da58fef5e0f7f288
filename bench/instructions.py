"""Instructions the native clients execute per operation on shm, counted by callgrind: a measure
the host's load does not change (wall-clock latencies on 2 shared cores move 2x with it).

A real `rdmalog serve` runs outside valgrind; the client process runs under it twice per metric,
with a short and a long run of the operation, and the difference of the two totals divided by the
difference of the counts is the operation's cost (imports, connection set-up and close cancel
out). The client process's instructions only: the broker's are not counted, and a wait spent
spinning for the broker's answer (`wait_change`) is left out. Prints JSON lines as native.py:

  empty_poll_instructions   Consumer.poll(0) with nothing new
  consume_instructions      Consumer.poll(0) returning one preloaded 1 KiB record (its own batch)
  produce_instructions      Producer.produce() of one 100-byte record, send to acknowledgement

    python bench/instructions.py            # about a minute; needs valgrind
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

from native import REC, REC_1K, Broker, settle

from rdmalog.store.records import build_batch

SPIN = "wait_change"  # the C spin of a completion wait: time, not work


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
            assert len(c.poll(0)) == 1
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
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    total = spin = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) ", line)
        if not m:
            continue
        value = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = value
        elif f":{SPIN} [" in line:
            spin = max(spin, value)
    return total - spin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="operations in the short run (long: 3x)")
    ap.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        addr, op, n, fetch = args.client
        client(addr, op, int(n), int(fetch))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    n = args.n
    fetch = len(build_batch([(None, REC_1K)]))
    with tempfile.TemporaryDirectory(prefix="rdmalog-instr-") as d:  # noqa: SIM117
        b = Broker("shm", os.path.join(d, "data"))
        try:
            from rdmalog.rdma import Producer

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


if __name__ == "__main__":
    main()

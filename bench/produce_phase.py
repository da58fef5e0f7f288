"""Where a native produce bandwidth phase's time goes: faults, CPU and run-queue waits per thread.

    python bench/produce_phase.py --rounds 3            # shm, 256 MiB of 64 KiB batches per phase
    PRODUCE_PHASE_PERF=/tmp/p python bench/produce_phase.py   # + `perf record` of both sides
    PRODUCE_PHASE_AFFINITY=split|same ...               # pin client and broker (experiment)

One `rdmalog serve` (shm), a topic per round like bench/native.py's (1 GiB preallocated heads).
Each round measures, one after the other: bench/native.py's `resident_file_write_gib_s` (64 MiB
into a preallocated file another mapping made resident), the same into 256 MiB (the phase's
size) and with large folios (as a grant asks for them), then one produce phase as native.py's
`produce_gib_s` (128 registered batches sent in turn, granted and settled first). For the phase
it prints per thread that ran (client and broker): minor faults, ms on a CPU, ms runnable but
waiting for one (schedstat), voluntary and involuntary context switches; so a slow phase says
whether the producer faulted, slept or waited for a core. Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from native import Broker, file_write_gib_s, registered_batches, settle

TCK = os.sysconf("SC_CLK_TCK")
PERF_DIR = os.environ.get("PRODUCE_PHASE_PERF")  # a directory: `perf record` both sides per phase
# "split": this process on CPU 0, every broker thread on CPU 1; "same": both on CPU 0 (an
# experiment on how the two busy pollers share the cores; measurement only)
AFFINITY = os.environ.get("PRODUCE_PHASE_AFFINITY")


def pin(broker_pid: int) -> None:
    if AFFINITY not in ("split", "same"):
        return
    os.sched_setaffinity(0, {0})
    for t in os.listdir(f"/proc/{broker_pid}/task"):
        os.sched_setaffinity(int(t), {1 if AFFINITY == "split" else 0})


def stat_of(path: str) -> tuple[str, int, float]:
    """(comm, minflt, cpu seconds) from a /proc stat file."""
    raw = Path(path).read_text()
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    f = raw.rsplit(")", 1)[1].split()
    return comm, int(f[7]), (int(f[11]) + int(f[12])) / TCK


def threads(pid: int) -> dict[str, tuple[int, ...]]:
    """tid -> (minflt, on-CPU ns, runnable-but-waiting ns, voluntary, involuntary switches)."""
    out: dict[str, tuple[int, ...]] = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{t}"
        try:
            _, flt, _ = stat_of(f"{base}/stat")
            run, wait, _ = map(int, Path(f"{base}/schedstat").read_text().split())
            st = Path(f"{base}/status").read_text()
        except OSError:
            continue
        vol = int(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", st, re.M).group(1))
        inv = int(re.search(r"^nonvoluntary_ctxt_switches:\s*(\d+)", st, re.M).group(1))
        out[t] = (flt, run, wait, vol, inv)
    return out


def delta(after: dict, before: dict) -> dict:
    """Per thread that ran: minflt, on-CPU ms, runnable-waiting ms, voluntary, involuntary."""
    out = {}
    for k, v in after.items():
        b = before.get(k, (0, 0, 0, 0, 0))
        d = [x - y for x, y in zip(v, b, strict=True)]
        if d[1] > 1_000_000:
            out[k] = [d[0], round(d[1] / 1e6, 1), round(d[2] / 1e6, 1), d[3], d[4]]
    return out


def phase(b: Broker, topic: str, total: int) -> dict:
    from rdmalog.rdma import Producer

    p = Producer(b.control, "shm")
    batches = registered_batches(p)
    size = batches[0].length
    p.produce(topic, 0, b"start")
    settle(b.pid)
    k = total // size
    perf = []
    if PERF_DIR:  # profile both sides over the phase (measurement only)
        for who, pid in (("client", os.getpid()), ("broker", b.pid)):
            out = os.path.join(PERF_DIR, f"{who}-{topic}.data")
            cmd = ["perf", "record", "-q", "-F", "2999", "-g", "-p", str(pid), "-o", out]
            perf.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
    c0, t0b = threads(os.getpid()), threads(b.pid)
    t0 = time.perf_counter()
    for i in range(k):
        p.send_batch(topic, 0, batches[i % len(batches)])
    p.flush(120)
    dt = time.perf_counter() - t0
    c1, t1b = threads(os.getpid()), threads(b.pid)
    for pr in perf:
        pr.send_signal(signal.SIGINT)
        pr.wait(30)
    p.close()
    return {
        "gib_s": round(k * size / dt / 2**30, 3),
        "wall_s": round(dt, 3),
        "client": delta(c1, c0),
        "broker": delta(t1b, t0b),
        "batches": k,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--data-root")
    args = ap.parse_args()
    root = args.data_root
    with tempfile.TemporaryDirectory(prefix="rdmalog-bench-", dir=root) as d:
        b = Broker("shm", os.path.join(d, "data"))
        try:
            pin(b.pid)
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            names = [f"bw{i}" for i in range(args.rounds)]
            cfg = {"segment.bytes": str(1 << 30), "preallocate": "true"}
            for f in admin.create_topics([NewTopic(t, 1, 1, config=cfg) for t in names]).values():
                f.result(30)
            for t in names:
                row = {"load": os.getloadavg()[0], "affinity": AFFINITY}
                row["resident_64m"] = round(file_write_gib_s(root, 64 << 20, True), 3)
                row["resident_phase_size"] = round(file_write_gib_s(root, args.mib << 20, True), 3)
                row["resident_huge_64m"] = round(file_write_gib_s(root, 64 << 20, True, True), 3)
                row["produce"] = phase(b, t, args.mib << 20)
                row["ratio"] = round(row["produce"]["gib_s"] / row["resident_64m"], 3)
                print(json.dumps(row), flush=True)
        finally:
            b.stop()


if __name__ == "__main__":
    main()

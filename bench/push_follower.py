"""Instructions a push-replication follower's completion thread executes per pushed write
(noticing the leader's WRITE_WITH_IMM, validating and committing it, acknowledging it), counted
by callgrind: a measure the host's load does not change.

One process holds compat_tests/push_pair.py's in-process leader and follower on shm; the leader
appends one small batch at a time and waits for its acknowledgement. The process runs under
callgrind (`--separate-threads=yes`) twice, with a short and a long run of writes; the follower's
completion thread (`rdma-cq`) is counted alone, and the
difference of its two totals divided by the difference of the counts is the cost of one pushed
write (start-up and close cancel out). Its busy-poll for the next write (`ring_wait`) is left
out, as bench/instructions.py does. Prints one JSON line:

  follower_push_instructions   the follower's completion thread, per pushed write

    python bench/push_follower.py            # about a minute; needs valgrind
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # compat_tests

from instructions import work  # noqa: E402

# The follower's completion thread is the one thread besides the main one (whose appends validate
# with `validate_client`) that calls `_records.validate`: the commit of a pushed write.
FOLLOWER_CALLS = re.compile(r"^c?fn=\(\d+\) validate$", re.M)
VALUE = b"v" * 100


def drive(d: str, n: int) -> None:
    """The measured process: n pushed writes after the same set-up for every n."""
    from compat_tests.push_pair import Follower, Leader
    from rdmalog.rdma.transport.shm import ShmCQ

    # Steadier counts: between writes the follower's completion thread busy-polls (`ring_wait`,
    # not counted) for up to a second rather than sleeping on its doorbell or waking every 20 ms
    # with nothing to do (valgrind's slow leader would make it do either, as often as the host's
    # load says), and no cyclic GC pass lands on it by chance. (Patched before the service starts:
    # its loop binds `wait` then.)
    follower_cq = []
    wait = ShmCQ.wait

    def steady_wait(cq, timeout, max_entries=16):
        return wait(cq, 1.0 if cq in follower_cq else timeout, max_entries)

    ShmCQ.wait = steady_wait
    follower = Follower(Path(d) / "follower", "shm")
    follower.svc.recv_cq.spin_ns = 10**9
    follower_cq.append(follower.svc.recv_cq)
    leader = Leader(Path(d) / "leader", follower, "shm")
    gc.disable()
    try:
        for _ in range(20 + n):  # 20 to warm up, then the measured ones
            end = leader.append(VALUE)
            leader.wait("ack", lambda end=end: leader.acked >= end)
    finally:
        leader.close()
        follower.close()


def count(d: str, n: int) -> int:
    """The follower completion thread's instructions in one run of n writes."""
    out = os.path.join(d, f"push-{n}.cg")
    with tempfile.TemporaryDirectory(dir=d) as data:
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes",
             f"--callgrind-out-file={out}", sys.executable, __file__, "--drive", data, str(n)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    (path,) = [
        p
        for p in sorted(glob.glob(f"{out}-*"))[1:]
        if FOLLOWER_CALLS.search(Path(p).read_text(errors="replace"))
    ]
    return work(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="writes in the short run (long: 3x)")
    ap.add_argument("--drive", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        drive(args.drive[0], int(args.drive[1]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="rdmalog-pushf-") as d:
        counts = [count(d, k) for k in (args.n, 3 * args.n)]
    rec = {"transport": "shm", "metric": "follower_push_instructions",
           "value": round((counts[1] - counts[0]) / (2 * args.n)), "unit": "instr",
           "runs": [args.n, 3 * args.n]}  # fmt: skip
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()

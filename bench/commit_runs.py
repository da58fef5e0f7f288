"""The broker's in-place commit per write, at the store level: a run of writes committed as one
(`PartitionLog.commit_run`, what the RDMA service does with writes that wait together) against
the run path before it (`validate_written`, then `commit_written(infos=)`: the general path) and
against one by one (`commit_written`). Batches are copied into the head's mapping, made resident
for reading first as a grant makes it; only the commits are timed. Rounds interleave the modes.

    python bench/commit_runs.py [--records 63] [--run 16] [--rounds 5]

--records 63 gives the ~64 KiB batches of bench/native.py's produce_gib_s (1 KiB records);
--records 1 a 1 KiB batch. Prints the median (and range) microseconds per write per mode.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time
from pathlib import Path

from rdmalog.config import BrokerConfig, TopicConfig
from rdmalog.store.log import PartitionLog
from rdmalog.store.records import build_batch

MODES = ("validate_written + commit_written(infos=)", "commit_run", "one by one")
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)


def measure(mode: str, batch: bytes, writes: int, run: int) -> float:
    """Microseconds per write committing `writes` copies of `batch` in `mode`."""
    n = len(batch)
    run = 1 if mode == "one by one" else run
    ends = [n * (j + 1) for j in range(run)]
    with tempfile.TemporaryDirectory(prefix="commit-runs-") as d:
        config = TopicConfig.from_overrides(
            BrokerConfig.from_sources(None, {}),
            {"segment.bytes": str(1 << 30), "preallocate": "true"},
        )
        plog = PartitionLog(Path(d), "t", 0, config).open()
        try:
            with plog.head_for_writing() as (head, pos):
                pass
            mm = head.mmap
            mm.madvise(MADV_POPULATE_READ, 0, (writes + run) * n)
            spent = 0.0
            for _ in range(0, writes, run):
                for j in range(run):
                    mm[pos + j * n : pos + (j + 1) * n] = batch
                end = pos + run * n
                t0 = time.perf_counter()
                if mode == "one by one":
                    plog.commit_written(head, pos, end)
                elif mode == "commit_run":
                    if plog.commit_run(head, pos, ends) is None:
                        raise RuntimeError("the run was refused")
                else:
                    infos = plog.validate_written(head, pos, end)
                    plog.commit_written(head, pos, end, infos=infos)
                spent += time.perf_counter() - t0
                pos = end
        finally:
            plog.close()
    return spent / writes * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=63, help="1 KiB records per batch")
    ap.add_argument("--run", type=int, default=16, help="writes per run (the service's MAX_RUN)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    batch = bytes(build_batch([(None, os.urandom(1024)) for _ in range(args.records)]))
    writes = max(args.run, (64 << 20) // len(batch) // args.run * args.run)  # ~64 MiB a round
    writes = min(writes, 8192 // args.run * args.run)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for m in MODES:
            times[m].append(measure(m, batch, writes, args.run))
    print(f"{len(batch)} B batches, runs of {args.run}, {writes} writes a round, load "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    for m in MODES:
        t = times[m]
        print(f"{m:42} {statistics.median(t):7.2f} us per write [{min(t):.2f}-{max(t):.2f}]")


if __name__ == "__main__":
    main()

"""CRC-32C per buffer size: the C extensions' crc32c.h (through `_records.crc32c`) against the
`crc32c` package, and optionally against other builds of `_records` (e.g. main's, for a before/after).

    python bench/crc32c_speed.py [--ext NAME=PATH/_records.so ...] [--rounds 15]

Every round times each contender once per size, in turn (A B A B ...), so machine drift hits all
alike; the table gives the median over the rounds of the best-of-3 microseconds per call.
"""

import argparse
import importlib.util
import os
import statistics
import time

import crc32c as crc32c_package

from rdmalog.store import _records

SIZES = {"64 B": 64, "1 KiB": 1024, "16 KiB": 16 << 10, "555 KiB": 555 << 10, "4 MiB": 4 << 20}


def load_records_ext(path: str):
    """Load a built `_records` extension from a file (another build of the same module)."""
    spec = importlib.util.spec_from_file_location("_records", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_call(fn, buf: bytes, total_bytes: int = 8 << 20) -> float:
    """Best of 3 of the mean microseconds per call over about total_bytes of input."""
    calls = max(1, total_bytes // len(buf))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(calls):
            fn(buf)
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ext", action="append", default=[], help="NAME=path of a _records build")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    contenders = {"crc32c package": crc32c_package.crc32c, "crc32c.h (this tree)": _records.crc32c}
    for spec in args.ext:
        name, path = spec.split("=", 1)
        contenders[name] = load_records_ext(path).crc32c
    buffers = {label: os.urandom(n) for label, n in SIZES.items()}
    for name, fn in contenders.items():
        assert all(fn(b) == crc32c_package.crc32c(b) for b in buffers.values()), name
    samples = {(c, s): [] for c in contenders for s in SIZES}
    for _ in range(args.rounds):
        for label, buf in buffers.items():
            for name, fn in contenders.items():
                samples[name, label].append(time_call(fn, buf))
    print("| us per call | " + " | ".join(SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name in contenders:
        cells = (f"{statistics.median(samples[name, s]):.3g}" for s in SIZES)
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""In-process cost of the store's batch validation, per codec: broker CPU per million records of
`validate_batches` with the header checks only (what the append path did before record-level
validation) and with Kafka's record-level checks (`RecordRules`: what it does now).

    python bench/batch_validation.py [--records 5000] [--seconds 1.0] [--fixed-value]

Batches like the Kafka-protocol benchmark's: 100-byte values (20 random bytes, then filler), no
keys, increasing timestamps, built by the store's own builder with each codec. Process CPU time,
one thread: the figure is the validation alone, without the network, the request codec or the
write. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import time

from rdmalog.store.compression import Codec
from rdmalog.store.records import Record, RecordRules, build_batch, validate_batches

T0 = 1_700_000_000_000


def cpu_per_batch(buf: memoryview, rules: RecordRules | None, seconds: float) -> float:
    """CPU seconds of one validation of `buf`, averaged over `seconds` of repetitions."""
    validate_batches(buf, rules=rules)
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        validate_batches(buf, rules=rules)
        n += 1
    return (time.process_time() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=5000, help="records per batch")
    ap.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per measurement")
    ap.add_argument(
        "--fixed-value",
        action="store_true",
        help="every record the same random 100-byte value, as the Kafka-protocol benchmark sends",
    )
    args = ap.parse_args()
    rng = random.Random(1)
    fixed = random.Random(7).randbytes(100) if args.fixed_value else None
    records = [
        Record(None, fixed or rng.randbytes(20) + b"x" * 80, [], T0 + i)
        for i in range(args.records)
    ]
    rules = RecordRules(T0, 3_600_000, 3_600_000, False, False, "bench-0")
    print("| codec | batch bytes | header checks (CPU-s/M records) | + record checks | added |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for codec in Codec:
        buf = memoryview(build_batch(records, compression=codec))
        before = cpu_per_batch(buf, None, args.seconds) / args.records * 1e6
        after = cpu_per_batch(buf, rules, args.seconds) / args.records * 1e6
        print(
            f"| {codec.name.lower()} | {len(buf):,} | {before:.4f} | {after:.4f} | "
            f"{after - before:.4f} |"
        )


if __name__ == "__main__":
    main()

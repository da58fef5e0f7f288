"""`python -m compat_tests --bootstrap HOST:PORT`: run every scenario against a broker, print one
PASS/FAIL line per scenario and a closing `N passed, N failed` line; exit 1 on any failure.
`--serve` starts a throwaway `rdmalog serve` instead."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from compat_tests.brokers import EXTERNAL_ENV, BrokerProcess
from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_tests", description=__doc__)
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(EXTERNAL_ENV),
        help=f"HOST:PORT of the broker (default: ${EXTERNAL_ENV})",
    )
    parser.add_argument(
        "--serve", action="store_true", help="start `rdmalog serve` in a temp dir and use it"
    )
    parser.add_argument("-k", dest="match", action="append", default=[],
                        help="only scenarios whose name contains this (repeatable)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
    args = parser.parse_args(argv)

    scenarios = list(load().values())
    if args.match:
        scenarios = [s for s in scenarios if any(m in s.name for m in args.match)]
    if args.list:
        for s in scenarios:
            print(f"{s.area:10} {s.name}")
        return 0
    if args.serve:
        with tempfile.TemporaryDirectory(prefix="compat-") as tmp:
            broker = BrokerProcess(Path(tmp) / "data", log_dir=Path(tmp))
            broker.start()
            try:
                print(f"# rdmalog serve on {broker.bootstrap}", flush=True)
                return run(scenarios, broker.bootstrap, args.verbose)
            finally:
                broker.close()
    if not args.bootstrap:
        parser.error(f"--bootstrap HOST:PORT is required (or set {EXTERNAL_ENV}, or --serve)")
    return run(scenarios, args.bootstrap, args.verbose)


def run(scenarios: list, bootstrap: str, verbose: bool) -> int:
    logging.basicConfig(level=logging.CRITICAL)  # the clients' own logs would drown the report
    passed = failed = skipped = 0
    for s in scenarios:
        start = time.monotonic()
        try:
            s.fn(bootstrap)
        except ScenarioSkip as e:
            skipped += 1
            print(f"SKIP {s.name}: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - any exception fails the scenario
            failed += 1
            first = (str(e).strip().splitlines() or [""])[0][:300]
            print(f"FAIL {s.name} ({time.monotonic() - start:.1f}s): "
                  f"{type(e).__name__}: {first}", flush=True)  # fmt: skip
            if verbose:
                traceback.print_exc()
            continue
        passed += 1
        print(f"PASS {s.name} ({time.monotonic() - start:.1f}s)", flush=True)
    if skipped:
        print(f"({skipped} skipped)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Sets up a fresh machine and runs the whole test suite: lint, unit, integration and compat tests.
# pytest exits non-zero (5) when it collects no test, so an empty run fails here too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test,spark
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"

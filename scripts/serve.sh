#!/usr/bin/env bash
# Sets up rdmalog and runs a broker on 127.0.0.1:9092 with its data in ./rdmalog-data (no ZooKeeper).
# Extra arguments go to `rdmalog serve`, e.g. scripts/serve.sh --override num.partitions=3
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/rdmalog serve "$@"

#!/usr/bin/env bash
# Installs what rdmalog needs on a fresh Debian machine: system packages (kcat, Node.js and ZooKeeper
# for the tests, a Java 17 runtime for PySpark and the Java client), a virtualenv in .venv with the
# project and the given pip extras, and for `test` the KafkaJS and kafka-clients (jar) compat
# dependencies.
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh test,spark
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

need_apt=()
# the store's C extension links zlib, and lz4, zstd and snappy when present (batches are checked as
# they inflate; without one of the three, that codec's records are checked through Python)
[[ -f /usr/include/zlib.h ]] || need_apt+=(zlib1g-dev)
[[ -f /usr/include/lz4frame.h ]] || need_apt+=(liblz4-dev)
[[ -f /usr/include/zstd.h ]] || need_apt+=(libzstd-dev)
[[ -f /usr/include/snappy-c.h ]] || need_apt+=(libsnappy-dev)
[[ -f /usr/include/libdeflate.h ]] || need_apt+=(libdeflate-dev) # gzip's common form, faster
if [[ ",$extras," == *",test,"* ]]; then
    command -v kcat >/dev/null || need_apt+=(kcat)
    command -v npm >/dev/null || need_apt+=(nodejs npm)  # KafkaJS compat scenarios
    # the verbs transport's mapping is checked against Debian's pyverbs (no device needed)
    [[ -d /usr/lib/python3/dist-packages/pyverbs ]] || need_apt+=(python3-pyverbs)
    # the cluster tests run a real ZooKeeper (Debian's 3.8: /usr/share/java/zookeeper.jar)
    [[ -f /usr/share/java/zookeeper.jar ]] || need_apt+=(zookeeper)
fi
if [[ ",$extras," == *",spark,"* || ",$extras," == *",test,"* ]]; then
    # PySpark, and the Java kafka-clients compat scenarios; javac and jar build the JVM reader
    command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
    command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
fi
if ((${#need_apt[@]})); then
    sudo_cmd=()
    [[ $(id -u) == 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Set up once: a stamp records what the last successful setup installed from (the extras, the
# packaging files, the C sources, the JVM reader's sources and the JS lock file); a later call with the same
# inputs returns at once.
stamp=".venv/.setup-${extras:-base}"
inputs=$(cat pyproject.toml setup.py compat_tests/js/package-lock.json rdmalog/rdma/*/*.c rdmalog/rdma/*/*.h rdmalog/store/*.c \
    rdmalog/store/*.h $(find rdmalog/spark/java -type f -not -path '*/build/*' | sort) 2>/dev/null \
    | sha256sum | cut -d' ' -f1)
if [[ -x .venv/bin/rdmalog && -f "$stamp" && "$(cat "$stamp")" == "$inputs" ]]; then
    exit 0
fi

python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
if [[ -n "$extras" ]]; then
    .venv/bin/pip install -q -e ".[$extras]"
else
    .venv/bin/pip install -q -e .
fi
if [[ ",$extras," == *",spark,"* ]]; then
    # the JVM reader's jar (rdmalog/spark/java), compiled against the pyspark wheel's jars
    .venv/bin/python -m rdmalog.spark.jvm >/dev/null
fi
if [[ ",$extras," == *",test,"* ]]; then
    npm ci --prefix compat_tests/js --no-audit --no-fund --loglevel=error
    # Apache Kafka's Java client for compat_tests (pinned jars, sha256-checked; see compat_tests/java.py)
    .venv/bin/python -m compat_tests.java --fetch >/dev/null \
        || echo "warning: kafka-clients jars not fetched; the Java compat scenarios will be skipped" >&2
fi
echo "$inputs" >"$stamp"

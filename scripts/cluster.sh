#!/usr/bin/env bash
# A cluster on this host to try: ZooKeeper (Debian's package) and three rdmalog brokers in Kafka's
# ZooKeeper mode, with replication factor 3 and min.insync.replicas=2 by default.
#
#   scripts/cluster.sh start     ZooKeeper on 127.0.0.1:2181, brokers 1..3 on 127.0.0.1:9092..9094
#   scripts/cluster.sh status    who runs, who is controller, the brokers ZooKeeper knows
#   scripts/cluster.sh stop      brokers first (controlled shutdown), then ZooKeeper
#   scripts/cluster.sh kill N    kill -9 broker N (try a failover);  scripts/cluster.sh start  brings it back
#
# Everything lives in ./rdmalog-cluster (RDMALOG_CLUSTER_DIR): zoo.cfg and ZooKeeper's data, each
# broker's data dir, logs and pid files. Clients bootstrap from 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094.
# Ports: ZK_PORT (2181) and BASE_PORT (9092). Extra `--override key=value` arguments after
# `start` go to every broker.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${RDMALOG_CLUSTER_DIR:-$PWD/rdmalog-cluster}"
zk_port="${ZK_PORT:-2181}"
base_port="${BASE_PORT:-9092}"
brokers=(1 2 3)
zk_jar=/usr/share/java/zookeeper.jar  # its manifest's Class-Path names the jars it needs

running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_port() {  # host port seconds
    local deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
        sleep 0.2
    done
    return 1
}

start_zookeeper() {
    local pid="$dir/zookeeper.pid"
    if running "$pid"; then return; fi
    [[ -f $zk_jar ]] || { echo "ZooKeeper is not installed: apt-get install zookeeper (scripts/setup.sh test)" >&2; exit 1; }
    mkdir -p "$dir/zookeeper/data"
    cat >"$dir/zookeeper/zoo.cfg" <<EOF
tickTime=2000
dataDir=$dir/zookeeper/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
EOF
    nohup java -Xmx256m -cp "$zk_jar" org.apache.zookeeper.server.quorum.QuorumPeerMain \
        "$dir/zookeeper/zoo.cfg" >>"$dir/zookeeper/zookeeper.log" 2>&1 &
    echo $! >"$pid"
    wait_port 127.0.0.1 "$zk_port" 30 || { echo "ZooKeeper did not start: $dir/zookeeper/zookeeper.log" >&2; exit 1; }
    echo "ZooKeeper on 127.0.0.1:$zk_port"
}

start_broker() {  # id, extra args...
    local id=$1; shift
    local port=$((base_port + id - 1))
    local home="$dir/broker$id"
    local pid="$home/broker.pid"
    if running "$pid"; then return; fi
    mkdir -p "$home"
    nohup .venv/bin/rdmalog serve --listen "127.0.0.1:$port" --data-dir "$home/data" \
        --override "broker.id=$id" \
        --override "zookeeper.connect=127.0.0.1:$zk_port" \
        --override default.replication.factor=3 \
        --override offsets.topic.replication.factor=3 \
        --override min.insync.replicas=2 \
        "$@" >>"$home/broker.log" 2>&1 &
    echo $! >"$pid"
    wait_port 127.0.0.1 "$port" 60 || { echo "broker $id did not start: $home/broker.log" >&2; exit 1; }
    echo "broker $id on 127.0.0.1:$port (log $home/broker.log)"
}

stop_pid() {  # pidfile, signal
    local pid="$1"
    if running "$pid"; then
        kill "-$2" "$(cat "$pid")"
        for _ in $(seq 1 300); do running "$pid" || break; sleep 0.1; done
    fi
    rm -f "$pid"
}

zk() {  # four-letter word
    (exec 3<>"/dev/tcp/127.0.0.1/$zk_port" && printf '%s' "$1" >&3 && cat <&3) 2>/dev/null || true
}

case "${1:-}" in
    start)
        shift
        if ! .venv/bin/python -c 'import kazoo, gateway' 2>/dev/null; then
            scripts/setup.sh cluster >/dev/null
        fi
        start_zookeeper
        for id in "${brokers[@]}"; do start_broker "$id" "$@"; done
        echo "bootstrap: $(for id in "${brokers[@]}"; do printf '127.0.0.1:%d,' $((base_port + id - 1)); done | sed 's/,$//')"
        ;;
    stop)
        for id in "${brokers[@]}"; do stop_pid "$dir/broker$id/broker.pid" TERM; done
        stop_pid "$dir/zookeeper.pid" TERM
        echo "stopped (data kept in $dir)"
        ;;
    kill)
        id="${2:?which broker? 1, 2 or 3}"
        stop_pid "$dir/broker$id/broker.pid" KILL
        echo "broker $id killed"
        ;;
    status)
        for id in "${brokers[@]}"; do
            if running "$dir/broker$id/broker.pid"; then state=running; else state=stopped; fi
            echo "broker $id: $state (127.0.0.1:$((base_port + id - 1)))"
        done
        if running "$dir/zookeeper.pid"; then
            echo "zookeeper: running (127.0.0.1:$zk_port) $(zk srvr | grep Mode || true)"
            .venv/bin/python - "$zk_port" <<'EOF'
import json, sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=f"127.0.0.1:{sys.argv[1]}", timeout=5)
zk.start(timeout=5)
ids = sorted(int(i) for i in zk.get_children("/brokers/ids")) if zk.exists("/brokers/ids") else []
ctrl = json.loads(zk.get("/controller")[0])["brokerid"] if zk.exists("/controller") else None
print(f"registered brokers: {ids}, controller: {ctrl}")
zk.stop()
EOF
        else
            echo "zookeeper: stopped"
        fi
        ;;
    *)
        sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac

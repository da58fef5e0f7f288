"""`rdmalog cluster`: the cluster id, controller and brokers (DescribeCluster), and each broker's log
directories with the size and lag of every partition replica (DescribeLogDirs, kafka-log-dirs.sh)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gateway.cli.common import CliError, add_connection_options, admin_client, out, split_list


def register(sub) -> list[argparse.ArgumentParser]:
    cluster = sub.add_parser(
        "cluster", help="brokers, controller and log directories", description=__doc__
    )
    add_connection_options(cluster, top=True)
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="cluster id, controller and brokers")
    add_connection_options(describe)
    log_dirs = actions.add_parser("log-dirs", help="log directories and partition sizes")
    add_connection_options(log_dirs)
    log_dirs.add_argument("--topic-list", action="append", default=[], metavar="T1,T2")
    log_dirs.add_argument("--broker-list", action="append", default=[], metavar="ID1,ID2")
    log_dirs.add_argument("--json", action="store_true", help="kafka-log-dirs.sh's JSON")
    cluster.set_defaults(func=run)
    return [cluster, describe, log_dirs]


def run(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        if args.action == "describe":
            return _describe(admin)
        return _log_dirs(admin, args)


def _describe(admin: Any) -> int:
    info = admin.describe_cluster()
    out(f"Cluster ID: {info.get('cluster_id')}")
    out(f"Controller: {info.get('controller_id')}")
    for b in sorted(info.get("brokers", []), key=lambda b: b["broker_id"]):
        rack = b.get("rack")
        out(
            f"Broker: {b['broker_id']}\tHost: {b['host']}\tPort: {b['port']}"
            + (f"\tRack: {rack}" if rack else "")
        )
    return 0


def _log_dirs(admin: Any, args: argparse.Namespace) -> int:
    topics = split_list(args.topic_list) or None
    brokers = [int(b) for b in split_list(args.broker_list)] or None
    answer = admin.describe_log_dirs(topic_partitions=topics, brokers=brokers)
    shown = []
    for entry in _as_list(answer):
        broker = entry.get("broker", entry.get("node_id"))
        dirs = []
        for d in entry.get("log_dirs", entry.get("results", [])):
            if d.get("error_code"):
                raise CliError(f"broker {broker}, {d.get('log_dir')}: error {d['error_code']}")
            partitions = [
                {
                    "partition": f"{t.get('name')}-{p.get('partition_index')}",
                    "size": p.get("partition_size"),
                    "offsetLag": p.get("offset_lag"),
                    "isFuture": p.get("is_future_key", False),
                }
                for t in d.get("topics", [])
                for p in t.get("partitions", [])
            ]
            dirs.append(
                {
                    "logDir": d.get("log_dir"),
                    "error": None,
                    "partitions": sorted(partitions, key=lambda p: p["partition"]),
                    "totalBytes": d.get("total_bytes"),
                    "usableBytes": d.get("usable_bytes"),
                }
            )
        shown.append({"broker": broker, "logDirs": dirs})
    if args.json:
        out(json.dumps({"version": 1, "brokers": shown}))
        return 0
    for broker in shown:
        for d in broker["logDirs"]:
            out(
                f"Broker: {broker['broker']}\tLogDir: {d['logDir']}\tTotalBytes: "
                f"{d['totalBytes']}\tUsableBytes: {d['usableBytes']}"
            )
            for p in d["partitions"]:
                out(f"\t{p['partition']}\tSize: {p['size']}\tOffsetLag: {p['offsetLag']}")
    return 0


def _as_list(answer: Any) -> list[dict[str, Any]]:
    """kafka-python answers a list of per-broker dicts (or a dict by broker id)."""
    if isinstance(answer, dict):
        return [{"broker": k, **v} if isinstance(v, dict) else v for k, v in answer.items()]
    return list(answer)

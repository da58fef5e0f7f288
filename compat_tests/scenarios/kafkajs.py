"""KafkaJS (Node.js): compat_tests/js/scenarios.js run with `node`, one JSON result per scenario.

Needs node and `npm ci --prefix compat_tests/js`; skipped otherwise. Records the Node side writes are
read back here with confluent-kafka too, so the KafkaJS batches (gzip, idempotent) are checked
against a second client."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from compat_tests.clients import ck_consume
from compat_tests.common import ScenarioSkip, compare, make_records
from compat_tests.scenarios import scenario

JS_DIR = Path(__file__).resolve().parent.parent / "js"
SCRIPT = JS_DIR / "scenarios.js"
NODE_TIMEOUT_S = 45.0  # every step inside is bounded by 20 s; a group join costs ~3 s
PARTITIONS = 3


def kafkajs(bootstrap: str, name: str) -> dict[str, Any]:
    """Run one scenario of scenarios.js; its JSON result, asserted ok."""
    node = shutil.which("node")
    if node is None:
        raise ScenarioSkip("node is not installed")
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        raise ScenarioSkip("kafkajs is not installed: run npm ci --prefix compat_tests/js")
    try:
        proc = subprocess.run(
            [node, str(SCRIPT), bootstrap, name],
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"kafkajs {name} ran over {NODE_TIMEOUT_S} s: {e.stdout!r}") from e
    lines = proc.stdout.strip().splitlines()
    assert lines, f"kafkajs {name} exited {proc.returncode} without a result: {proc.stderr}"
    result = json.loads(lines[-1])
    assert result.get("ok") is True and proc.returncode == 0, (
        f"kafkajs {name} failed: {result.get('error')}\n{result.get('stack', '')}\n{proc.stderr}"
    )
    return result


def reread(bootstrap: str, result: dict[str, Any]) -> None:
    """confluent-kafka reads the records scenarios.js wrote (make_records of its tag and base ts)."""
    sent = make_records(result["records"], PARTITIONS, result["tag"], result["baseTs"])
    got = ck_consume(bootstrap, result["topic"], PARTITIONS, len(sent))
    compare(sent, got)


@scenario("kafkajs-produce-consume-group", "kafkajs")
def group_roundtrip(bootstrap: str) -> None:
    """Keyed records with headers and timestamps read back through a group; the commits are what
    a second member of the group resumes from (it sees only a record produced after it joined)."""
    res = kafkajs(bootstrap, "produce-consume-group")
    assert res["records"] == 30, res
    assert res["committed"] == [[0, 10], [1, 10], [2, 10]], res
    assert res["secondMemberAssignment"] == {res["topic"]: [0, 1, 2]}, res


@scenario("kafkajs-group-rebalance", "kafkajs")
def group_rebalance(bootstrap: str) -> None:
    """A second member joins a running group (auto-commit): two partitions each, every record
    delivered once, the second member reads no record the first one had committed."""
    res = kafkajs(bootstrap, "group-rebalance")
    assigned = res["assigned"]
    assert sorted(assigned["a"] + assigned["b"]) == [0, 1, 2, 3], res
    assert res["a"] + res["b"] == 48 and res["b"] == 4, res


@scenario("kafkajs-gzip-roundtrip", "kafkajs")
def gzip_roundtrip(bootstrap: str) -> None:
    res = kafkajs(bootstrap, "gzip-roundtrip")
    assert res["records"] == 30, res
    reread(bootstrap, res)


@scenario("kafkajs-admin", "kafkajs")
def admin(bootstrap: str) -> None:
    """createTopics (and again: refused), listTopics, fetchTopicMetadata, fetchTopicOffsets,
    fetchTopicOffsetsByTimestamp, describeConfigs (all, and by name), deleteTopics."""
    res = kafkajs(bootstrap, "admin")
    assert res["offsets"] == [[0, "0", "4"], [1, "0", "4"], [2, "0", "4"]], res
    assert res["configEntries"] > 3, res


@scenario("kafkajs-idempotent-producer", "kafkajs")
def idempotent(bootstrap: str) -> None:
    res = kafkajs(bootstrap, "idempotent-producer")
    assert res["high"] == [[0, 20], [1, 20], [2, 20]], res
    reread(bootstrap, res)

"""kcat (librdkafka's command-line client): metadata, keyed produce from stdin with each codec,
consume back the exact lines."""

from __future__ import annotations

import json
import shutil
import subprocess

from compat_tests.common import CODECS, TIMEOUT_S, ScenarioSkip, create_topic, unique_topic
from compat_tests.scenarios import scenario

LINES = 25


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        raise ScenarioSkip("kcat is not installed")
    proc = subprocess.run(
        [exe, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
    )
    assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    return proc


@scenario("kcat-metadata", "kcat")
def kcat_metadata(bootstrap: str) -> None:
    topic = unique_topic("kcat-md")
    create_topic(bootstrap, topic, 2)
    md = json.loads(kcat("-b", bootstrap, "-L", "-J", "-t", topic, "-m", "15").stdout)
    # the advertised address may spell the host differently (localhost, a container name...):
    # require a broker on the bootstrap port
    port = bootstrap.rpartition(":")[2]
    names = [b["name"] for b in md["brokers"]]
    assert any(n.rpartition(":")[2] == port for n in names), (
        f"brokers {names}, bootstrap {bootstrap}"
    )
    [t] = [t for t in md["topics"] if t["topic"] == topic]
    assert "error" not in t, t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1], t
    ids = {b["id"] for b in md["brokers"]}
    assert all(p["leader"] in ids for p in t["partitions"]), t
    # the plain listing names the topic and the broker as well
    text = kcat("-b", bootstrap, "-L", "-m", "15").stdout
    assert f'topic "{topic}" with 2 partitions' in text, text
    assert any(f"at {n}" in text for n in names), text


def kcat_roundtrip(bootstrap: str, codec: str) -> None:
    topic = unique_topic(f"kcat-{codec}")
    create_topic(bootstrap, topic, 1)
    lines = [f"key-{i}:value {i} " + "x" * (i * 11) + f" end {codec}" for i in range(LINES)]
    lines.append("key-colons:value:with:colons")
    kcat(
        "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec,
        "-X", "linger.ms=20", stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
        "-K:", "-m", "15",
    ).stdout  # fmt: skip
    assert out.splitlines() == lines, f"kcat read back:\n{out}"
    # the offsets are 0..n-1, one record per line
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
        "-f", "%o %k\n",
    ).stdout  # fmt: skip
    want = [f"{i} {line.split(':', 1)[0]}" for i, line in enumerate(lines)]
    assert out.splitlines() == want, out


def _register(codec: str) -> None:
    @scenario(f"kcat-produce-consume-{codec}", "kcat")
    def run(bootstrap: str) -> None:
        kcat_roundtrip(bootstrap, codec)


for _codec in CODECS:
    _register(_codec)


@scenario("kcat-headers-and-json", "kcat")
def kcat_headers(bootstrap: str) -> None:
    """`-H` headers on produce; `-J` consume shows key, payload, headers, partition and offset."""
    topic = unique_topic("kcat-h")
    create_topic(bootstrap, topic, 1)
    kcat(
        "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-H", "trace=abc", "-H", "n=1",
        "-z", "zstd", stdin="k1:v1\nk2:v2\n",
    )  # fmt: skip
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-J",
    ).stdout  # fmt: skip
    msgs = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(m["key"], m["payload"], m["offset"]) for m in msgs] == [
        ("k1", "v1", 0),
        ("k2", "v2", 1),
    ], msgs
    for m in msgs:
        assert m["headers"] == ["trace", "abc", "n", "1"], m
        assert m["partition"] == 0 and m["tstype"] == "create" and m["ts"] > 0, m

"""The Docker image and compose files: built and run where a Docker daemon answers, checked by a linter
of the project's own rules otherwise (this kind of machine has the docker client but no daemon)."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE_FILES = [ROOT / "docker" / "compose.yml", ROOT / "docker" / "compose.cluster.yml"]


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    return instructions[starts[-1] :]


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for word, args in _instructions(DOCKERFILE):
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = shlex.split(args)
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: no such file in the build context"
            assert src not in ignored, f"COPY {src}: excluded by .dockerignore"


def test_image_builds_the_c_extensions_and_runs_as_a_non_root_user() -> None:
    instructions = _instructions(DOCKERFILE)
    text = " ".join(args for _, args in instructions)
    assert "rdmalog.rdma.transport._atomic64" in text, "the image must import the shm atomics"
    final = _final_stage(instructions)
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1] not in ("root", "0"), "the broker must not run as root"
    assert any(word == "HEALTHCHECK" for word, _ in final)


def test_entrypoint_keeps_listen_and_data_dir_whatever_the_arguments() -> None:
    final = _final_stage(_instructions(DOCKERFILE))
    entry = [args for word, args in final if word == "ENTRYPOINT"]
    assert entry, "no ENTRYPOINT"
    argv = yaml.safe_load(entry[-1])  # exec form is a JSON array
    assert isinstance(argv, list), "ENTRYPOINT must be in exec form (signals reach the broker)"
    assert argv[:2] == ["rdmalog", "serve"]
    assert "--listen" in argv and "--data-dir" in argv


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_files_are_well_formed(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    services = doc["services"]
    assert services
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name}: neither image nor build"
        build = svc.get("build")
        if build:
            context = (path.parent / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), f"{name}: dockerfile not found"
        for vol in svc.get("volumes", []):
            named = vol.split(":", 1)[0]
            if not named.startswith((".", "/")):
                assert named in (doc.get("volumes") or {}), f"{name}: volume {named} not declared"
        for dep in svc.get("depends_on", []):
            assert dep in services, f"{name}: depends on unknown service {dep}"
        command = svc.get("command")
        if command and "rdmalog" in str(svc.get("image", "")):
            assert isinstance(command, list)
            overrides = [command[i + 1] for i, a in enumerate(command) if a == "--override"]
            assert all("=" in o for o in overrides), f"{name}: malformed --override"


@pytest.mark.skipif(not _docker_daemon(), reason="no Docker daemon answers `docker info` here")
def test_image_builds_and_serves_kafka_clients(tmp_path: Path) -> None:
    tag = "rdmalog-test:ci"
    subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)], check=True, timeout=1200
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = f"rdmalog-test-{port}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:9092", tag,
         "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}"],
        check=True, timeout=60,
    )  # fmt: skip
    try:
        from kafka import KafkaConsumer, KafkaProducer

        deadline = time.monotonic() + 60
        while True:
            try:
                producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        producer.send("docker", b"hello").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(
            "docker",
            bootstrap_servers=f"127.0.0.1:{port}",
            auto_offset_reset="earliest",
            consumer_timeout_ms=20000,
        )
        assert [m.value for m in consumer] == [b"hello"]
        consumer.close()
    finally:
        subprocess.run(["docker", "stop", name], capture_output=True, timeout=60)

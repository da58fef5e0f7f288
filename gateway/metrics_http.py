"""The broker's HTTP endpoint (`metrics.port`, off by default): `GET /metrics` in Prometheus' text
format (gateway/metrics.py), `GET /health` answered 200 with a JSON summary while the broker serves
and 503 once it is stopping. Served on the broker's event loop: a scrape reads the broker's state
between requests, never concurrently with them. HTTP/1.0-style: one request per connection."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector
from prometheus_client.exposition import generate_latest

from gateway.metrics import BrokerCollector

if TYPE_CHECKING:
    from gateway.broker import Broker

log = logging.getLogger("gateway.metrics")

MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_S = 5.0


class MetricsServer:
    """`start(host, port)` serves /metrics and /health for `broker` until `stop()`."""

    def __init__(self, broker: Broker, version: str) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, version))
        ProcessCollector(registry=self.registry)
        self.server: asyncio.Server | None = None
        self.stopping = False
        self.started = time.monotonic()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, host, port)
        address = self.server.sockets[0].getsockname()[:2]
        log.info("metrics at http://%s:%d/metrics, health at /health", *address)
        return address

    async def stop(self) -> None:
        self.stopping = True
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            if len(head) > MAX_REQUEST_BYTES:
                raise ValueError("request too large")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            status, ctype, body = self._answer(method, path.split("?", 1)[0])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            status, ctype, body = "400 Bad Request", "text/plain", b"bad request\n"
        except Exception:
            log.exception("metrics endpoint failed")
            status, ctype, body = "500 Internal Server Error", "text/plain", b"error\n"
        try:
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _answer(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/health":
            return self._health()
        return "404 Not Found", "text/plain", b"try /metrics or /health\n"

    def _health(self) -> tuple[str, str, bytes]:
        b = self.broker
        topics = b.topics()
        status = {
            "status": "stopping" if self.stopping else "ok",
            "node_id": b.node_id,
            "cluster_id": b.cluster_id,
            "topics": len(topics),
            "partitions": sum(len(t.partitions) for t in topics),
            "uptime_s": round(time.monotonic() - self.started, 3),
        }
        code = "503 Service Unavailable" if self.stopping else "200 OK"
        return code, "application/json", json.dumps(status).encode() + b"\n"

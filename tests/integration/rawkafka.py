"""A minimal raw Kafka-protocol client for the integration tests, built on the gateway's codec: one
blocking socket, one request at a time (or send now, read later)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from gateway.protocol import decode_response, encode_request

TIMEOUT_S = 20.0


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock`; ConnectionError when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


class RawClient:
    """Requests as dicts keyed by kio's snake_case field names; responses decoded the same way."""

    def __init__(self, bootstrap: str, client_id: str = "raw-tests") -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.client_id = client_id
        self.correlation = 0
        self.pending: list[tuple[int, int, int]] = []

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        """Send a request without reading its answer (`receive` reads it later)."""
        self.correlation += 1
        frame = encode_request(api_key, version, self.correlation, body, self.client_id)
        self.sock.sendall(frame)
        self.pending.append((api_key, version, self.correlation))

    def receive(self) -> dict[str, Any]:
        """The answer to the oldest request sent and not yet read."""
        api_key, version, correlation = self.pending.pop(0)
        (size,) = struct.unpack(">i", self._exact(4))
        corr, body = decode_response(api_key, version, self._exact(size))
        assert corr == correlation, (corr, correlation)
        return body

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.send(api_key, version, body)
        return self.receive()

    def _exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def produce(
    client: RawClient, topic: str, partition: int, batch: bytes, acks: int = -1, version: int = 9
) -> dict[str, Any]:
    """One partition's Produce answer for `batch`."""
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout": int(TIMEOUT_S * 1000),
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}
        ],
    }
    resp = client.call(0, version, body)
    return resp["responses"][0]["partition_responses"][0]


def list_offset(client: RawClient, topic: str, partition: int, timestamp: int) -> dict[str, Any]:
    """ListOffsets v7 for one partition (-2 earliest, -1 latest, -3 max timestamp)."""
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": -1,
                        "timestamp": timestamp,
                    }
                ],
            }
        ],
    }
    return client.call(2, 7, body)["topics"][0]["partitions"][0]

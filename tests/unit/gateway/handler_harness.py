"""Run one API handler in-process through the wire codec, as the server would.

Each call encodes a request at a version, decodes it as the server does, runs the registered handler
against a Broker over a real store, encodes the answer at the same version and decodes it again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.broker import Broker, RequestContext
from gateway.handlers.registry import load_all
from gateway.protocol import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)
from rdmalog.config import BrokerConfig
from rdmalog.store.log_manager import Store

REGISTRY = load_all()


class HandlerHarness:
    """A Broker over a real store in `tmp` (with `overrides`) and a topic "t" of 2 partitions."""

    def __init__(self, tmp: Path, overrides: dict[str, str], topic_configs: dict[str, str]):
        self.config = BrokerConfig.from_sources(None, {"log.dirs": str(tmp), **overrides})
        self.store = Store(tmp, self.config).open(start_maintenance=False)
        self.broker = Broker(self.config, self.store)
        self.loop = asyncio.new_event_loop()
        self.broker.bind(self.loop, {"PLAINTEXT": ("127.0.0.1", 9999)})
        if "t" not in self.store.topics:  # a harness may reopen a previous one's store
            self.store.create_topic("t", 2, topic_configs)

    def call(self, api_key: int, version: int, body: dict) -> dict:
        """The decoded response of the handler of `api_key` to `body` at `version`."""
        frame = encode_request(api_key, version, 7, body, client_id="tester")
        mv = memoryview(frame)[4:]
        request = decode_request(parse_request_header(mv), mv)
        ctx = RequestContext(self.broker, api_key, version, 7, "tester", None)
        response = self.loop.run_until_complete(REGISTRY[api_key].handler(ctx, request))
        out, _ = encode_response(api_key, version, 7, response)
        corr, decoded = decode_response(api_key, version, bytes(out[4:]))
        assert corr == 7
        return decoded

    def close(self) -> None:
        self.loop.close()
        self.store.close()


def versions(api_key: int) -> list[int]:
    """Every version the handler of `api_key` registers."""
    entry = REGISTRY[api_key]
    return list(range(entry.min_version, entry.max_version + 1))

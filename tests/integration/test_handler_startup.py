"""A handler module that fails to import stops start-up, instead of silently leaving its API out
of ApiVersions (the gateway is started in-process and would listen on 127.0.0.1)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import app, handlers
from gateway.handlers.registry import HANDLERS
from rdmalog.config import BrokerConfig


@pytest.fixture
def broken_handler(tmp_path, monkeypatch):
    """A listed handler module that raises on import."""
    (tmp_path / "k99_broken.py").write_text("raise ImportError('a missing dependency')\n")
    monkeypatch.setattr(handlers, "__path__", [*handlers.__path__, str(tmp_path)])
    monkeypatch.setitem(HANDLERS, 99, "k99_broken")


def test_a_handler_that_fails_to_import_stops_start_up(broken_handler, tmp_path):
    config = BrokerConfig.from_sources(
        None, {"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"}
    )
    with pytest.raises(ImportError, match="a missing dependency"):
        asyncio.run(app.start(config, ("127.0.0.1", 0)))

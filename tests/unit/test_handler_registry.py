"""The explicit handler list: every handler module is listed, and one that fails to import stops
start-up instead of silently leaving its API out of ApiVersions."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from gateway import app, handlers
from gateway.handlers.registry import HANDLERS, load_all, supported_apis
from rdmalog.config import BrokerConfig


def test_every_handler_module_is_listed_under_its_key():
    files = sorted(p.stem for p in Path(handlers.__path__[0]).glob("k[0-9][0-9]_*.py"))
    assert sorted(HANDLERS.values()) == files
    for key, module in HANDLERS.items():
        assert int(re.match(r"k(\d\d)_", module).group(1)) == key
    registry = load_all()
    assert [a["api_key"] for a in supported_apis()] == sorted(HANDLERS)
    assert set(registry) == set(HANDLERS)


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


def test_a_listed_module_must_register_its_key(tmp_path, monkeypatch):
    (tmp_path / "k98_silent.py").write_text('"""registers nothing"""\n')
    monkeypatch.setattr(handlers, "__path__", [*handlers.__path__, str(tmp_path)])
    with pytest.raises(RuntimeError, match="does not register API key 98"):
        load_all({98: "k98_silent"})

"""The explicit handler list: every handler module is listed under its key, and a listed module must
register it (tests/integration/test_handler_startup.py: a failed import stops start-up)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway import handlers
from gateway.handlers.registry import HANDLERS, load_all, supported_apis


def test_every_handler_module_is_listed_under_its_key():
    files = sorted(p.stem for p in Path(handlers.__path__[0]).glob("k[0-9][0-9]_*.py"))
    assert sorted(HANDLERS.values()) == files
    for key, module in HANDLERS.items():
        assert int(re.match(r"k(\d\d)_", module).group(1)) == key
    registry = load_all()
    assert [a["api_key"] for a in supported_apis()] == sorted(HANDLERS)
    assert set(registry) == set(HANDLERS)


def test_a_listed_module_must_register_its_key(tmp_path, monkeypatch):
    (tmp_path / "k98_silent.py").write_text('"""registers nothing"""\n')
    monkeypatch.setattr(handlers, "__path__", [*handlers.__path__, str(tmp_path)])
    with pytest.raises(RuntimeError, match="does not register API key 98"):
        load_all({98: "k98_silent"})
